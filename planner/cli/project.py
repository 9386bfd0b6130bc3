"""`paratune project memory|performance|benchmark`: evaluate one layout and print it (table or EvalResult JSON)."""

from __future__ import annotations

import argparse
import sys

from paratune.oracle.benchmark import BenchmarkUnavailable, evaluate_with_benchmark
from paratune.oracle.evaluate import evaluate_memory_only, evaluate_simulate
from paratune.oracle.inputs import load_cluster

from .render import print_result
from .search_args import add_search_arguments, with_search_args
from .trial_args import trial_from_args, within_bounds
from .workload_args import add_workload_arguments, print_reading, workload_from_args


def register(verbs: argparse._SubParsersAction) -> None:
    proj = verbs.add_parser("project", help="project memory or performance of one layout")
    kinds = proj.add_subparsers(dest="kind", required=True)
    for kind, help_text in (("memory", "legality and per-GPU memory"),
                            ("performance", "legality, memory and projected throughput"),
                            ("benchmark", "performance anchored to one measured layer of each kind (needs a GPU)")):
        p = kinds.add_parser(kind, help=help_text)
        add_workload_arguments(p)
        p.add_argument("--target-cluster", required=True, help="target cluster YAML")
        p.add_argument("--config", help="TrialConfig knobs, or a whole printed layout: inline JSON, a JSON/YAML file, "
                                        "@file, or - (stdin)")
        p.add_argument("--set", action="append", metavar="KEY=VALUE", help="one TrialConfig knob (repeatable)")
        p.add_argument("--json", action="store_true", help="print exactly one EvalResult JSON object")
        add_search_arguments(p)
        if kind == "benchmark":
            p.add_argument("--allow-cpu", action="store_true",
                           help="without a GPU, a CPU smoke run on tiny shapes (times not meaningful)")
        p.set_defaults(handler=_run)


def _progress(done: int, total: int, message: str) -> None:
    print(f"[{done}/{total}] {message}", file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    cluster = with_search_args(load_cluster(args.target_cluster), args)
    workload = workload_from_args(args, cluster)
    trial = within_bounds(trial_from_args(args.config, args.set, workload), workload, cluster.world_size,
                          "--set" if args.set else "--config")
    print_reading(workload)  # once the whole command line is sound: a refusal stays one line
    if args.kind == "benchmark":
        try:
            result = evaluate_with_benchmark(workload, cluster, trial, allow_cpu=args.allow_cpu, progress=_progress)
        except BenchmarkUnavailable as exc:
            print(f"paratune: benchmark unavailable: {exc}", file=sys.stderr)
            return 2
    else:
        evaluate = evaluate_simulate if args.kind == "performance" else evaluate_memory_only
        result = evaluate(workload, cluster, trial)
    if args.json:
        print(result.model_dump_json())
    else:
        print_result(result, workload, cluster)
    return 0
