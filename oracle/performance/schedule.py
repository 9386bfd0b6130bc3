"""Pipeline schedules simulated on a dependency timeline.

Each schedule is a static per-rank order of forward (F), backward-input (B) and weight-grad (W)
operations on virtual stages (`vs`), as the framework issues them: Megatron's 1F1B and interleaved
1F1B (B includes W), ZB-H1 (Qi et al. 2023: rank r defers r weight-grads to fill the cool-down
bubble) and ZB-V (two chunks per rank in a V: rank r holds stages r and 2p-1-r). A forward waits for
the previous virtual stage's forward (plus the p2p transfer), a backward for the next stage's
backward; a rank runs its ops in order. Bubbles, uneven stages and the head/tail imbalance all fall
out of the timeline.

Under overlap_moe_expert_parallel_comm (`paired`) Megatron's combined 1F1B runs each steady-state
forward beside a backward, so their layers' EP exchanges hide behind each other (`layers._ep_overlap`);
the warm-up forwards and cool-down backwards have no partner and run solo (FS, BS: their own durations,
the exchanges exposed). megatron-core schedules.py `get_pp_rank_microbatches` (@ d48bd6be0a) schedules
one warm-up micro-batch more with the overlap: 2(p-r-1) + (v-1)·p + 1 solo forwards on rank r, and as
many solo backwards at the end; combined_1f1b.py `combined_1f1b_schedule_for_no_pipelining` runs the
first forward and the last backward alone. The op order is kept as without the overlap: the extra
warm-up forward is the first steady-state forward counted solo, its backward the last steady-state one.

For speed the op order of a (schedule, p, v, m) is compiled once into a flat topological program, which
`timeline.py` runs as machine code; beyond 3p micro-batches the end times are extrapolated linearly from
runs at 2p and 3p (the steady state adds the same time per group of p micro-batches, never less than the
rank's own work: `extrapolated`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from ..cancel import checkpoint
from .timeline import program_order, rank_ends

F, B, W = 0, 1, 2
FS, BS = 3, 4  # a forward and a backward without a combined-1F1B partner (`paired` schedules)
BASE_KIND = (F, B, W, F, B)  # what each kind waits on and stands for: FS a forward, BS a backward
SPLIT_BACKWARD = ("zb", "zbv")  # schedules that run W as its own op


def _one_f_one_b(p: int, r: int, m: int) -> list[tuple[int, int, int]]:
    warm = min(p - r - 1, m)
    ops = [(F, r, i) for i in range(warm)]
    for i in range(m - warm):
        ops += [(F, r, warm + i), (B, r, i)]
    return ops + [(B, r, i) for i in range(m - warm, m)]


def _interleaved(p: int, v: int, r: int, m: int, paired: bool = False) -> list[tuple[int, int, int]]:
    """Megatron's interleaved 1F1B: micro-batches in groups of p, chunk by chunk; `paired` (the EP overlap's
    combined 1F1B): the first `warm` + 1 forwards and the last `warm` + 1 backwards solo (module doc)."""
    fwd, bwd = [], []
    for start in range(0, m, p):
        group = range(start, min(start + p, m))
        fwd += [(c, mb) for c in range(v) for mb in group]
        bwd += [(c, mb) for c in reversed(range(v)) for mb in group]
    total = m * v
    warm = total if m <= p else min(total, 2 * (p - r - 1) + (v - 1) * p)
    solo = min(total, warm + 1) if paired else 0
    f_kind = [FS if i < solo else F for i in range(total)]
    b_kind = [BS if i >= total - solo else B for i in range(total)]
    ops = [(f_kind[i], c * p + r, mb) for i, (c, mb) in enumerate(fwd[:warm])]
    for i in range(total - warm):
        (cf, mf), (cb, mb) = fwd[warm + i], bwd[i]
        ops += [(f_kind[warm + i], cf * p + r, mf), (b_kind[i], cb * p + r, mb)]
    return ops + [(b_kind[i], c * p + r, mb) for i, (c, mb) in enumerate(bwd) if i >= total - warm]


def _zb_h1(p: int, r: int, m: int) -> list[tuple[int, int, int]]:
    """ZB-H1: 1F1B warm-up, then r F-B pairs deferring W, then F-B-W, then B-W, then the rest of W."""
    ops: list[tuple[int, int, int]] = []
    nf = nb = nw = 0
    for _ in range(min(p - r - 1, m)):
        ops.append((F, r, nf))
        nf += 1
    for _ in range(r):
        if nf == m:
            break
        ops += [(F, r, nf), (B, r, nb)]
        nf, nb = nf + 1, nb + 1
    while nf < m:
        ops += [(F, r, nf), (B, r, nb), (W, r, nw)]
        nf, nb, nw = nf + 1, nb + 1, nw + 1
    while nb < m:
        ops += [(B, r, nb), (W, r, nw)]
        nb, nw = nb + 1, nw + 1
    return ops + [(W, r, i) for i in range(nw, m)]


def _zbv(p: int, r: int, m: int) -> list[tuple[int, int, int]]:
    """ZB-V (Qi et al. 2023 §6, as PyTorch's ScheduleZBVZeroBubble issues it); at least 2p-1
    micro-batches are planned and the ones past m dropped."""
    n = max(2 * p - 1, m)
    stage = (r, 2 * p - 1 - r)
    count: dict[tuple[int, int], int] = {}
    ops: list[tuple[int, int, int]] = []

    def emit(*steps: tuple[int, int]) -> None:
        for kind, chunk in steps:
            i = count.get((kind, chunk), 0)
            count[(kind, chunk)] = i + 1
            ops.append((kind, stage[chunk], i))

    def done(kind: int, chunk: int) -> int:
        return count.get((kind, chunk), 0)

    emit(*[(F, 0)] * (2 * (p - r) - 1))
    emit(*[(F, 1), (F, 0)] * r)
    emit(*[(F, 1), (B, 1), (W, 1)] * (p - r))
    while done(F, 1) < done(F, 0) or done(F, 0) < n:
        if done(F, 0) < n:
            emit((F, 0))
        emit((B, 0), (W, 0), (F, 1), (B, 1), (W, 1))
    emit(*[(B, 0), (B, 1)] * r)
    emit(*[(B, 0), (W, 0)] * (p - r))
    emit(*[(W, 1)] * (done(B, 1) - done(W, 1)))
    emit(*[(W, 0)] * (done(B, 0) - done(W, 0)))
    return [op for op in ops if op[2] < m]


def virtual_stages(schedule: str, p: int, v: int) -> int:
    return 2 * p if schedule == "zbv" else p * v


def rank_of(schedule: str, p: int, vs: int) -> int:
    """Pipeline rank that runs virtual stage `vs`."""
    if schedule == "zbv":
        return vs if vs < p else 2 * p - 1 - vs
    return vs % p


def rank_orders(schedule: str, p: int, v: int, m: int, paired: bool = False) -> list[list[tuple[int, int, int]]]:
    """(kind, virtual stage, micro-batch) ops of every rank, in issue order; `paired`: the EP overlap's solo
    forwards and backwards marked FS, BS (interleaved 1F1B, the only pipelined schedule Megatron runs the
    overlap in)."""
    if schedule == "zb":
        return [_zb_h1(p, r, m) for r in range(p)]
    if schedule == "zbv":
        return [_zbv(p, r, m) for r in range(p)]
    if v > 1:
        return [_interleaved(p, v, r, m, paired) for r in range(p)]
    return [_one_f_one_b(p, r, m) for r in range(p)]


@lru_cache(maxsize=1024)
def _program(schedule: str, p: int, v: int, m: int, paired: bool = False
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Topologically ordered ops as parallel integer arrays (rank, duration index, dependency, edge index): each
    rank's ops in its order, each after the op it depends on (`timeline.program_order`; any such order gives
    the timeline the same sums).

    Duration index = kind·V + vs (a solo FS or BS its own, `timeline_inputs`); the edge index picks the p2p
    time of a stage boundary (V-1 means none: same rank or no dependency)."""
    V = virtual_stages(schedule, p, v)
    orders = rank_orders(schedule, p, v, m, paired)
    checkpoint()  # a caller that gave up (oracle/cancel.py) stops the timeline here
    program = program_order(orders, [rank_of(schedule, p, vs) for vs in range(V)], BASE_KIND, V, m)
    if len(program[0]) < sum(len(order) for order in orders):
        raise RuntimeError(f"{schedule} schedule deadlocks at p={p} v={v} m={m}")
    return program


def timeline_inputs(schedule: str, f: tuple[float, ...], b: tuple[float, ...], w: tuple[float, ...],
                    p2p: tuple[float, ...], solo: tuple[tuple[float, ...], tuple[float, ...]] | None = None
                    ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(durations by duration index, p2p time by edge index) of a layout's ops (`_program`; numbers, or numpy
    arrays with one element per layout): schedules without a separate W run it inside B (b + 0.0 is b where
    a stage has no W); `solo`: the (F, B) of a stage's solo FS and BS ops, which only a `paired` program has."""
    folded = schedule not in SPLIT_BACKWARD
    durations = f + (tuple(x + y for x, y in zip(b, w)) + (0.0,) * len(w) if folded else b + w)
    if solo is None:
        return durations, p2p + (0.0,)
    fs, bs = solo
    return durations + fs + (tuple(x + y for x, y in zip(bs, w)) if folded else bs), p2p + (0.0,)


def rank_work(schedule: str, p: int, v: int, durations: Sequence[float]) -> tuple[float, ...]:
    """Each rank's work per steady-state micro-batch (ms): the durations (`timeline_inputs`' first part) of the F, B
    and W of the virtual stages it runs (a `paired` program's solo ops, past them, run only in warm-up and
    cool-down)."""
    return tuple(sum(durations[i] for i in mine) for mine in _rank_indices(schedule, p, v))


@lru_cache(maxsize=1024)
def _rank_indices(schedule: str, p: int, v: int) -> tuple[tuple[int, ...], ...]:
    """Per rank, the duration indices (kind·V + stage) of its F, B and W."""
    V = virtual_stages(schedule, p, v)
    return tuple(tuple(i for i in range(3 * V) if rank_of(schedule, p, i % V) == r) for r in range(p))


Timeline = tuple[tuple[float, ...], tuple[float, ...]]  # `timeline_inputs`: (durations, p2p times)
_ENDS: dict[tuple[str, int, int, int, bool, Timeline], tuple[float, ...]] = {}  # `rank_end_times_batch`'s ends, kept
ENDS_KEPT = 16384  # timelines whose ends are kept (about 2 kB each); past it the store starts again empty


def rank_end_times_batch(schedule: str, p: int, v: int, m: int, inputs: Sequence[Timeline], paired: bool = False
                         ) -> list[tuple[float, ...]]:
    """`rank_end_times` of many layouts with one program (m <= 3p micro-batches; `inputs`: each one's
    `timeline_inputs`; `paired`: the EP overlap's, module doc): `rank_end_times_arrays` over the distinct inputs not
    met before. The ends are kept (`_ENDS`): a search's layouts repeat timelines, across the blocks they are taken
    in (the layout bounds run 12,450 distinct of 20,175 on the README's main job, 6,671 of 44,001 on
    DeepSeek-V3's)."""
    keys = [(schedule, p, v, m, paired, x) for x in inputs]
    known = [_ENDS.get(k) for k in keys]
    todo = list(dict.fromkeys(k for k, e in zip(keys, known) if e is None))
    if not todo:
        return [e for e in known if e is not None]
    durations = np.array([k[5][0] for k in todo]).T
    edges = np.array([k[5][1] for k in todo]).T
    ends = rank_end_times_arrays(schedule, p, v, m, durations, edges, paired)
    new = dict(zip(todo, (tuple(row) for row in ends.T.tolist())))
    if len(_ENDS) + len(new) > ENDS_KEPT:
        _ENDS.clear()
    _ENDS.update(new)
    return [new[k] if e is None else e for k, e in zip(keys, known)]


def rank_end_times_arrays(schedule: str, p: int, v: int, m: int, durations: np.ndarray, edges: np.ndarray,
                          paired: bool = False) -> np.ndarray:
    """Each rank's end (rows) of each layout (columns) with one program (m <= 3p micro-batches; `durations`,
    `edges`: the layouts' `timeline_inputs` as columns; `paired`: the EP overlap's, module doc): each op starts
    when its rank is free and its dependency has arrived (`timeline.rank_ends`, compiled)."""
    return rank_ends(_program(schedule, p, v, m, paired), durations, edges, p)


def rank_end_times_many(schedule: str, p: int, v: int, m: int, inputs: Sequence[Timeline], paired: bool = False
                        ) -> list[tuple[float, ...]]:
    """`rank_end_times` of many layouts with one program, any m (`inputs`: each one's `timeline_inputs`): the
    distinct inputs run together (`rank_end_times_batch`); beyond 3p micro-batches the ends of 2p (lo) and
    3p (hi) are extrapolated (`extrapolated`: the timeline's steady state repeats per p micro-batches; the solo
    warm-up and cool-down ops of a `paired` program are the same at 2p and 3p). The same operations on each
    layout as on one, so a batch agrees to the last bit."""
    if m <= 3 * p:
        return rank_end_times_batch(schedule, p, v, m, inputs, paired)
    lows = rank_end_times_batch(schedule, p, v, 2 * p, inputs, paired)
    highs = rank_end_times_batch(schedule, p, v, 3 * p, inputs, paired)
    return [tuple(float(extrapolated(a, z, m, p, work)) for a, z, work in zip(lo, hi, rank_work(schedule, p, v, d)))
            for lo, hi, (d, _) in zip(lows, highs, inputs)]


def extrapolated(lo: Any, hi: Any, m: Any, p: int, busy: Any) -> Any:
    """A rank's end after m > 3p micro-batches from its ends after 2p (`lo`) and 3p (`hi`): lo + k·Δ, k = (m - 2p)/p,
    Δ the time the steady state adds per p micro-batches: hi - lo, but never less than the p micro-batches' work of
    the rank itself (`busy`: its F, B and W per micro-batch), which it runs one op at a time (numbers, or numpy
    arrays with one element per layout). The floor makes the end at least hi + (k-1)·p·busy, which rises with
    every op's time: the bound the search prunes with (`bound.extrapolation_bound`)."""
    return lo + (m - 2 * p) / p * np.maximum(hi - lo, p * busy)


@lru_cache(maxsize=8192)
def rank_end_times(schedule: str, p: int, v: int, m: int, f: tuple[float, ...], b: tuple[float, ...],
                   w: tuple[float, ...], p2p: tuple[float, ...],
                   solo: tuple[tuple[float, ...], tuple[float, ...]] | None = None) -> tuple[float, ...]:
    """When each pipeline rank finishes its last op of the iteration (ms): a batch of one
    (`rank_end_times_many`).

    f, b, w: per virtual stage durations (for schedules without a separate W, pass W folded into b
    and zeros in w); p2p: transfer time across each of the V-1 stage boundaries; `solo`: the EP overlap's
    (F, B) of the ops without a combined-1F1B partner (module doc), None without the overlap."""
    inputs = timeline_inputs(schedule, f, b, w, p2p, solo)
    return rank_end_times_many(schedule, p, v, m, [inputs], solo is not None)[0]
