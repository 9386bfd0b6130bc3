"""Memoise a function of spec objects on their identity: the oracle's per-model/per-cluster caches.

Pydantic specs can be unhashable (list fields) and hashing ~30 fields costs more than the formulas
they feed, so the key is the arguments' ids. Each entry keeps its arguments alive, so an id cannot be
reused by another object while cached; the cache is simply emptied when it reaches `maxsize`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

FnT = TypeVar("FnT", bound=Callable[..., Any])


def by_identity(maxsize: int = 512) -> Callable[[FnT], FnT]:
    """Decorator: call `fn` (of one or more positional objects) once per argument object(s), by identity."""

    def wrap(fn: FnT) -> FnT:
        if fn.__code__.co_argcount < 1:
            raise TypeError(f"{fn.__name__}: by_identity caches functions of one or more objects")
        cache: dict[Any, tuple[Any, Any]] = {}

        def miss(key: Any, objs: tuple[Any, ...]) -> Any:
            if len(cache) >= maxsize:
                cache.clear()
            value = fn(*objs)
            cache[key] = (objs, value)
            return value

        if fn.__code__.co_argcount == 1:

            def cached(obj: Any) -> Any:
                hit = cache.get(id(obj))
                return hit[1] if hit is not None else miss(id(obj), (obj,))
        else:  # several arguments: a (model, cluster) pair, ...

            def cached(*objs: Any) -> Any:  # type: ignore[misc]
                key = tuple(map(id, objs))
                hit = cache.get(key)
                return hit[1] if hit is not None else miss(key, objs)

        cached.cache_clear = cache.clear  # type: ignore[attr-defined]
        return wraps(fn)(cached)  # type: ignore[return-value]

    return wrap
