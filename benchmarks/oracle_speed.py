"""Oracle speed: memory-only and simulate evaluations per second on one core, over the shipped examples.

Each example is scored over a grid of distinct layouts (TP x PP x CP x EP x MBS x recompute x VPP),
one pass each, so every evaluation is a new config (shape caches inside the oracle still help, as
they would in a sweep). Prints per-example rates, then the medians as the last line.
"""

from __future__ import annotations

import itertools
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from oracle.evaluate import evaluate_memory_only, evaluate_simulate  # noqa: E402
from oracle.inputs import load_cluster, load_workload  # noqa: E402
from oracle.legality import legal_axes  # noqa: E402
from oracle.specs import TrialConfig  # noqa: E402

EXAMPLES = [
    ("mixtral-8x22b-mi355x.yaml", "mi355x-4n.yaml"),
    ("llama3-70b-h100.yaml", "h100-8n.yaml"),
    ("deepseek-v3-h100.yaml", "h100-32n.yaml"),
    ("llama3-8b-mi300x.yaml", "mi300x-1n.yaml"),
]


def grid(workload, cluster, limit: int) -> list[TrialConfig]:
    """Up to `limit` distinct layouts of this workload, in a fixed order."""
    t = workload.training
    axes = legal_axes(workload.model, cluster, seq_length=t.seq_length, gbs=t.global_batch_size)
    combos = itertools.product(axes.tp, axes.pp, axes.cp[:3], axes.ep, axes.mbs[:3],
                               ("none", "selective", "full"), axes.vpp[:3])
    out = []
    for tp, pp, cp, ep, mbs, rc, vpp in combos:
        if tp * pp * cp > cluster.world_size or (vpp > 1 and pp == 1):
            continue
        out.append(TrialConfig(tp=tp, pp=pp, cp=cp, ep=ep, mbs=mbs, recompute_granularity=rc, vpp=vpp))
        if len(out) == limit:
            break
    return out


def rate(fn, workload, cluster, trials) -> float:
    start = time.perf_counter()
    for trial in trials:
        fn(workload, cluster, trial)
    return len(trials) / (time.perf_counter() - start)


def main() -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    mem_rates, sim_rates = [], []
    for wfile, cfile in EXAMPLES:
        workload = load_workload(ROOT / "examples" / "workloads" / wfile)
        cluster = load_cluster(ROOT / "examples" / "clusters" / cfile)
        trials = grid(workload, cluster, 3000)
        mem = rate(evaluate_memory_only, workload, cluster, trials)
        # simulate on a different slice order so memory-pass caches of whole results cannot help it
        sim = rate(evaluate_simulate, workload, cluster, list(reversed(trials)))
        mem_rates.append(mem)
        sim_rates.append(sim)
        print(f"{workload.name:28s} configs={len(trials):5d} memory_evals_per_s={mem:9.0f} "
              f"simulate_evals_per_s={sim:8.0f}")
    print(f"memory_evals_per_s={statistics.median(mem_rates):.0f} "
          f"simulate_evals_per_s={statistics.median(sim_rates):.0f}")


if __name__ == "__main__":
    main()
