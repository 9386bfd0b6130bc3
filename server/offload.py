"""Tool work off the event loop, under a deadline, stopped when abandoned.

Every tool whose work is more than a ledger read (scoring or checking a layout, explain, the seed plan, the
sweep, opening or exporting a run, an LLM call) runs here: in a worker thread of a pool of its own, so a slow
call never blocks another session's requests, and the stdin reader (which uses the default worker threads)
never waits for a free one. The call is given up after its deadline, or when the client cancels it: the
client then gets its answer at once, and the thread is told to stop (`oracle.cancel`), which the sweep and the
seed plan check between their steps.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.to_thread
from anyio.lowlevel import current_token
from mcp.server.mcpserver.exceptions import ToolError

from paratune.oracle.cancel import stoppable

T = TypeVar("T")

LAYOUT_S = 60.0  # one layout validated or scored, a run opened or exported: milliseconds to seconds
BENCHMARK_S = 900.0  # a layout timed on the local GPU: one layer of each type
EXPLAIN_S = 300.0  # tens of layouts projected
SEARCH_S = 3600.0  # the seed plan, or a sweep of a large space with one job
POOLS = {"tools": 8, "llm": 4}  # worker threads per pool and event loop; the rest queue, within their deadline
_limiters: dict[tuple[object, str], anyio.CapacityLimiter] = {}


def _limiter(pool: str) -> anyio.CapacityLimiter:
    """`pool`'s limiter on the running event loop."""
    return _limiters.setdefault((current_token(), pool), anyio.CapacityLimiter(POOLS[pool]))


async def off_loop(work: Callable[[], T], *, what: str, deadline_s: float = LAYOUT_S, pool: str = "tools",
                   late: str | None = None) -> T:
    """`work()` (`what`, e.g. "the sweep") in a worker thread of `pool`, its result or its exception; a ToolError
    saying it did not finish (or `late`) once `deadline_s` have passed, waiting for a thread included. Given
    up (deadline or cancellation), the thread is abandoned and its `oracle.cancel.checkpoint()` raises from
    then on."""
    stop = threading.Event()

    def run() -> T:
        with stoppable(stop):
            return work()

    try:
        with anyio.move_on_after(deadline_s):
            return await anyio.to_thread.run_sync(run, limiter=_limiter(pool), abandon_on_cancel=True)
        raise ToolError(late or f"{what} did not finish within {deadline_s:g} s and was stopped; the server "
                        "keeps serving")
    finally:
        stop.set()
