"""Search quality: the seed plan's best as a fraction of the sweep optimum, for every shipped example.

The sweep scores the whole legal space (DESIGN §5) and is the reference; the later LLM phase has to
close whatever gap the seed plan leaves. Prints one line per example and a last line with the median.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from oracle.evaluate import evaluate_config  # noqa: E402
from oracle.inputs import load_cluster, load_workload  # noqa: E402
from planner.seed_plan import seed_plan  # noqa: E402
from planner.sweep import sweep  # noqa: E402

EXAMPLES = [
    ("mixtral-8x22b-mi355x.yaml", "mi355x-4n.yaml"),
    ("llama3-70b-h100.yaml", "h100-8n.yaml"),
    ("deepseek-v3-h100.yaml", "h100-32n.yaml"),
    ("llama3-8b-mi300x.yaml", "mi300x-1n.yaml"),
]


def main() -> None:
    ratios = []
    for wfile, cfile in EXAMPLES:
        workload = load_workload(ROOT / "examples" / "workloads" / wfile)
        cluster = load_cluster(ROOT / "examples" / "clusters" / cfile)
        start = time.perf_counter()
        plan = seed_plan(workload, cluster, cluster.budget.max_perf_calls)
        scored = [evaluate_config(workload, cluster, workload.effective(t), performance=True) for _, t in plan]
        seed_best = max((r.tokens_per_s_per_gpu for r in scored if r.fits), default=0.0)
        seed_s = time.perf_counter() - start
        result = sweep(workload, cluster, top_k=1)
        optimum = result.top[0].tokens_per_s_per_gpu if result.top else 0.0
        ratio = seed_best / optimum if optimum else 0.0
        ratios.append(ratio)
        print(f"{workload.name:24s} seeds={len(plan):3d} seed_best={seed_best:9.1f} ({seed_s:4.1f} s) "
              f"sweep_best={optimum:9.1f} space={result.space_size:7d} fits={result.fits:7d} "
              f"({result.wall_s:5.1f} s, {result.jobs} jobs) seed/sweep={ratio:.3f}")
    print(f"median_seed_over_sweep={statistics.median(ratios):.3f} min_seed_over_sweep={min(ratios):.3f}")


if __name__ == "__main__":
    main()
