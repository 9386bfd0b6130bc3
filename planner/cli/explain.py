"""`paratune explain`: why the winner beats the baseline, one knob at a time, and term by term."""

from __future__ import annotations

import argparse

from paratune.oracle.errors import InputError
from paratune.oracle.inputs import load_cluster
from paratune.oracle.specs import ClusterSpec, TrialConfig, Workload

from ..run.steps import final_pick
from ..search.explanation import explain, short_text
from .run_dir import add_run_arguments, open_run_ledger
from .search_args import add_search_arguments, with_search_args
from .trial_args import trial_from_args, within_bounds
from .workload_args import add_workload_arguments, print_reading, workload_from_args


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("explain", help="the single-knob path from a baseline layout to a winner, and their term diff")
    add_workload_arguments(p)
    p.add_argument("--target-cluster", required=True, help="target cluster YAML")
    p.add_argument("--from", dest="from_config", metavar="CONFIG",
                   help="baseline layout (the forms --config takes); default: the workload's own layout")
    p.add_argument("--to", dest="to_config", metavar="CONFIG",
                   help="winner layout (the forms --config takes); default: the pick of --out-dir's run (robust, "
                        "as `tune` picks)")
    add_run_arguments(p, required=False)
    p.add_argument("--json", action="store_true", help="print the Explanation as one JSON object")
    add_search_arguments(p)
    p.set_defaults(handler=_run)


def pick_of_run(out_dir: str, run: int | None, workload: Workload, cluster: ClusterSpec) -> TrialConfig:
    """The knobs of the trial a tune run's ledger picks (robust, as `tune` does; its latest run by default)."""
    ledger, run_id = open_run_ledger(out_dir, run)
    with ledger:
        best, _ = final_pick(ledger, run_id, workload, cluster)
    if best is None:
        raise InputError(f"run {run_id} has no legal trial that fits", file=str(ledger.path), key="--run")
    return best.knobs


def _run(args: argparse.Namespace) -> int:
    cluster = with_search_args(load_cluster(args.target_cluster), args)
    workload = workload_from_args(args, cluster)
    baseline = trial_from_args(args.from_config, None, workload) if args.from_config else TrialConfig()
    within_bounds(baseline, workload, cluster.world_size, "--from")
    if args.to_config:
        winner = within_bounds(trial_from_args(args.to_config, None, workload), workload, cluster.world_size, "--to")
    elif args.out_dir:
        winner = pick_of_run(args.out_dir, args.run, workload, cluster)
    else:
        raise InputError("name the winner: --to CONFIG, or --out-dir of a tune run", key="--to")
    print_reading(workload)  # once the whole command line is sound: a refusal stays one line
    x = explain(workload, cluster, baseline, winner)
    if args.json:
        print(x.model_dump_json())
        return 0
    print("\n".join(short_text(x)))
    print(x.order)
    print("time terms, ms per iteration: " + "; ".join(f"{t.term} {t.baseline:,.0f} -> {t.winner:,.0f}"
                                                        for t in x.time_terms_ms))
    print("memory terms, GiB per GPU: " + "; ".join(f"{t.term} {t.baseline:.1f} -> {t.winner:.1f}"
                                                     for t in x.memory_terms_gb))
    return 0
