"""The pipeline timeline's inner loop over a compiled program (`schedule._program`), run as machine code.

A rank runs its ops in program order; an op starts when its rank is free and its dependency has arrived
(`schedule.py` module doc). The loop is a few float additions and comparisons per op, thousands of ops per
timeline and tens of thousands of timelines per sweep: interpreted, it was the sweep's largest cost (about
0.3 ms a timeline on DeepSeek-V3's pipelines), so it is compiled with numba (LLVM), once per machine
(`cache=True` keeps the machine code beside this file). IEEE additions and comparisons in the same order as
the Python source, no fast-math: the same bits as the interpreted loop.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np


def _ends(ranks: np.ndarray, dur_idx: np.ndarray, deps: np.ndarray, edge_idx: np.ndarray, durations: np.ndarray,
          edges: np.ndarray, p: int) -> np.ndarray:
    """Each rank's finish time (columns) of each layout (rows): `durations` (layout, duration index) and `edges`
    (layout, edge index) feed the ops (rank, duration index, dependency op or -1, edge index) in topological
    order."""
    n, ops = durations.shape[0], ranks.shape[0]
    out = np.empty((n, p))
    fin = np.empty(ops)
    free = np.empty(p)
    for j in range(n):
        free[:] = 0.0
        for i in range(ops):
            r = ranks[i]
            t = free[r]
            dep = deps[i]
            if dep >= 0:
                arrive = fin[dep] + edges[j, edge_idx[i]]
                if arrive > t:
                    t = arrive
            t = t + durations[j, dur_idx[i]]
            fin[i] = t
            free[r] = t
        out[j] = free
    return out


@lru_cache(maxsize=1)
def _compiled() -> Any:
    """`_ends` compiled (numba is imported on the first timeline, not with the oracle)."""
    import numba

    return numba.njit(cache=True, nogil=True)(_ends)


def prepare() -> None:
    """Load the compiled loop now: a process that forks workers calls it first, so they inherit it (numba's
    import and cache load take about 0.3 s a process)."""
    _compiled()


def rank_ends(program: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], durations: np.ndarray,
              edges: np.ndarray, p: int) -> np.ndarray:
    """Each rank's finish time (rows) of each layout (columns) of a `schedule._program`, from the layouts'
    durations and p2p times as columns (`schedule.timeline_inputs`)."""
    d = np.ascontiguousarray(durations.T, dtype=np.float64)
    e = np.ascontiguousarray(edges.T, dtype=np.float64)
    return _compiled()(*program, d, e, p).T
