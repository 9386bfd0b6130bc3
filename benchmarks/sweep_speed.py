"""Sweep wall time: the README's main job and every shipped example, the whole legal space each.

Each sweep runs as `paratune tune --sweep` runs it (top 10, `within` the oracle's stated error, every core)
in a fresh process (caches cold, as a user's first sweep), REPEATS times in turn over the cases, so a
loaded machine slows every case alike; prints per case the median wall seconds with the range, the
space, the points simulated and the optimum (tokens/s/GPU and config key), which must not move between
versions of the sweep machinery. Setup (reading the files) is outside the clock, as in the issue's target.
`--cases main` runs the main job alone.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from shipped import PAIRS, ROOT  # noqa: E402

from paratune.oracle.inputs import load_cluster, load_workload  # noqa: E402
from paratune.oracle.performance.uncertainty import uncertainty  # noqa: E402
from paratune.planner.search.sweep import sweep  # noqa: E402

REPEATS = 3
MAIN = ("mixtral-8x22b-mi355x-recipe.yaml", "mi355x-4n.yaml")  # the README's first command
CASES = {"main": MAIN, **{w.removesuffix(".yaml"): (w, c) for w, c in PAIRS}}


def one(case: str) -> dict:
    """One sweep of `case` in this process: wall seconds, space, simulated points, optimum."""
    w_file, c_file = CASES[case]
    workload = load_workload(ROOT / "examples" / "workloads" / w_file)
    cluster = load_cluster(ROOT / "examples" / "clusters" / c_file)
    start = time.perf_counter()
    result = sweep(workload, cluster, top_k=10, within=uncertainty(workload.model, cluster.gpu).mape)
    wall = time.perf_counter() - start
    best = result.top[0] if result.top else None
    return {"wall_s": wall, "space": result.space_size, "scored": result.scored, "jobs": result.jobs,
            "best": [best.tokens_per_s_per_gpu, best.config_key] if best else None,
            "top": [r.config_key for r in result.top]}


def main(cases: list[str]) -> None:
    runs: dict[str, list[dict]] = {c: [] for c in cases}
    for _ in range(REPEATS):
        for case in cases:
            out = subprocess.run([sys.executable, __file__, "--one", case], check=True, capture_output=True, text=True)
            runs[case].append(json.loads(out.stdout))
    for case, rs in runs.items():
        walls = [r["wall_s"] for r in rs]
        r = rs[0]
        print(f"{case:28s} wall_s={statistics.median(walls):7.2f} ({min(walls):.2f}..{max(walls):.2f}) "
              f"space={r['space']:8d} simulated={r['scored']:7d} jobs={r['jobs']} best={r['best']}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        print(json.dumps(one(sys.argv[2])))
    else:
        main(sys.argv[sys.argv.index("--cases") + 1].split(",") if "--cases" in sys.argv else list(CASES))
