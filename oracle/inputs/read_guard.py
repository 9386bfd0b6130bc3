"""Where input files may be read from: a caller (the MCP server) can bound every file the loaders
open — the workload, its `extends:` chain and model files, Primus presets, Hugging Face configs — to
its allowed roots; the CLI reads anything its user names."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

_check: ContextVar[Callable[[Path], Path] | None] = ContextVar("read_guard", default=None)


def guarded(path: str | Path) -> Path:
    """`path`, after the active guard (if any) has checked it may be read; raises InputError if not."""
    check = _check.get()
    return check(Path(path)) if check is not None else Path(path)


@contextmanager
def reads_under(check: Callable[[Path], Path]) -> Iterator[None]:
    """Within the block, every loader read goes through `check` (it returns the path or raises)."""
    token = _check.set(check)
    try:
        yield
    finally:
        _check.reset(token)
