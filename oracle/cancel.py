"""Cooperative cancellation of long work (a sweep, the seed plan): the caller hands the worker a stop flag,
and the work calls `checkpoint()` between its steps, which raises `Cancelled` once the flag is set.

Python cannot stop a thread from outside; a server that gave up on a call (its deadline passed, or the
client cancelled it) sets the flag, so the thread ends at its next step instead of spinning on, holding its
CPU, for the rest of the search."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_stop: ContextVar[threading.Event | None] = ContextVar("stop", default=None)


class Cancelled(Exception):
    """The caller stopped waiting for this work; raised at the work's next `checkpoint()`."""


@contextmanager
def stoppable(flag: threading.Event) -> Iterator[None]:
    """Within the block (in this thread or context), `checkpoint()` raises once `flag` is set."""
    token = _stop.set(flag)
    try:
        yield
    finally:
        _stop.reset(token)


def checkpoint() -> None:
    """Raise `Cancelled` if the work running here was stopped; a no-op outside `stoppable`."""
    flag = _stop.get()
    if flag is not None and flag.is_set():
        raise Cancelled("stopped: the caller gave up on this work")
