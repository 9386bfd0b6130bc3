"""`paratune tune`: search a workload's layouts on a cluster and write the run's artifacts."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from paratune.oracle.constraints import pinned
from paratune.oracle.errors import InputError
from paratune.oracle.inputs import load_cluster

from ..investigator.phase_types import InvestigatorOptions
from ..llm.env_file import EnvFileError, load_env_file
from ..search.explanation import short_text
from ..search.pins import check_pins, no_layout_error
from .search_args import add_search_arguments, search_argv, with_search_args
from .tune_run import TuneOptions, tune
from .workload_args import add_workload_arguments, own_workload, primus_root_argv, reading_lines


def _at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer no smaller than `minimum`."""
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {minimum} or more, got {value}")
        return value
    return parse


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("tune", help="seed plan, LLM investigator, sweep and artifacts for one workload on one "
                                      "cluster")
    add_workload_arguments(p)
    p.add_argument("--target-cluster", required=True, help="target cluster YAML")
    p.add_argument("--out-dir", required=True, help="folder for ledger.sqlite and the artifacts")
    p.add_argument("--seed-only", action="store_true", help="stop after the seed plan")
    p.add_argument("--sweep", action="store_true", help="also score the whole legal space (the reference optimum)")
    p.add_argument("--seed-budget", type=int,
                   help="max seed simulate calls (default: the cluster's max_perf_calls, half of it when the LLM "
                        "phase runs)")
    p.add_argument("--resume", action="store_true", help="continue the open run in --out-dir's ledger")
    p.add_argument("--calibration-from", metavar="DIR",
                   help="also use the measurements of this model on this cluster in another tune folder's ledger "
                        "(those in --out-dir's ledger are always used)")
    p.add_argument("--dry-run", action="store_true",
                   help="LLM phase with a scripted LM on the real tools: checks an install offline, with no key")
    p.add_argument("--jobs", type=int, help="sweep worker processes (default: all cores)")
    p.add_argument("--top-k", type=int, default=10, help="sweep winners to keep")
    p.add_argument("--profiling-mode", choices=("simulate", "benchmark"), default="simulate",
                   help="score seeds analytically, or measured on the local GPU (max_benchmark_calls budget)")
    p.add_argument("--pick", choices=("robust", "argmax"), default="robust",
                   help="robust (default): of the layouts within the oracle's stated error of the best, the one "
                        "with the most memory headroom; argmax: the highest projected tokens/s/GPU")
    llm = p.add_argument_group("LLM phase (LLM_MODEL or agent.llm.model, with the provider's key)")
    llm.add_argument("--agent-loop", choices=("react", "rlm"), default="react",
                     help="dspy.ReAct (default) or dspy.RLM (needs Deno, or --allow-local-interpreter)")
    llm.add_argument("--rounds", type=_at_least(0), help="investigation rounds (default: the cluster's max_rounds)")
    llm.add_argument("--calls-per-round", type=_at_least(1), default=8,
                     help="tool calls per round (default: %(default)s)")
    llm.add_argument("--patience", type=_at_least(1), default=8,
                     help="stop after this many simulate calls without a better layout (default: %(default)s)")
    llm.add_argument("--llm-timeout", type=float, metavar="S",
                     help="seconds one LLM call may take (default: the cluster's agent.llm.timeout_s, 120)")
    llm.add_argument("--llm-max-tokens", type=_at_least(1), metavar="N",
                     help="completion tokens per LLM call (default: agent.llm.max_tokens, 2048)")
    llm.add_argument("--llm-retries", type=_at_least(0), metavar="N",
                     help="retries of a failed LLM call (default: agent.llm.retries, else 0 for a loopback "
                          "endpoint, 1 otherwise)")
    llm.add_argument("--llm-context-window", type=_at_least(1), metavar="N",
                     help="the model's input tokens, checked before each call (default: agent.llm.context_window, "
                          "else LiteLLM's model info)")
    llm.add_argument("--llm-structured", choices=("schema", "json", "markers"),
                     help="how answers are typed: schema (response_format json_schema), json (json_object with the "
                          "schema, e.g. llama-cpp-python's server) or markers (DSPy's field markers) (default: "
                          "agent.llm.structured, schema)")
    llm.add_argument("--phase-timeout", type=float, metavar="S",
                     help="wall clock of the whole LLM phase (default: agent.llm.phase_timeout_s, 1800)")
    llm.add_argument("--env-file", metavar="PATH",
                     help="LLM settings as NAME=value lines (default: ./.env when present); the real "
                          "environment wins, the cluster's agent.llm block comes after")
    llm.add_argument("--allow-local-interpreter", action="store_true",
                     help="let dspy.RLM run LLM-written code UNSANDBOXED on this machine (no Deno needed)")
    add_search_arguments(p)
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    try:
        env_file = load_env_file(args.env_file)
    except EnvFileError as exc:
        raise InputError(str(exc), key="--env-file") from None
    if env_file is not None:
        console.print(f"LLM settings read from {env_file} (the environment wins over it)", highlight=False)
    cluster = with_search_args(load_cluster(args.target_cluster), args)
    own = own_workload(args, cluster)
    check_pins(own, cluster)
    workload = pinned(own, cluster)
    for line in reading_lines(workload):
        console.print(line, highlight=False, soft_wrap=True)
    investigator = InvestigatorOptions(agent_loop=args.agent_loop, rounds=args.rounds,
                                       calls_per_round=args.calls_per_round, patience=args.patience,
                                       allow_local_interpreter=args.allow_local_interpreter,
                                       call_timeout_s=args.llm_timeout, max_tokens=args.llm_max_tokens,
                                       retries=args.llm_retries, phase_timeout_s=args.phase_timeout,
                                       context_window=args.llm_context_window, structured=args.llm_structured)
    options = TuneOptions(seed_only=args.seed_only, sweep=args.sweep, seed_budget=args.seed_budget,
                          resume=args.resume, dry_run=args.dry_run, jobs=args.jobs, top_k=args.top_k,
                          profiling_mode=args.profiling_mode, pick=args.pick, investigator=investigator,
                          calibration_from=Path(args.calibration_from) if args.calibration_from else None,
                          serve_args=(*search_argv(args), *primus_root_argv(args)))
    with Progress("sweep", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                  transient=True) as bar:
        task = bar.add_task("sweep", total=None)
        outcome = tune(workload, cluster, Path(args.out_dir), options, workload_file=args.workload,
                       cluster_file=args.target_cluster, note=lambda line: console.print(line, highlight=False),
                       progress=lambda done, total: bar.update(task, completed=done, total=total),
                       own=own.effective().as_trial())
    if outcome.winner is None:
        if cluster.search.fix:
            raise no_layout_error(own, cluster)
        print("no legal layout that fits was found", file=sys.stderr)
        return 1
    out = Console(highlight=False, markup=False)  # plain text: verdicts such as "does not fit" must not read as markup
    w = outcome.winner
    error = f" ±{100 * w.error:.1f}%" if w.error is not None else ""
    out.print(f"winner (trial {outcome.winner_trial_id}, {outcome.winner_origin}): "
              f"{w.tokens_per_s_per_gpu:,.1f}{error} tokens/s/GPU projected, {w.memory_per_gpu_gb:.1f} GiB of "
              f"{w.memory_cap_gb:.1f} GiB per GPU")
    c = outcome.winner_calibrated
    if c is not None and c.tokens_per_s_per_gpu is not None:
        out.print(f"  {'measured' if c.measured else 'calibrated'}: {c.tokens_per_s_per_gpu:,.1f} tokens/s/GPU "
                  f"({c.factors.fit})")
    if outcome.pick:
        out.print(f"pick ({outcome.pick.rule}): {outcome.pick.note}")
    out.print("\n".join(short_text(outcome.attribution)))
    if outcome.sweep_best:
        out.print(f"seed best {outcome.seed_best:,.1f} = {outcome.seed_vs_sweep:.1%} of the sweep optimum "
                  f"{outcome.sweep_best:,.1f} over {outcome.space_size:,} legal points")
    out.print(f"stack: {outcome.stack}")
    if outcome.launch:
        out.print(f"launch, from {outcome.launch.where}: bash {(Path(args.out_dir) / 'launch.sh').resolve()}",
                  highlight=False, soft_wrap=True)
        out.print(outcome.launch.command, highlight=False, soft_wrap=True)
    files = " ".join(outcome.launch.files) if outcome.launch else ""
    out.print(f"artifacts in {args.out_dir}: ledger.sqlite trials.jsonl summary.json scratchpad.txt trials.png "
              f"breakdown.png trials/ launch.sh {files}".rstrip())
    return 0
