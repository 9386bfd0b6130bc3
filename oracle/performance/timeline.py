"""The pipeline timeline's two loops, run as machine code: ordering a schedule's ops into a program
(`program_order`, for `schedule._program`) and running a program (`rank_ends`).

A rank runs its ops in its order; an op starts when its rank is free and its dependency has arrived
(`schedule.py` module doc). Each loop is a few integer or float operations per op, thousands of ops per
timeline, tens of thousands of timelines and hundreds of programs per sweep: interpreted, the timelines were
the sweep's largest cost (about 0.3 ms each on DeepSeek-V3's pipelines) and the programs about 2.5 µs an op in
each worker. This file is Cython's pure-Python mode: the install compiles it to C (setup.py), and where it is
not compiled it runs as it reads (`compiled` says which). IEEE additions and comparisons in the order written,
no fast-math: the same bits either way (tests/test_hot_path.py).
"""

from __future__ import annotations

from itertools import chain

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


@cython.boundscheck(False)
@cython.wraparound(False)
def _order(kinds: cython.longlong[::1], stages: cython.longlong[::1], mbs: cython.longlong[::1],
           starts: cython.longlong[::1], owner: cython.longlong[::1], base: cython.longlong[::1], V: cython.Py_ssize_t,
           m: cython.Py_ssize_t) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(rank, duration index, dependency, edge index) of each op in a topological order (`program_order`); the
    ranks' ops lie in (kind, stage, micro-batch) columns, rank r's from `starts[r]` to `starts[r + 1]`."""
    p: cython.Py_ssize_t = starts.shape[0] - 1
    n: cython.Py_ssize_t = kinds.shape[0]
    out_rank = np.empty(n, dtype=np.int64)
    out_dur = np.empty(n, dtype=np.int64)
    out_dep = np.empty(n, dtype=np.int64)
    out_edge = np.empty(n, dtype=np.int64)
    rank_: cython.longlong[::1] = out_rank
    dur_: cython.longlong[::1] = out_dur
    dep_: cython.longlong[::1] = out_dep
    edge_: cython.longlong[::1] = out_edge
    placed: cython.longlong[::1] = np.full(3 * V * m, -1, dtype=np.int64)  # op (kind, stage, mb) -> its position
    waiting: cython.longlong[::1] = np.full(3 * V * m, -1, dtype=np.int64)  # an unplaced op -> the rank it holds
    ptr: cython.longlong[::1] = np.empty(p, dtype=np.int64)  # each rank's next op
    ready: cython.longlong[::1] = np.empty(p + n, dtype=np.int64)  # ranks that can go on (a stack)
    top: cython.Py_ssize_t = 0
    r: cython.Py_ssize_t
    for r in range(p - 1, -1, -1):
        ptr[r] = starts[r]
        ready[top] = r
        top += 1
    count: cython.Py_ssize_t = 0
    i: cython.Py_ssize_t
    kind: cython.longlong
    vs: cython.longlong
    mb: cython.longlong
    dep: cython.longlong
    edge: cython.longlong
    op: cython.longlong
    while top > 0:
        top -= 1
        r = ready[top]
        while ptr[r] < starts[r + 1]:
            i = ptr[r]
            kind = base[kinds[i]]
            vs = stages[i]
            mb = mbs[i]
            dep = -1
            edge = V - 1
            if kind == 0 and vs > 0:  # a forward waits for the previous stage's forward
                dep = ((0 * V) + vs - 1) * m + mb
                edge = vs - 1
            elif kind == 1:  # a backward for the next stage's backward, the last stage's for its forward
                if vs < V - 1:
                    dep = (1 * V + vs + 1) * m + mb
                    edge = vs
                else:
                    dep = (0 * V + vs) * m + mb
            if dep >= 0 and placed[dep] < 0:
                waiting[dep] = r  # an op is the dependency of at most one other
                break
            if dep >= 0 and owner[(dep // m) % V] == r:
                edge = V - 1
            op = (kind * V + vs) * m + mb
            placed[op] = count
            rank_[count] = r
            dur_[count] = kinds[i] * V + vs
            dep_[count] = placed[dep] if dep >= 0 else -1
            edge_[count] = edge
            count += 1
            ptr[r] += 1
            if waiting[op] >= 0:
                ready[top] = waiting[op]
                top += 1
                waiting[op] = -1
    return out_rank[:count], out_dur[:count], out_dep[:count], out_edge[:count]


def program_order(orders: list[list[tuple[int, int, int]]], owner: list[int], base: tuple[int, ...], V: int, m: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The ops of every rank (`orders`: (kind, virtual stage, micro-batch) in issue order; `owner`: each stage's
    rank; `base`: what each kind waits on, F 0 or B 1 or W 2) as a program: (rank, duration index = kind·V +
    stage, the position of the op it waits on or -1, its edge index: the stage boundary it crosses or V-1 for
    none), each rank's ops in its order and each after its dependency; fewer ops than given where the order
    deadlocks."""
    flat = np.fromiter(chain.from_iterable(chain.from_iterable(orders)), dtype=np.int64).reshape(-1, 3)
    starts = np.cumsum([0] + [len(order) for order in orders]).astype(np.int64)
    return _order(np.ascontiguousarray(flat[:, 0]), np.ascontiguousarray(flat[:, 1]), np.ascontiguousarray(flat[:, 2]),
                  starts, np.array(owner, dtype=np.int64), np.array(base, dtype=np.int64), V, m)


def rank_ends(program: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], durations: np.ndarray,
              edges: np.ndarray, p: int) -> np.ndarray:
    """Each rank's finish time (rows) of each layout (columns) of a `schedule._program`, from the layouts'
    durations and p2p times as columns (`schedule.timeline_inputs`)."""
    d = np.ascontiguousarray(durations.T, dtype=np.float64)
    e = np.ascontiguousarray(edges.T, dtype=np.float64)
    return _ends(*program, d, e, p).T
