"""Accuracy: projected vs measured tokens/s/GPU for every published row of the calibration table.

Rows: ../shared/calibration/throughput.csv plus oracle/performance/extra_throughput.csv (AMD's
Mixtral 8x22B MI355X reference, the shipped Primus workload). Knobs a row leaves blank (MBS,
recompute, VPP, the MoE dispatcher) take the oracle's best legal choice that fits in memory, since
the published runs were tuned (oracle/performance/calibration_rows.py says exactly how). The
last line is `mape=X% max_abs_err=Y% rows=N`.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oracle.performance.calibration_rows import Row, load_rows, order_pairs, project  # noqa: E402


def report(rows: list[Row]) -> tuple[float, float]:
    """Print the error table, the order check and the summary line; return (MAPE %, max |error| %)."""
    errors = []
    print(f"{'row':9s} {'model':16s} {'gpu':9s} {'measured':>10s} {'projected':>10s} {'error':>7s}  chosen knobs")
    for row in rows:
        p = project(row)
        errors.append(abs(p.error))
        c = p.cfg
        print(f"{row.id:9s} {row.model:16s} {row.gpu:9s} {row.measured:10.1f} "
              f"{p.estimate.tokens_per_s_per_gpu:10.1f} {100 * p.error:+6.1f}%  "
              f"mbs={c.mbs} recompute={c.recompute_granularity or 'none'} vpp={c.vpp}"
              f"{' deepep' if c.use_turbo_deepep else ''}")
    bad = [(a.id, b.id) for a, b in order_pairs(rows)
           if project(a).estimate.tokens_per_s_per_gpu <= project(b).estimate.tokens_per_s_per_gpu]
    print(f"order: {len(order_pairs(rows))} same-model/GPU/source pairs, misordered: {bad or 'none'}")
    mape, worst = 100 * sum(errors) / len(errors), 100 * max(errors)
    print(f"mape={mape:.1f}% max_abs_err={worst:.1f}% rows={len(rows)}")
    return mape, worst


if __name__ == "__main__":
    report(load_rows())
