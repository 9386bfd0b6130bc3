"""Memoise a function of spec objects on their identity: the oracle's per-model/per-cluster caches.

Pydantic specs can be unhashable (list fields) and hashing ~30 fields costs more than the formulas
they feed, so the key is the arguments' ids. Each entry keeps its arguments alive, so an id cannot be
reused by another object while cached; the cache is simply emptied when it reaches `maxsize`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def by_identity(maxsize: int = 512) -> Callable[[F], F]:
    """Decorator: call `fn` once per tuple of argument objects (by identity); positional arguments only."""

    def wrap(fn: F) -> F:
        cache: dict[Any, tuple[Any, Any]] = {}

        def miss(key: Any, objs: tuple[Any, ...]) -> Any:
            if len(cache) >= maxsize:
                cache.clear()
            value = fn(*objs)
            cache[key] = (objs, value)
            return value

        arity = fn.__code__.co_argcount
        if arity == 1:  # the common cases, without the generic key building

            def cached(obj: Any) -> Any:
                hit = cache.get(id(obj))
                return hit[1] if hit is not None else miss(id(obj), (obj,))
        elif arity == 2:

            def cached(a: Any, b: Any) -> Any:  # type: ignore[misc]
                hit = cache.get((id(a), id(b)))
                return hit[1] if hit is not None else miss((id(a), id(b)), (a, b))
        else:

            def cached(*objs: Any) -> Any:
                key = tuple(map(id, objs))
                hit = cache.get(key)
                return hit[1] if hit is not None else miss(key, objs)

        cached.cache_clear = cache.clear  # type: ignore[attr-defined]
        return wraps(fn)(cached)  # type: ignore[return-value]

    return wrap
