"""Search quality: the seed plan's best as a fraction of the sweep optimum, for every shipped example.

The seed plan runs as `paratune tune --seed-only` runs it (free memory check, then up to the cluster's
max_perf_calls simulate calls); the sweep scores the whole legal space (DESIGN §5) and is the
reference; the LLM phase has to close whatever gap the seed plan leaves. The sweep's points (its top-k
and every point within the oracle's stated error of the best) then join the seeds in the run, and the
run's robust pick is set against the user's own layout (the workload's, simulated): the pick must never
be below it when it fits (DESIGN §5). Prints one line per example and a last line with the median and
the smallest pick / own-layout ratio.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from shipped import shipped  # noqa: E402

from paratune.ledger.store import Ledger  # noqa: E402
from paratune.oracle.performance.uncertainty import uncertainty  # noqa: E402
from paratune.planner.run.steps import final_pick, own_trial, record_sweep, score_seed_plan  # noqa: E402
from paratune.planner.search.pick import tps  # noqa: E402
from paratune.planner.search.sweep import sweep  # noqa: E402


def main() -> None:
    ratios, over_own = [], []
    for workload, cluster in shipped():
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp, Ledger(Path(tmp) / "ledger.sqlite") as ledger:
            run = ledger.open_run(workload, cluster)
            score_seed_plan(ledger, run.id, workload, cluster, budget=cluster.budget.max_perf_calls,
                            note=lambda _: None)  # what `paratune tune --seed-only` does
            best = ledger.best(run.id)
            scored = sum(t.fidelity == "simulate" for t in ledger.trials(run.id))
            seed_best = best.tokens_per_s_per_gpu if best else 0.0
            seed_s = time.perf_counter() - start
            result = sweep(workload, cluster, top_k=1, within=uncertainty(workload.model, cluster.gpu).mape)
            record_sweep(ledger, run.id, result)  # what `paratune tune --sweep` then does
            chosen, _ = final_pick(ledger, run.id, workload, cluster)
            own = own_trial(ledger, run.id, workload, cluster)
        optimum = result.top[0].tokens_per_s_per_gpu if result.top else 0.0
        ratio = seed_best / optimum if optimum else 0.0
        ratios.append(ratio)
        own_tps = own.tokens_per_s_per_gpu if own.fits else None
        pick_tps = tps(chosen) if chosen else 0.0
        if own_tps:
            over_own.append(pick_tps / own_tps)
        print(f"{workload.name:24s} seeds={scored:3d} seed_best={seed_best:9.1f} ({seed_s:4.1f} s) "
              f"sweep_best={optimum:9.1f} space={result.space_size:7d} scored={result.scored:6d} "
              f"pruned={result.pruned:7d} kept={len(result.top):5d} "
              f"({result.wall_s:5.1f} s, {result.jobs} jobs) seed/sweep={ratio:.3f} "
              f"pick={pick_tps:9.1f} own={own_tps or 0.0:9.1f}{'' if own_tps else ' (does not fit)'} "
              f"pick/own={pick_tps / own_tps if own_tps else float('nan'):.3f}")
    print(f"median_seed_over_sweep={statistics.median(ratios):.3f} min_seed_over_sweep={min(ratios):.3f} "
          f"min_pick_over_own={min(over_own, default=float('nan')):.3f}")

if __name__ == "__main__":
    main()
