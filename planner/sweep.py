"""Exhaustive sweep: the true top-k of the whole legal space under the oracle, by branch and bound.

Every parallel layout gets a lower bound on its iteration time that holds for all its feature-knob
points (`oracle.performance.iteration_bound`), hence an upper bound on their tokens/s/GPU. Layouts are
scored best bound first; a worker skips a layout, unsimulated and without its memory check, when that
upper bound is strictly below the k-th best it has already scored: none of its points can enter the
top-k. Otherwise each point gets the memory pre-filter and, when it fits, a simulation. The result
equals scoring every fitting point (ties broken by config key, as before).
"""

from __future__ import annotations

import heapq
import multiprocessing as mp
import os
import time
from collections.abc import Callable

from pydantic import BaseModel

from oracle.evaluate import evaluate_config
from oracle.performance import iteration_bound, simulate, tokens_per_s_per_gpu
from oracle.specs import ClusterSpec, EffectiveConfig, EvalResult, Workload

from .space import enumerate_layouts, knob_count, knob_points


class SweepResult(BaseModel):
    """What a sweep saw and the best layouts it found (best first).

    space_size: every legal point; pruned: points of layouts the bound ruled out (neither memory-checked
    nor simulated); fits: points of the other layouts that fit in memory; scored: points simulated
    (every fitting one of those layouts)."""

    space_size: int
    pruned: int
    fits: int
    scored: int
    top: list[EvalResult]
    wall_s: float
    jobs: int


Ranked = tuple[float, str, EffectiveConfig]  # (tokens/s/GPU, config key, config): heap order = ranking order
_CTX: dict = {}


def _init(workload: Workload, cluster: ClusterSpec, top_k: int) -> None:
    _CTX.update(workload=workload, cluster=cluster, top_k=top_k, top=[],
                fp8s=["none", "hybrid"] if cluster.gpu.has_fp8 else ["none"])


def _knobs(layout: dict) -> tuple[dict, list[str], bool]:
    return layout, _CTX["fp8s"], _CTX["workload"].model.is_moe and layout["ep"] > 1


def _bound_tps(layout: dict) -> float:
    """Upper bound on the tokens/s/GPU of every point of `layout`."""
    workload, cluster = _CTX["workload"], _CTX["cluster"]
    cfg = workload.effective(next(knob_points(*_knobs(layout))))
    return tokens_per_s_per_gpu(cfg, cluster.world_size, iteration_bound(workload.model, cfg, cluster))


def _score_layout(task: tuple[dict, float]) -> tuple[int, int, int, list[Ranked]]:
    """(points, pruned, fits, entries into this worker's top-k) of one layout with its bound."""
    layout, bound = task
    workload, cluster, k, top = _CTX["workload"], _CTX["cluster"], _CTX["top_k"], _CTX["top"]
    points = knob_count(*_knobs(layout))
    if len(top) == k and bound < top[0][0]:
        return points, points, 0, []
    fits, entered = 0, []
    for trial in knob_points(*_knobs(layout)):
        cfg = workload.effective(trial)
        if not evaluate_config(workload, cluster, cfg, performance=False).fits:
            continue
        fits += 1
        tps = simulate(workload.model, cfg, cluster).tokens_per_s_per_gpu
        if len(top) == k and tps < top[0][0]:
            continue
        item = (tps, cfg.key, cfg)
        if len(top) < k:
            heapq.heappush(top, item)
        elif item[:2] > top[0][:2]:
            heapq.heapreplace(top, item)
        else:
            continue
        entered.append(item)
    return points, 0, fits, entered


def sweep(workload: Workload, cluster: ClusterSpec, *, top_k: int = 10, jobs: int | None = None,
          progress: Callable[[int, int], None] | None = None) -> SweepResult:
    """The top-k of every legal point; `progress(done, total)` is called as layouts complete."""
    start = time.perf_counter()
    layouts = list(enumerate_layouts(workload, cluster))
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(layouts) or 1))
    chunk = max(1, len(layouts) // (jobs * 16))
    totals = [0, 0, 0]
    best: list[Ranked] = []

    def scored_in_order(bounds: list[float], score: Callable) -> None:
        tasks = sorted(zip(layouts, bounds), key=lambda t: -t[1])
        for done, part in enumerate(score(tasks), 1):
            for i in range(3):
                totals[i] += part[i]
            best.extend(part[3])
            if progress:
                progress(done, len(layouts))

    if jobs == 1:
        _init(workload, cluster, top_k)
        scored_in_order([_bound_tps(x) for x in layouts], lambda tasks: map(_score_layout, tasks))
    else:
        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        with ctx.Pool(jobs, initializer=_init, initargs=(workload, cluster, top_k)) as pool:
            scored_in_order(pool.map(_bound_tps, layouts, chunksize=chunk),
                            lambda tasks: pool.imap_unordered(_score_layout, tasks, chunksize=chunk))
    top = heapq.nlargest(top_k, best, key=lambda t: t[:2])
    points, pruned, fits = totals
    return SweepResult(space_size=points, pruned=pruned, fits=fits, scored=fits,
                       top=[evaluate_config(workload, cluster, cfg, performance=True) for _, _, cfg in top],
                       wall_s=time.perf_counter() - start, jobs=jobs)
