"""`paratune measure`: record what the cluster measured for a trial; the run's projections are then
calibrated to it (planner/run/measurements.py), and its pick and artifacts recomputed (planner/run/verdict.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..run.measurements import record
from ..run.verdict import repick
from ..search.pick import tps
from .run_dir import add_run_arguments, open_run_ledger


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("measure", help="record a trial's measured throughput (and peak memory); calibrate the run "
                                         "and recompute its pick")
    add_run_arguments(p, required=True)
    p.add_argument("--trial", type=int, required=True, help="the measured trial's id (summary.json, trials.jsonl)")
    p.add_argument("--tokens-per-s-per-gpu", type=float, required=True, help="measured tokens/s/GPU")
    p.add_argument("--peak-memory-gib", type=float, help="measured peak memory per GPU, GiB")
    p.add_argument("--note", default="", help="where the figure comes from (job id, log)")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    ledger, run_id = open_run_ledger(args.out_dir, args.run)
    with ledger:
        m, f, trial = record(ledger, run_id, args.trial, args.tokens_per_s_per_gpu, args.peak_memory_gib, args.note)
        v = repick(Path(args.out_dir), ledger, run_id)
    print(f"measurement {m.id} of trial {trial.id} stored (run {run_id}): {m.tokens_per_s_per_gpu:,.1f} tokens/s/GPU"
          + (f", peak {m.peak_memory_gib:.1f} GiB" if m.peak_memory_gib is not None else "")
          + f"; projected {trial.tokens_per_s_per_gpu:,.1f}, {trial.memory_per_gpu_gb:.1f} GiB")
    print(f"calibration: {f.fit}")
    if v is None:
        print(f"{args.out_dir} holds no summary.json of run {run_id}: nothing rewritten")
        return 0
    if v.winner is not None and v.pick is not None:
        w = v.winner
        print(f"pick now trial {w.id} ({w.origin}): {tps(w):,.1f} tokens/s/GPU "
              f"{'measured' if w.calibrated and w.calibrated.measured else 'calibrated'}, projected "
              f"{w.tokens_per_s_per_gpu:,.1f}; {v.pick.note}")
    print(f"rewritten in {args.out_dir}: summary.json trials.jsonl trials.png launch.sh")
    return 0
