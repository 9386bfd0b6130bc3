"""The oracle over arrays against the oracle one layout at a time, on one core, over the shipped examples.

Two figures per example, each the median of REPEATS passes, every pass in a fresh process (caches cold)
with the scalar and the batched run in alternating order:
- memory: `estimate_memory_batch` over the layouts of `oracle_speed.grid` against `estimate_memory` on each
  (evaluations/s; the layouts' EffectiveConfig objects are built before the clock starts);
- simulate: `simulated_tokens_per_s_per_gpu_batch` (the timelines of one pipeline program run together) over the
  legal layouts of that grid against `simulated_tokens_per_s_per_gpu` on each (evaluations/s);
- bounds: the timeline bound the sweep takes of the layouts it scores (`iteration_bounds`, BLOCK layouts at a
  time, the timelines of one pipeline shape run together) against `iteration_bound` layout by layout (ms per
  layout), over the first LAYOUTS legal layouts of the example's search space.
Prints one line per example, then the medians over the examples as the last line.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from oracle_speed import grid  # noqa: E402
from shipped import shipped  # noqa: E402

from paratune.oracle.legality import validate  # noqa: E402
from paratune.oracle.memory import estimate_memory  # noqa: E402
from paratune.oracle.memory.estimate import estimate_memory_batch  # noqa: E402
from paratune.oracle.performance import iteration_bound, schedule  # noqa: E402
from paratune.oracle.performance.bound import iteration_bounds  # noqa: E402
from paratune.oracle.performance.simulate import (  # noqa: E402
    simulated_tokens_per_s_per_gpu,
    simulated_tokens_per_s_per_gpu_batch,
)
from paratune.planner.search.space import bound_variants, enumerate_layouts, knob_points, layout_knobs, menu  # noqa: E402
from paratune.planner.search.sweep import BLOCK  # noqa: E402

REPEATS = 3
LAYOUTS = 1000


def per_point(fn, model, cfgs, cluster) -> float:
    """Evaluations/s of `fn` called on each layout."""
    start = time.perf_counter()
    for cfg in cfgs:
        fn(model, cfg, cluster)
    return len(cfgs) / (time.perf_counter() - start)


def batched(fn, model, cfgs, cluster) -> float:
    """Evaluations/s of `fn` called once on all the layouts."""
    start = time.perf_counter()
    fn(model, cfgs, cluster)
    return len(cfgs) / (time.perf_counter() - start)


def bound_scalar(model, layouts, cluster, variants) -> float:
    schedule._ENDS.clear()  # each run computes its own timelines (the other run's kept ends would all hit)
    start = time.perf_counter()
    for cfg in layouts:
        iteration_bound(model, cfg, cluster, variants=variants)
    return (time.perf_counter() - start) * 1e3 / len(layouts)


def bound_batch(model, layouts, cluster, variants) -> float:
    schedule._ENDS.clear()
    start = time.perf_counter()
    for i in range(0, len(layouts), BLOCK):
        iteration_bounds(model, layouts[i:i + BLOCK], cluster, variants=variants)
    return (time.perf_counter() - start) * 1e3 / len(layouts)


def one_pass(batch_first: bool) -> dict[str, list[float]]:
    """{example: [memory scalar /s, memory batched /s, bound scalar ms, bound batched ms, simulate scalar /s,
    simulate batched /s]} in this process."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    out = {}
    for workload, cluster in shipped():
        model = workload.model
        cfgs = [workload.effective(t) for t in grid(workload, cluster, 3000)]
        m = menu(workload, cluster)
        layouts = []
        for layout in enumerate_layouts(workload, cluster):
            layouts.append(workload.effective(next(knob_points(*layout_knobs(workload, layout, m)))))
            if len(layouts) == LAYOUTS:
                break
        variants = bound_variants(m)
        legal = [cfg for cfg in cfgs if not validate(model, cfg, cluster)]
        runs = [(per_point, estimate_memory, cfgs), (batched, estimate_memory_batch, cfgs),
                (bound_scalar, None, layouts), (bound_batch, None, layouts),
                (per_point, simulated_tokens_per_s_per_gpu, legal),
                (batched, simulated_tokens_per_s_per_gpu_batch, legal)]
        figures = [0.0] * len(runs)
        for pair in range(0, len(runs), 2):  # the first run of a pair fills the caches the second one reads
            for k in ((pair + 1, pair) if batch_first else (pair, pair + 1)):
                how, fn, items = runs[k]
                figures[k] = how(model, items, cluster, variants) if fn is None else how(fn, model, items, cluster)
        ms, mb, bs, bb, ss, sb = figures
        out[workload.name] = [ms, mb, bs, bb, ss, sb]
    return out


def main() -> None:
    passes = [json.loads(subprocess.run([sys.executable, __file__, "--one-pass", str(i % 2)], check=True,
                                        capture_output=True, text=True).stdout) for i in range(REPEATS)]
    columns: list[list[float]] = [[], [], [], [], [], []]
    for name in passes[0]:
        med = [statistics.median(p[name][k] for p in passes) for k in range(6)]
        for k in range(6):
            columns[k].append(med[k])
        print(f"{name:28s} memory_evals_per_s scalar={med[0]:8.0f} batched={med[1]:8.0f} ({med[1] / med[0]:.2f}x)  "
              f"layout_bound_ms scalar={med[2]:.3f} batched={med[3]:.3f} ({med[2] / med[3]:.2f}x)  "
              f"simulate_evals_per_s scalar={med[4]:7.0f} batched={med[5]:7.0f} ({med[5] / med[4]:.2f}x)")
    m = [statistics.median(c) for c in columns]
    print(f"median memory_scalar_per_s={m[0]:.0f} memory_batched_per_s={m[1]:.0f} "
          f"bound_scalar_ms={m[2]:.3f} bound_batched_ms={m[3]:.3f} "
          f"simulate_scalar_per_s={m[4]:.0f} simulate_batched_per_s={m[5]:.0f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one-pass"]:
        print(json.dumps(one_pass(sys.argv[2] == "1")))
    else:
        main()
