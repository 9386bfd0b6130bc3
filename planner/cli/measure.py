"""`paratune measure`: record what the cluster measured for a trial; the run's projections are then
calibrated to it (planner/measurements.py)."""

from __future__ import annotations

import argparse

from ..measurements import record
from .run_dir import add_run_arguments, open_run_ledger


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("measure", help="record a trial's measured throughput (and peak memory); calibrate the run")
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
        best = ledger.best(run_id)
    print(f"measurement {m.id} of trial {trial.id} stored (run {run_id}): {m.tokens_per_s_per_gpu:,.1f} tokens/s/GPU"
          + (f", peak {m.peak_memory_gib:.1f} GiB" if m.peak_memory_gib is not None else ""))
    print(f"factors: compute x{f.compute:.4f}, other x{f.other:.4f}, activations x{f.activations:.4f} ({f.fit})")
    for label, t in (("measured trial", trial), ("run's best (raw)", best)):
        if t is None or t.calibrated is None or t.calibrated.tokens_per_s_per_gpu is None:
            continue
        c = t.calibrated
        mem = f", {t.memory_per_gpu_gb:.1f} -> {c.memory_per_gpu_gb:.1f} GiB" if c.memory_per_gpu_gb is not None else ""
        print(f"{label} #{t.id}: raw {t.tokens_per_s_per_gpu:,.1f} -> calibrated {c.tokens_per_s_per_gpu:,.1f} "
              f"tokens/s/GPU{mem}{'' if c.fits in (True, None) else ' (does not fit when calibrated)'}")
    return 0
