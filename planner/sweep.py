"""Exhaustive sweep: score the whole legal space (memory pre-filter first) and keep the top-k.

The main process enumerates parallel layouts; worker processes expand each layout's feature knobs,
drop what does not fit in memory, simulate the rest and return their local top-k. The result is the
true optimum under the oracle, the reference every other search is measured against.
"""

from __future__ import annotations

import heapq
import multiprocessing as mp
import os
import time
from collections.abc import Callable

from pydantic import BaseModel

from oracle.evaluate import evaluate_config
from oracle.specs import ClusterSpec, EvalResult, Workload

from .space import enumerate_layouts, knob_points


class SweepResult(BaseModel):
    """What a sweep saw and the best layouts it found (best first)."""

    space_size: int
    fits: int
    top: list[EvalResult]
    wall_s: float
    jobs: int


_CTX: dict = {}


def _init(workload: Workload, cluster: ClusterSpec, top_k: int) -> None:
    _CTX.update(workload=workload, cluster=cluster, top_k=top_k,
                fp8s=["none", "hybrid"] if cluster.gpu.has_fp8 else ["none"])


def _score_layout(layout: dict) -> tuple[int, int, list[tuple[float, str, EvalResult]]]:
    """(points, fitting points, local top-k) of one layout's knob combinations."""
    workload, cluster, k = _CTX["workload"], _CTX["cluster"], _CTX["top_k"]
    points = fits = 0
    top: list[tuple[float, str, EvalResult]] = []
    for trial in knob_points(layout, _CTX["fp8s"], workload.model.is_moe and layout["ep"] > 1):
        points += 1
        cfg = workload.effective(trial)
        if not evaluate_config(workload, cluster, cfg, performance=False).fits:
            continue
        fits += 1
        result = evaluate_config(workload, cluster, cfg, performance=True)
        item = (result.tokens_per_s_per_gpu or 0.0, cfg.key, result)
        if len(top) < k:
            heapq.heappush(top, item)
        elif item[:2] > top[0][:2]:
            heapq.heapreplace(top, item)
    return points, fits, top


def sweep(workload: Workload, cluster: ClusterSpec, *, top_k: int = 10, jobs: int | None = None,
          progress: Callable[[int, int], None] | None = None) -> SweepResult:
    """Score every legal point; `progress(done, total)` is called as layouts complete."""
    start = time.perf_counter()
    layouts = list(enumerate_layouts(workload, cluster))
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(layouts) or 1))
    points = fits = 0
    best: list[tuple[float, str, EvalResult]] = []

    def absorb(part: tuple[int, int, list], done: int) -> None:
        nonlocal points, fits, best
        points += part[0]
        fits += part[1]
        best = heapq.nlargest(top_k, best + part[2], key=lambda t: t[:2])
        if progress:
            progress(done, len(layouts))

    if jobs == 1:
        _init(workload, cluster, top_k)
        for i, layout in enumerate(layouts, 1):
            absorb(_score_layout(layout), i)
    else:
        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        with ctx.Pool(jobs, initializer=_init, initargs=(workload, cluster, top_k)) as pool:
            chunk = max(1, len(layouts) // (jobs * 16))
            for i, part in enumerate(pool.imap_unordered(_score_layout, layouts, chunksize=chunk), 1):
                absorb(part, i)
    best.sort(key=lambda t: t[:2], reverse=True)
    return SweepResult(space_size=points, fits=fits, top=[r for _, _, r in best],
                       wall_s=time.perf_counter() - start, jobs=jobs)
