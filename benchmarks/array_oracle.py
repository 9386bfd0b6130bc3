"""The oracle over arrays against the oracle one layout at a time, on one core, over the shipped examples.

Two figures per example, each the median of REPEATS passes, every pass in a fresh process (caches cold)
with the scalar and the batched run in alternating order:
- memory: `estimate_memory_batch` over the layouts of `oracle_speed.grid` against `estimate_memory` on each
  (evaluations/s; the layouts' EffectiveConfig objects are built before the clock starts);
- bounds: the sweep's layout bounds (`iteration_bounds`, BLOCK layouts at a time, the timelines of one
  pipeline shape run together) against `iteration_bound` layout by layout (ms per layout), over the first
  LAYOUTS legal layouts of the example's search space.
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

from paratune.oracle.memory import estimate_memory  # noqa: E402
from paratune.oracle.memory.estimate import estimate_memory_batch  # noqa: E402
from paratune.oracle.performance import iteration_bound  # noqa: E402
from paratune.oracle.performance.bound import iteration_bounds  # noqa: E402
from paratune.planner.search.space import bound_variants, enumerate_layouts, knob_points, layout_knobs, menu  # noqa: E402
from paratune.planner.search.sweep import BLOCK  # noqa: E402

REPEATS = 3
LAYOUTS = 1000


def memory_scalar(model, cfgs, cluster) -> float:
    start = time.perf_counter()
    for cfg in cfgs:
        estimate_memory(model, cfg, cluster)
    return len(cfgs) / (time.perf_counter() - start)


def memory_batch(model, cfgs, cluster) -> float:
    start = time.perf_counter()
    estimate_memory_batch(model, cfgs, cluster)
    return len(cfgs) / (time.perf_counter() - start)


def bound_scalar(model, layouts, cluster, variants) -> float:
    start = time.perf_counter()
    for cfg in layouts:
        iteration_bound(model, cfg, cluster, variants=variants)
    return (time.perf_counter() - start) * 1e3 / len(layouts)


def bound_batch(model, layouts, cluster, variants) -> float:
    start = time.perf_counter()
    for i in range(0, len(layouts), BLOCK):
        iteration_bounds(model, layouts[i:i + BLOCK], cluster, variants=variants)
    return (time.perf_counter() - start) * 1e3 / len(layouts)


def one_pass(batch_first: bool) -> dict[str, list[float]]:
    """{example: [memory scalar /s, memory batched /s, bound scalar ms, bound batched ms]} in this process."""
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
        if batch_first:  # the first run of a pair fills the caches the second one reads
            mb, ms = memory_batch(model, cfgs, cluster), memory_scalar(model, cfgs, cluster)
            bb, bs = bound_batch(model, layouts, cluster, variants), bound_scalar(model, layouts, cluster, variants)
        else:
            ms, mb = memory_scalar(model, cfgs, cluster), memory_batch(model, cfgs, cluster)
            bs, bb = bound_scalar(model, layouts, cluster, variants), bound_batch(model, layouts, cluster, variants)
        out[workload.name] = [ms, mb, bs, bb]
    return out


def main() -> None:
    passes = [json.loads(subprocess.run([sys.executable, __file__, "--one-pass", str(i % 2)], check=True,
                                        capture_output=True, text=True).stdout) for i in range(REPEATS)]
    columns: list[list[float]] = [[], [], [], []]
    for name in passes[0]:
        med = [statistics.median(p[name][k] for p in passes) for k in range(4)]
        for k in range(4):
            columns[k].append(med[k])
        print(f"{name:28s} memory_evals_per_s scalar={med[0]:8.0f} batched={med[1]:8.0f} ({med[1] / med[0]:.2f}x)  "
              f"layout_bound_ms scalar={med[2]:.3f} batched={med[3]:.3f} ({med[2] / med[3]:.2f}x)")
    m = [statistics.median(c) for c in columns]
    print(f"median memory_scalar_per_s={m[0]:.0f} memory_batched_per_s={m[1]:.0f} "
          f"bound_scalar_ms={m[2]:.3f} bound_batched_ms={m[3]:.3f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one-pass"]:
        print(json.dumps(one_pass(sys.argv[2] == "1")))
    else:
        main()
