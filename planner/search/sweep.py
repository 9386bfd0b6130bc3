"""Exhaustive sweep: the true top-k of the whole legal space under the oracle, by branch and bound.

`oracle.performance.iteration_bound` gives each parallel layout a lower bound on the iteration time of
all its feature-knob points, hence an upper bound on their tokens/s/GPU. Layouts are scored best bound
first; a worker skips a layout, without even its memory checks, when that upper bound is strictly
below the k-th best it has scored so far, since none of its points can then enter the top-k. In a
layout it does score, each point gets the memory pre-filter, then the same test with the bound of its
group (its FP8, MoE dispatcher, overlaps and DP sharding; the bound holds for every recompute mode), and is
simulated only if it passes; once a group loses, its other points are skipped unchecked. The result
equals scoring every fitting point, ties broken by config key.

With `within` (the oracle's stated error, which the robust pick chooses within, `planner/search/pick.py`), the
sweep ranks `KEEP` more points than the top-k and returns those of them within that share of the best
beside the top-k: the robust pick then weighs up to k + KEEP layouts, not the top-k alone. KEEP bounds
the cost where the stated error is wide (MoE on AMD: ±45 %, where most of the space is within it):
at 500 the main job took 3.9 min against 2.4 min at 50 (measured 2026-12-02, `paratune tune ... --sweep`).
"""

from __future__ import annotations

import heapq
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from pydantic import BaseModel

from paratune.oracle.cancel import checkpoint
from paratune.oracle.evaluate import evaluate_config
from paratune.oracle.memory import estimate_memory
from paratune.oracle.performance import iteration_bound, tokens_per_s_per_gpu
from paratune.oracle.performance.bound import iteration_bounds
from paratune.oracle.performance.simulate import simulated_tokens_per_s_per_gpu
from paratune.oracle.specs import ClusterSpec, EffectiveConfig, EvalResult, Workload

from .space import (
    bound_variants,
    enumerate_layouts,
    knob_count,
    knob_points,
    layout_knobs,
    menu,
)


class SweepResult(BaseModel):
    """What a sweep saw and the best layouts it found (best first).

    space_size: every legal point. scored: points simulated. pruned: points a bound ruled out unsimulated
    (a whole layout, or a point whose FP8 / MoE dispatcher / overlap / DP sharding group lost). fits: points found to
    fit in memory; a point is not checked once its layout or group is ruled out. top: the top-k, then the
    other ranked points within `within` of the best."""

    space_size: int
    fits: int
    scored: int
    pruned: int
    top: list[EvalResult]
    wall_s: float
    jobs: int


BLOCK = 512  # layouts whose bounds are computed together (a stopped caller is heard between blocks)
KEEP = 50  # points ranked beyond the top-k when `within` is set, for the robust pick (module doc)
Ranked = tuple[float, str, EffectiveConfig]  # (tokens/s/GPU, config key, config): tuple order = ranking
_CTX: dict = {}
T = TypeVar("T")


def _init(workload: Workload, cluster: ClusterSpec, top_k: int) -> None:
    m = menu(workload, cluster)
    _CTX.update(workload=workload, cluster=cluster, top_k=top_k, top=[], menu=m, variants=bound_variants(m))


def _knobs(layout: dict) -> tuple:
    """`knob_points` arguments of a layout."""
    return layout_knobs(_CTX["workload"], layout, _CTX["menu"])


def _best_tps(cfg: EffectiveConfig, any_knobs: bool) -> float:
    """Upper bound on the tokens/s/GPU of `cfg` under any recompute mode or, with `any_knobs`, any
    feature knobs."""
    workload, cluster = _CTX["workload"], _CTX["cluster"]
    return tokens_per_s_per_gpu(cfg, cluster.world_size,
                                iteration_bound(workload.model, cfg, cluster, any_knobs=any_knobs,
                                                variants=_CTX["variants"]))


def _layout_bounds(layouts: list[dict]) -> list[float]:
    """Upper bound on the tokens/s/GPU of every point of each of `layouts`, computed together (the
    timelines of layouts with one pipeline shape run over arrays, `iteration_bounds`)."""
    workload, cluster = _CTX["workload"], _CTX["cluster"]
    cfgs = [workload.effective(next(knob_points(*_knobs(x)))) for x in layouts]
    bounds = iteration_bounds(workload.model, cfgs, cluster, any_knobs=True, variants=_CTX["variants"])
    return [tokens_per_s_per_gpu(cfg, cluster.world_size, t) for cfg, t in zip(cfgs, bounds)]


def _loses(tps: float) -> bool:
    """Whether `tps` is strictly below the k-th best this worker has scored."""
    top = _CTX["top"]
    return len(top) == _CTX["top_k"] and tps < top[0][0]


def _score_layout(task: tuple[dict, float]) -> tuple[int, int, int, int, list[Ranked]]:
    """(points, fits, scored, pruned, entries into this worker's top-k) of one layout and its bound."""
    layout, bound = task
    workload, cluster, top = _CTX["workload"], _CTX["cluster"], _CTX["top"]
    points = knob_count(*_knobs(layout))
    if _loses(bound):
        return points, 0, 0, points, []
    unchecked = fits = scored = 0
    bounds: dict[tuple, float] = {}  # by every feature knob but recompute, which the bound covers
    entered: list[Ranked] = []
    for trial in knob_points(*_knobs(layout)):
        knobs = (trial.fp8, trial.moe_token_dispatcher_type, trial.moe_flex_dispatcher_backend, trial.use_turbo_deepep,
                 trial.moe_grouped_gemm, trial.overlap_moe_expert_parallel_comm, trial.tp_comm_overlap,
                 trial.use_torch_fsdp2)
        if knobs in bounds and _loses(bounds[knobs]):
            unchecked += 1
            continue
        cfg = workload.effective(trial)
        if estimate_memory(workload.model, cfg, cluster).total_gb > cluster.memory_cap_gb:
            continue
        fits += 1
        if knobs not in bounds:
            bounds[knobs] = _best_tps(cfg, any_knobs=False)
        if _loses(bounds[knobs]):
            continue
        scored += 1
        tps = simulated_tokens_per_s_per_gpu(workload.model, cfg, cluster)
        if _loses(tps):
            continue
        item = (tps, cfg.key, cfg)
        if len(top) < _CTX["top_k"]:
            heapq.heappush(top, item)
        elif item[:2] > top[0][:2]:
            heapq.heapreplace(top, item)
        else:
            continue
        entered.append(item)
    return points, fits, scored, unchecked + fits - scored, entered


def _checked(step: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`step(*args, **kwargs)` unless the caller stopped the sweep (`oracle.cancel`)."""
    checkpoint()
    return step(*args, **kwargs)


def sweep(workload: Workload, cluster: ClusterSpec, *, top_k: int = 10, within: float = 0.0, jobs: int | None = None,
          progress: Callable[[int, int], None] | None = None) -> SweepResult:
    """The top-k of every legal point, then those of the next `KEEP` within `within` of the best (module doc);
    `progress(done, total)` is called as layouts complete. A stopped caller (`oracle.cancel`) ends it between
    layouts with `Cancelled`."""
    start = time.perf_counter()
    ranks = top_k + (KEEP if within > 0 else 0)
    _init(workload, cluster, ranks)
    # Bounds first, here: forked workers then start with the oracle's caches (and Origami's torch) warm.
    layouts = list(enumerate_layouts(workload, cluster))
    bounds = [b for i in range(0, len(layouts), BLOCK) for b in _checked(_layout_bounds, layouts[i:i + BLOCK])]
    tasks = sorted(zip(layouts, bounds), key=lambda t: -t[1])
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(tasks) or 1))
    counts = [0, 0, 0, 0]
    ranked: list[Ranked] = []

    def absorb(parts: Iterable[tuple]) -> None:
        for done, part in enumerate(parts, 1):
            checkpoint()  # a stopped caller ends the sweep here; leaving the pool's block terminates its workers
            counts[:] = [a + b for a, b in zip(counts, part[:4])]
            ranked.extend(part[4])
            if progress:
                progress(done, len(tasks))

    if jobs == 1:
        absorb(map(_score_layout, tasks))
    else:
        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        with ctx.Pool(jobs, initializer=_init, initargs=(workload, cluster, ranks)) as pool:
            absorb(pool.imap_unordered(_score_layout, tasks, chunksize=max(1, len(tasks) // (jobs * 16))))
    space_size, fits, scored, pruned = counts
    best = heapq.nlargest(ranks, ranked, key=lambda t: t[:2])
    floor = (1 - within) * best[0][0] if best else 0.0
    top = [_checked(evaluate_config, workload, cluster, cfg, performance=True)
           for i, (tps, _, cfg) in enumerate(best) if i < top_k or tps >= floor]
    return SweepResult(space_size=space_size, fits=fits, scored=scored, pruned=pruned, top=top,
                       wall_s=time.perf_counter() - start, jobs=jobs)
