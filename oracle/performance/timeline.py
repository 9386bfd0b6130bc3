"""The pipeline timeline's inner loop over a compiled program (`schedule._program`), run as machine code.

A rank runs its ops in program order; an op starts when its rank is free and its dependency has arrived
(`schedule.py` module doc). The loop is a few float additions and comparisons per op, thousands of ops per
timeline and tens of thousands of timelines per sweep: interpreted, it was the sweep's largest cost (about
0.3 ms a timeline on DeepSeek-V3's pipelines). This file is Cython's pure-Python mode: the install compiles it
to C (setup.py), and where it is not compiled it runs as it reads (`compiled` says which). IEEE additions and
comparisons in the order written, no fast-math: the same bits either way (tests/test_hot_path.py).
"""

from __future__ import annotations

import cython
import numpy as np

compiled: bool = cython.compiled  # whether this module runs as the compiled extension


@cython.boundscheck(False)
@cython.wraparound(False)
def _ends(ranks: cython.longlong[::1], dur_idx: cython.longlong[::1], deps: cython.longlong[::1],
          edge_idx: cython.longlong[::1], durations: cython.double[:, ::1], edges: cython.double[:, ::1],
          p: cython.Py_ssize_t) -> np.ndarray:
    """Each rank's finish time (columns) of each layout (rows): `durations` (layout, duration index) and `edges`
    (layout, edge index) feed the ops (rank, duration index, dependency op or -1, edge index) in topological
    order."""
    n: cython.Py_ssize_t = durations.shape[0]
    ops: cython.Py_ssize_t = ranks.shape[0]
    out = np.zeros((n, p))
    ends: cython.double[:, ::1] = out
    fin: cython.double[::1] = np.empty(ops)
    i: cython.Py_ssize_t
    j: cython.Py_ssize_t
    r: cython.Py_ssize_t
    dep: cython.Py_ssize_t
    t: cython.double
    arrive: cython.double
    for j in range(n):
        for i in range(ops):
            r = ranks[i]
            t = ends[j, r]  # the rank's last op so far ends here (0 before its first)
            dep = deps[i]
            if dep >= 0:
                arrive = fin[dep] + edges[j, edge_idx[i]]
                if arrive > t:
                    t = arrive
            t = t + durations[j, dur_idx[i]]
            fin[i] = t
            ends[j, r] = t
    return out


def rank_ends(program: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], durations: np.ndarray,
              edges: np.ndarray, p: int) -> np.ndarray:
    """Each rank's finish time (rows) of each layout (columns) of a `schedule._program`, from the layouts'
    durations and p2p times as columns (`schedule.timeline_inputs`)."""
    d = np.ascontiguousarray(durations.T, dtype=np.float64)
    e = np.ascontiguousarray(edges.T, dtype=np.float64)
    return _ends(*program, d, e, p).T
