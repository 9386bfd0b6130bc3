"""Oracle speed: memory-only and simulate evaluations per second on one core, over the shipped examples.

Each example is scored over a grid of distinct layouts (TP x PP x CP x EP x MBS x recompute x VPP),
one pass each, so every evaluation is a new config; the oracle's per-shape caches start empty and fill
as they would in a sweep. The machines are shared and noisy, so a pass over all examples runs in a
fresh process (everything cold) REPEATS times, and each example's rate is the median of its passes.
Prints per-example rates (with the range over passes), then the medians as the last line.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from shipped import shipped  # noqa: E402

from paratune.oracle.evaluate import evaluate_memory_only, evaluate_simulate  # noqa: E402
from paratune.oracle.legality import legal_axes  # noqa: E402
from paratune.oracle.specs import TrialConfig  # noqa: E402

REPEATS = 7


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


def one_pass() -> dict[str, tuple[int, float, float]]:
    """{example: (configs, memory-only rate, simulate rate)} from this (fresh) process."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    out = {}
    for workload, cluster in shipped():
        trials = grid(workload, cluster, 3000)
        mem = rate(evaluate_memory_only, workload, cluster, trials)
        # simulate in the reverse order so memory-pass caches of whole results cannot help it
        sim = rate(evaluate_simulate, workload, cluster, trials[::-1])
        out[workload.name] = (len(trials), mem, sim)
    return out


def main() -> None:
    passes = [json.loads(subprocess.run([sys.executable, __file__, "--one-pass"], check=True,
                                        capture_output=True, text=True).stdout) for _ in range(REPEATS)]
    mem_rates, sim_rates = [], []
    for name, (configs, _, _) in passes[0].items():
        mem = [p[name][1] for p in passes]
        sim = [p[name][2] for p in passes]
        mem_rates.append(statistics.median(mem))
        sim_rates.append(statistics.median(sim))
        print(f"{name:28s} configs={configs:5d} memory_evals_per_s={mem_rates[-1]:9.0f} "
              f"({min(mem):.0f}..{max(mem):.0f}) simulate_evals_per_s={sim_rates[-1]:8.0f} "
              f"({min(sim):.0f}..{max(sim):.0f})")
    print(f"memory_evals_per_s={statistics.median(mem_rates):.0f} "
          f"simulate_evals_per_s={statistics.median(sim_rates):.0f}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--one-pass"]:
        print(json.dumps(one_pass()))
    else:
        main()
