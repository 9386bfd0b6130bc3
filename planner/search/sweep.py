"""Exhaustive sweep: the true top-k of the whole legal space under the oracle, by branch and bound.

Each parallel layout gets two upper bounds on the tokens/s/GPU of all its feature-knob points, from lower
bounds on their iteration time: a cheap one for every layout (`oracle.performance.bound.mean_rank_bounds`,
no pipeline timeline) and the tighter timeline one (`iteration_bounds`), taken only where a layout is scored.
Layouts are scored best first (`_expected_order`: the cheap bound less the pipeline bubble its schedule is
expected to leave); a worker skips a layout, without even its memory checks, when either bound is strictly
below the floor: the k-th best it has scored so far, or another worker's (`_floor`: each worker's k-th best is
at or below the whole space's), since none of its points can then enter the top-k. In a layout it does score,
each point gets the memory pre-filter, then the same test with the bound of its group (its FP8, MoE
dispatcher, overlaps and DP sharding; the bound holds for every recompute mode) where the group has two or
more fitting points (a group's bound costs about one simulation), and is simulated only if it passes. The
result equals scoring every fitting point, ties broken by config key. The layouts' legality is checked where
they are bounded, in the workers (`space.candidate_layouts`, `space.has_points`).

A worker takes the layouts in blocks (1, 2, 4, ... up to `SCORE_BLOCK`, best first: small blocks fill
its top-k early) and runs each step over the whole block at once (issue 26): the layout tests against the
floor as the block starts, the memory of every point of the layouts left (`estimate_points`, numpy), the
bounds of the groups with a fitting point (`iteration_bounds`), and the simulation of the points left
(`simulated_tokens_per_s_per_gpu_batch`: the timelines of one pipeline program run over arrays); each
batched call equals its scalar one to the last bit, so only which points are skipped depends on the blocks,
never the top-k. A point is a (layout, feature setting) pair of index arrays (`space.point_ids`): its memory
and its group come from the layout's and the setting's parts (`oracle.memory.parts`, one of each per layout
and per setting), and its `EffectiveConfig` is built (`space.point_configs`: the layout's fields from one
`resolve` of the layout, the feature fields from one per setting) only where the bounds need one, the first
fitting point of a group, and for each point that is simulated.

With `within` (the oracle's stated error, which the robust pick chooses within, `planner/search/pick.py`), the
sweep ranks `KEEP` more points than the top-k and returns those of them within that share of the best
beside the top-k: the robust pick then weighs up to k + KEEP layouts, not the top-k alone. KEEP bounds
the cost where the stated error is wide (MoE on AMD: ±45 %, where most of the space is within it):
at 500 the main job took 3.9 min against 2.4 min at 50 (measured 2026-12-02, `paratune tune ... --sweep`).
"""

from __future__ import annotations

import gc
import heapq
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from itertools import chain
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel

from paratune.oracle.cancel import checkpoint
from paratune.oracle.evaluate import evaluate_config
from paratune.oracle.layout import features, microbatch_count, replicas
from paratune.oracle.memory.estimate import estimate_points
from paratune.oracle.memory.parts import SettingPart, layout_part, setting_part
from paratune.oracle.performance import tokens_per_s_per_gpu
from paratune.oracle.performance.bound import iteration_bounds, mean_rank_bounds
from paratune.oracle.performance.simulate import simulated_tokens_per_s_per_gpu_batch
from paratune.oracle.specs import ClusterSpec, EffectiveConfig, EvalResult, Workload

from .space import (
    base_config,
    bound_group,
    bound_variants,
    candidate_layouts,
    has_points,
    knob_points,
    layout_knobs,
    menu,
    point_configs,
    point_ids,
    setting_class,
)


class SweepResult(BaseModel):
    """What a sweep saw and the best layouts it found (best first).

    space_size: every legal point. scored: points simulated. pruned: points a bound ruled out unsimulated
    (a whole layout, or a point whose FP8 / MoE dispatcher / overlap / DP sharding group lost). fits: points found to
    fit in memory; a point is not checked once its layout is ruled out. top: the top-k, then the
    other ranked points within `within` of the best."""

    space_size: int
    fits: int
    scored: int
    pruned: int
    top: list[EvalResult]
    wall_s: float
    jobs: int


BLOCK = 512  # layouts whose bounds are computed together (a stopped caller is heard between blocks)
SCORE_BLOCK = 64  # the most layouts a worker scores at once (`_score_block`; `_blocks`)
KEEP = 50  # points ranked beyond the top-k when `within` is set, for the robust pick (module doc)
Ranked = tuple[float, str, EffectiveConfig]  # (tokens/s/GPU, config key, config): tuple order = ranking
_CTX: dict = {}
T = TypeVar("T")


def _init(workload: Workload, cluster: ClusterSpec, top_k: int, shared: Any = None) -> None:
    """A worker's search state; `shared`: the workers' common floor (`_floor`), a multiprocessing Value. A pool's
    worker runs without the cyclic collector (`_collector_off`)."""
    if shared is not None:
        gc.disable()
    m = menu(workload, cluster)
    _CTX.update(workload=workload, cluster=cluster, top_k=top_k, top=[], menu=m, variants=bound_variants(m),
                settings={}, classes={}, class_codes={}, shared=shared)


def _knobs(layout: dict) -> tuple:
    """`knob_points` arguments of a layout."""
    return layout_knobs(_CTX["workload"], layout, _CTX["menu"])


def _layout_bounds(candidates: list[dict]) -> list[tuple[dict, float]]:
    """The legal layouts of `candidates` (`space.has_points`), each with an upper bound on the tokens/s/GPU of
    every point of it without its pipeline timeline (`mean_rank_bounds`; the timeline's, tighter, is taken
    where it is scored, `_timeline_pruned`)."""
    workload, cluster, m = _CTX["workload"], _CTX["cluster"], _CTX["menu"]
    layouts = [x for x in candidates if has_points(workload, cluster, x, m)]
    keys = [bound_group(workload, x) for x in layouts]
    groups = dict(zip(reversed(keys), reversed(layouts)))  # one layout per group (its first): its cheap bound
    cfgs = _layout_configs(list(groups.values()))
    bounds = dict(zip(groups, _tps(cfgs, mean_rank_bounds(workload.model, cfgs, cluster, variants=_CTX["variants"]))))
    return [(x, bounds[k]) for x, k in zip(layouts, keys)]


def _layout_configs(layouts: list[dict]) -> list[EffectiveConfig]:
    """Each layout's first point: the config its layout bounds are taken on (they hold for all its points)."""
    return [_CTX["workload"].effective(next(knob_points(*_knobs(x)))) for x in layouts]


def _bound_tps(cfgs: list[EffectiveConfig], *, any_knobs: bool) -> list[float]:
    """Upper bound on the tokens/s/GPU of each of `cfgs` under any recompute mode or, with `any_knobs`, any
    feature knobs (`iteration_bounds`)."""
    workload, cluster = _CTX["workload"], _CTX["cluster"]
    return _tps(cfgs, iteration_bounds(workload.model, cfgs, cluster, any_knobs=any_knobs, variants=_CTX["variants"]))


def _tps(cfgs: list[EffectiveConfig], iteration_ms: list[float]) -> list[float]:
    """tokens/s/GPU of each of `cfgs` at its iteration time."""
    world = _CTX["cluster"].world_size
    return [tokens_per_s_per_gpu(cfg, world, t) for cfg, t in zip(cfgs, iteration_ms)]


def _timeline_pruned(firsts: list[EffectiveConfig]) -> list[bool]:
    """Whether the timeline bound (`iteration_bounds` over every feature knob, taken together) of each layout,
    given by its first point, loses against the floor; none does before there is one (`_floor`)."""
    if _floor() == -np.inf or not firsts:
        return [False] * len(firsts)
    return [_loses(tps) for tps in _bound_tps(firsts, any_knobs=True)]


def _floor() -> float:
    """The k-th best tokens/s/GPU known here: this worker's k-th best once its top-k is full, or any worker's
    (`shared`: each raises it to its own), -inf before. Every worker's k-th best is at or below the whole
    space's, so a point below the floor cannot enter the top-k."""
    top, shared = _CTX["top"], _CTX["shared"]
    own = top[0][0] if len(top) == _CTX["top_k"] else -np.inf
    return own if shared is None else max(own, shared.value)


def _raise_floor() -> None:
    """Offer this worker's k-th best to the other workers (`_floor`)."""
    top, shared = _CTX["top"], _CTX["shared"]
    if shared is not None and len(top) == _CTX["top_k"]:
        with shared.get_lock():
            shared.value = max(shared.value, top[0][0])


def _loses(tps: float) -> bool:
    """Whether `tps` is strictly below the floor (`_floor`)."""
    return tps < _floor()


def _setting(i: int, layout: dict, base: EffectiveConfig) -> tuple[SettingPart, tuple[tuple, ...]]:
    """Feature setting `i`'s memory part and its group on a layout without and with TP > 1 and EP > 1 (index
    2 * (TP > 1) + (EP > 1)), from its point on `layout` (the first met; neither depends on the layout): the
    feature settings but recompute, which the point bound of a group covers: FP8, grouped GEMMs, and the
    dispatch backend, overlaps and weight sharding as the oracle reads them (`oracle.layout.features`)."""
    hit = _CTX["settings"].get(i)
    if hit is None:
        workload, cluster = _CTX["workload"], _CTX["cluster"]
        cfg = point_configs(workload, _CTX["menu"], layout, base, [i])[0]
        c = cfg.__dict__
        groups = tuple((c["fp8"], c["moe_grouped_gemm"], dispatch, overlaps.ep, overlaps.tp, sharding.weights)
                       for dispatch, sharding, overlaps in (features(c, tp, ep) for tp in (False, True)
                                                            for ep in (False, True)))
        hit = _CTX["settings"][i] = (setting_part(workload.model, cfg, cluster), groups)
    return hit


def _score_block(tasks: list[tuple[dict, float]]) -> tuple[int, int, int, int, int, list[Ranked]]:
    """(layouts, points, fits, scored, pruned, entries into this worker's top-k) of a block of layouts with
    their bounds, each step over the whole block at once (module doc)."""
    workload, cluster, top, m = _CTX["workload"], _CTX["cluster"], _CTX["top"], _CTX["menu"]
    points = pruned = 0
    layouts: list[dict] = []
    ids: list[np.ndarray] = []
    for layout, bound in tasks:
        these = point_ids(workload, layout, m)
        points += len(these)
        if _loses(bound):
            pruned += len(these)
            continue
        layouts.append(layout)
        ids.append(these)
    bases = [base_config(workload, x) for x in layouts]
    # each layout's first point (`_layout_configs`' config, built from the layout's resolve: `point_configs`)
    firsts = [point_configs(workload, m, x, base, these[:1])[0] for x, base, these in zip(layouts, bases, ids)]
    kept = [i for i, lost in enumerate(_timeline_pruned(firsts)) if not lost]
    pruned += sum(len(x) for x in ids) - sum(len(ids[i]) for i in kept)
    layouts, bases, ids = [layouts[i] for i in kept], [bases[i] for i in kept], [ids[i] for i in kept]
    li = np.repeat(np.arange(len(layouts)), [len(x) for x in ids])
    si = np.concatenate(ids) if ids else np.zeros(0, dtype=np.intp)

    def config(k: int) -> EffectiveConfig:
        return point_configs(workload, m, layouts[li[k]], bases[li[k]], [si[k]])[0]

    memory, groups = _memory_and_groups(layouts, bases, ids, li, si)
    fitting = np.flatnonzero(memory <= cluster.memory_cap_gb)
    survivors = _unbeaten(fitting, groups, config) if _floor() > -np.inf else fitting
    cfgs = [config(k) for k in survivors.tolist()]
    rates = simulated_tokens_per_s_per_gpu_batch(workload.model, cfgs, cluster, _same(li[survivors], si[survivors]))
    entered: list[Ranked] = []
    for cfg, tps in zip(cfgs, rates):
        item = (tps, cfg.key, cfg)
        if len(top) < _CTX["top_k"]:
            heapq.heappush(top, item)
        elif item[:2] > top[0][:2]:
            heapq.heapreplace(top, item)
        else:
            continue
        entered.append(item)
    _raise_floor()
    return len(tasks), points, len(fitting), len(survivors), pruned + len(fitting) - len(survivors), entered


def _memory_and_groups(layouts: list[dict], bases: list[EffectiveConfig], ids: list[np.ndarray], li: np.ndarray,
                       si: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The per-GPU memory (GiB, `estimate_points`) of the points (layout `layouts[li]` with setting `si`; `bases`:
    the layouts' `base_config`, `ids`: their settings) and each point's group key: an integer, equal for two
    points of one layout in one group (`_setting`)."""
    workload, cluster = _CTX["workload"], _CTX["cluster"]
    for layout, base, these in zip(layouts, bases, ids):
        for i in set(these.tolist()) - _CTX["settings"].keys():
            _setting(i, layout, base)
    used, local = np.unique(si, return_inverse=True)
    local = local.reshape(-1)
    settings = [_CTX["settings"][i] for i in used.tolist()]
    memory = estimate_points(workload.model, cluster, [layout_part(workload.model, b, cluster) for b in bases],
                             [part for part, _ in settings], li, local).total_gb
    codes: dict[tuple, int] = {}
    table = np.array([[codes.setdefault(g, len(codes)) for g in groups] for _, groups in settings],
                     dtype=np.intp).reshape(-1, 4)
    sizes = np.array([2 * (x["tp"] > 1) + (x["ep"] > 1) for x in layouts], dtype=np.intp)
    return memory, li * len(codes) + table[local, sizes[li]]


def _same(li: np.ndarray, si: np.ndarray) -> list[tuple[int, int]] | None:
    """Per point (layout `li`, setting `si`): (its layout, its setting's `setting_class` code), equal only for points
    that differ in recompute alone (the simulation builds their pipeline and layer context once); None where
    the classes are unknown (user pins)."""
    workload, m, codes, classes = _CTX["workload"], _CTX["menu"], _CTX["class_codes"], _CTX["classes"]
    out = []
    for layout, setting in zip(li.tolist(), si.tolist()):
        code = codes.get(setting)
        if code is None:
            c = setting_class(workload, m, setting)
            if c is None:
                return None
            code = codes[setting] = classes.setdefault(c, len(classes))
        out.append((layout, code))
    return out


def _unbeaten(fitting: np.ndarray, groups: np.ndarray, config: Callable[[int], EffectiveConfig]) -> np.ndarray:
    """The `fitting` points whose group's bound does not lose against the floor (`_floor`). A group's
    bound (taken on its first fitting point, it holds for the whole group) costs about one simulation, so it
    is taken only for groups of two or more fitting points: a lone point is simulated instead (the top-k is
    the same either way; only `scored` and `pruned` move)."""
    _, first, inverse, counts = np.unique(groups[fitting], return_index=True, return_inverse=True, return_counts=True)
    shared = np.flatnonzero(counts > 1)
    bound = np.full(len(counts), np.inf)
    bound[shared] = _bound_tps([config(k) for k in fitting[first[shared]].tolist()], any_knobs=False)
    return fitting[~(bound[inverse.reshape(-1)] < _floor())]


# The share of 1F1B's pipeline bubble each schedule leaves, for the scoring order alone (`_expected_order`):
# ZB-H1 about a third, ZB-V about none (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", §3 and §5).
_BUBBLE_SHARE = {"1f1b": 1.0, "interleaved": 1.0, "zb": 1 / 3, "zbv": 0.0}


def _expected_order(task: tuple[dict, float]) -> float:
    """Sort key of a layout to score, smallest first: its cheap bound (`mean_rank_bounds`, which leaves the
    pipeline bubble out) less the bubble its schedule is expected to leave, (p-1)/(v·m) of the work for 1F1B and
    interleaved 1F1B (Narayanan et al. 2021, §2.2). Only the order moves with it, hence how soon the floor rises
    (one process: the main job simulates 2,715 points instead of 3,120, DeepSeek-V3 4,659 instead of 5,494),
    never the result."""
    layout, tps = task
    pp, v = layout["pp"], layout["vpp"] or 1
    dp = replicas(_CTX["cluster"].world_size, layout["tp"] * pp * layout["cp"])
    m = microbatch_count(_CTX["workload"].training.global_batch_size, layout["mbs"], dp)
    return -tps / (1 + _BUBBLE_SHARE[layout["pp_schedule"]] * (pp - 1) / (v * m))


def _blocks(tasks: list[T]) -> list[list[T]]:
    """`tasks` (best first) cut into blocks of 1, 2, 4, ... up to `SCORE_BLOCK` layouts: a worker's top-k
    fills from small blocks, so later ones are pruned against it, and then the blocks are large enough to
    batch (module doc)."""
    out, i, size = [], 0, 1
    while i < len(tasks):
        out.append(tasks[i:i + size])
        i, size = i + size, min(2 * size, SCORE_BLOCK)
    return out


@contextmanager
def _collector_off() -> Iterator[None]:
    """Python's cyclic collector off for a sweep: the sweep makes millions of short-lived objects beside large
    caches, which each collection rescans (15 % of the main job's single-process sweep, 19 % of DeepSeek-V3's,
    measured 2026-12-02), and in forked workers it writes to every inherited object (copying the parent's
    pages). Reference counting still frees the sweep's objects: its peak memory did not move (366 MB)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _checked(step: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`step(*args, **kwargs)` unless the caller stopped the sweep (`oracle.cancel`)."""
    checkpoint()
    return step(*args, **kwargs)


def sweep(workload: Workload, cluster: ClusterSpec, *, top_k: int = 10, within: float = 0.0, jobs: int | None = None,
          progress: Callable[[int, int], None] | None = None) -> SweepResult:
    """The top-k of every legal point, then those of the next `KEEP` within `within` of the best (module doc);
    `progress(done, total)` is called as layouts complete. A stopped caller (`oracle.cancel`) ends it between
    layouts with `Cancelled`."""
    with _collector_off():
        return _sweep(workload, cluster, top_k, within, jobs, progress)


def _context_order(layout: dict) -> tuple[int, ...]:
    """Layouts that share a layer context (TP, CP, EP, ETP, MBS; not PP) side by side, so one worker takes their
    context's fastest block times (`bound._fastest_times`) once for all of them."""
    return layout["tp"], layout["cp"], layout["ep"], layout["etp"], layout["mbs"]


def _sweep(workload: Workload, cluster: ClusterSpec, top_k: int, within: float, jobs: int | None,
           progress: Callable[[int, int], None] | None) -> SweepResult:
    start = time.perf_counter()
    ranks = top_k + (KEEP if within > 0 else 0)
    _init(workload, cluster, ranks)
    candidates = sorted(candidate_layouts(workload, cluster, _CTX["menu"]), key=_context_order)
    chunks = [candidates[i:i + BLOCK] for i in range(0, len(candidates), BLOCK)]
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(_blocks(candidates)) or 1))
    counts = [0, 0, 0, 0, 0]
    ranked: list[Ranked] = []
    layouts: list[tuple[dict, float]] = []

    def ranked_blocks(parts: Iterable[list[tuple[dict, float]]]) -> list[list[tuple[dict, float]]]:
        """The legal layouts with their bounds (`parts`: each chunk's, in order), best expected first, in blocks."""
        for part in parts:
            checkpoint()  # a stopped caller ends the sweep between chunks of bounds
            layouts.extend(part)
        return _blocks(sorted(layouts, key=_expected_order))

    def absorb(parts: Iterable[tuple]) -> None:
        for part in parts:
            checkpoint()  # a stopped caller ends the sweep here; leaving the pool's block terminates its workers
            counts[:] = [a + b for a, b in zip(counts, part[:5])]
            ranked.extend(part[5])
            if progress:
                progress(counts[0], len(layouts))

    if jobs == 1:
        absorb(map(_score_block, ranked_blocks(map(_layout_bounds, chunks))))
    else:
        # The first chunk's bounds here: forked workers then start with Origami's torch and the oracle's caches
        # warm; the other chunks' bounds are taken by the pool, as the blocks are scored.
        first = _checked(_layout_bounds, chunks[0])
        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        shared = ctx.Value("d", -np.inf)
        with ctx.Pool(jobs, initializer=_init, initargs=(workload, cluster, ranks, shared)) as pool:
            blocks = ranked_blocks(chain([first], pool.imap(_layout_bounds, chunks[1:])))
            absorb(pool.imap_unordered(_score_block, blocks))
    _, space_size, fits, scored, pruned = counts
    best = heapq.nlargest(ranks, ranked, key=lambda t: t[:2])
    floor = (1 - within) * best[0][0] if best else 0.0
    top = [_checked(evaluate_config, workload, cluster, cfg, performance=True)
           for i, (tps, _, cfg) in enumerate(best) if i < top_k or tps >= floor]
    return SweepResult(space_size=space_size, fits=fits, scored=scored, pruned=pruned, top=top,
                       wall_s=time.perf_counter() - start, jobs=jobs)
