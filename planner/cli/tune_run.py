"""`paratune tune`: seed plan, LLM phase (planner and rounds over MCP), optional sweep, then the run's
artifacts."""

from __future__ import annotations

import importlib.util
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from paratune.ledger.models import Calibrated
from paratune.ledger.store import Ledger
from paratune.oracle.benchmark.gate import BenchmarkUnavailable, benchmark_device
from paratune.oracle.errors import InputError
from paratune.oracle.performance.uncertainty import uncertainty
from paratune.oracle.specs import ClusterSpec, EvalResult, TrialConfig, Workload

from ..investigator.phase_types import InvestigationReport, InvestigatorOptions
from ..launch import LaunchPlan
from ..llm.selection import (
    LLMConfig,
    LLMNotConfigured,
    dry_run_llm,
    resolve_llm,
)
from ..run import exports
from ..run.measurements import adopt_measurements
from ..run.steps import record_sweep, score_seed_plan
from ..run.verdict import verdict, write_verdict
from ..search.explanation import Explanation
from ..search.pick import Pick, PickRule
from ..search.sweep import SweepResult, sweep

LLM_SHARE = 0.5  # with an LLM phase ahead, the seed plan leaves this share of the simulate budget to it


class TuneOptions(BaseModel):
    """What `paratune tune` should do."""

    seed_only: bool = False
    sweep: bool = False
    seed_budget: int | None = None
    resume: bool = False
    dry_run: bool = False
    jobs: int | None = None
    top_k: int = 10
    profiling_mode: Literal["simulate", "benchmark"] = "simulate"
    pick: PickRule = "robust"
    investigator: InvestigatorOptions = Field(default_factory=InvestigatorOptions)
    calibration_from: Path | None = None  # another `paratune tune` folder whose measurements of this pair to use
    serve_args: tuple[str, ...] = ()  # the command line's search flags, handed to the `paratune serve` child


class TuneOutcome(BaseModel):
    """The run's headline: winner, seed best, sweep best and how it went."""

    run_id: int
    winner: EvalResult | None
    winner_trial_id: int | None
    winner_origin: str | None
    winner_calibrated: Calibrated | None
    pick: Pick | None
    baseline: EvalResult = Field(description="the user's own layout (before any --fix), simulated")
    attribution: Explanation = Field(
        description="why the winner beats the user's layout (planner/search/explanation.py)")
    measurements_used: str = Field(description="which measurements of this model on this cluster the run uses")
    workload_file: str = Field(description="the workload file the launch artifacts refer to")
    workload_notes: list[str] = Field(description="how reading the workload read a value (a deprecated spelling "
                                                  "read as the stack reads it, ...)")
    not_modelled: list[str] = Field(description="the stack arguments the workload sets that the projection accepts "
                                                "but does not read")
    seed_best: float | None
    sweep_best: float | None
    seed_vs_sweep: float | None
    space_size: int | None
    sweep_fits: int | None = Field(description="sweep points checked and found to fit (a point whose layout or "
                                               "group a bound ruled out is not checked)")
    trials: int
    seed_trials: int
    budget_exhausted: bool
    llm_phase: str
    hypotheses: list[str]
    investigation: InvestigationReport | None
    timings_s: dict[str, float]
    stack: str
    launch: LaunchPlan | None


def choose_llm(cluster: ClusterSpec, options: TuneOptions) -> LLMConfig | str:
    """The LLM the phase will use (`--dry-run`: the scripted one), or why the phase is skipped."""
    if options.seed_only:
        return "skipped: --seed-only"
    if importlib.util.find_spec("dspy") is None:
        return "skipped: the DSPy client is not installed (pip install 'paratune[llm]')"
    if options.dry_run:
        return dry_run_llm()
    try:
        return resolve_llm(cluster.llm_model)
    except LLMNotConfigured as exc:
        return f"skipped: {exc}"


class SeedOutcome(BaseModel):
    """What the seed plan did: whether it ran out of budget, and the best layout it left."""

    exhausted: bool
    best: float | None


def _over_mcp(ledger: Ledger, run_id: int, llm: LLMConfig, cluster: ClusterSpec, options: TuneOptions,
              seed_budget: int, files: tuple[str, str], note: Callable[[str], None], timings: dict[str, float]
              ) -> tuple[SeedOutcome | None, InvestigationReport | None, str]:
    """(seeds, report, status line): the seed plan, then the LLM phase, over one `paratune serve` on this run's
    ledger that does all the scoring (one oracle start-up); seeds is None when the server never got to them."""
    from ..investigator.bounded_lm import build_lm
    from ..investigator.phase import investigate, serve_run
    from ..llm.failures import one_line

    seeds: SeedOutcome | None = None
    start = time.perf_counter()
    try:
        with serve_run(files[0], files[1], ledger.path, run_id, options.serve_args) as server:
            done = server.call("run_seed_plan", budget=seed_budget, fidelity=options.profiling_mode)
            seeds = SeedOutcome(exhausted=done["budget_exhausted"], best=done["best_tokens_per_s_per_gpu"])
            timings["seed_s"] = time.perf_counter() - start
            lm = build_lm(llm, options.investigator.bounds(cluster))
            report = investigate(server, lm, options.investigator, model=llm.model, note=note,
                                 sink=lambda usage: ledger.record_llm_call(run_id, **usage.model_dump()))
    except Exception as exc:  # the seeds and artifacts still stand; say why the phase did not
        return seeds, None, f"failed: {one_line(exc)}"
    timings["llm_s"] = time.perf_counter() - start - timings["seed_s"]
    verdict = "failed" if report.failed else "done"
    creds = f"; credentials: {llm.credentials}" if llm.credentials else ""
    return seeds, report, f"{verdict}: {llm.model} ({llm.source}{creds}), {report.agent_loop}; {report.headline}"


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM and SIGINT raise KeyboardInterrupt (main thread only), so a killed or
    Ctrl-C'd phase still closes its run and writes its artifacts. SIGINT is set explicitly: a process
    started in the background by a non-interactive shell inherits SIGINT ignored, and Python keeps that."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _scratchpad(ledger: Ledger, run_id: int) -> str:
    return "".join(f"[{n.created}] {n.author}: {n.text}\n" for n in ledger.notes(run_id))


def tune(workload: Workload, cluster: ClusterSpec, out_dir: Path, options: TuneOptions, *, workload_file: str,
         cluster_file: str, note: Callable[[str], None] = print,
         progress: Callable[[int, int], None] | None = None, own: TrialConfig | None = None) -> TuneOutcome:
    """Run the search and write every artifact into `out_dir`; `own`: the user's layout before pins (default:
    the workload's), which the pick never falls below and the explanation starts from."""
    llm = choose_llm(cluster, options)
    problem = options.investigator.sandbox_problem() if isinstance(llm, LLMConfig) else None
    if problem:
        raise InputError(problem, key="--agent-loop")
    if options.profiling_mode == "benchmark":
        try:
            benchmark_device(cluster, allow_cpu=False)
        except BenchmarkUnavailable as exc:
            raise InputError(str(exc), key="--profiling-mode") from None
    out_dir.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    with Ledger(out_dir / "ledger.sqlite") as ledger:
        run = ledger.open_run(workload, cluster, resume=options.resume)
        note(f"run {run.id} in {out_dir / 'ledger.sqlite'}")
        adopted = adopt_measurements(ledger, run.id, options.calibration_from)
        note(adopted.line())
        perf_calls = (cluster.budget.max_benchmark_calls if options.profiling_mode == "benchmark"
                      else cluster.budget.max_perf_calls)
        reserve = int(perf_calls * LLM_SHARE) if isinstance(llm, LLMConfig) else 0
        seed_budget = options.seed_budget or perf_calls - reserve
        interrupted = False
        if isinstance(llm, LLMConfig):
            try:
                with _sigterm_as_interrupt():
                    seeds, report, status = _over_mcp(ledger, run.id, llm, cluster, options, seed_budget,
                                                      (workload_file, cluster_file), note, timings)
            except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: close the run with what it has
                interrupted = True
                best_seed = ledger.best(run.id)
                seeds = SeedOutcome(exhausted=False, best=best_seed.tokens_per_s_per_gpu if best_seed else None)
                report = getattr(exc, "report", None)  # the phase's report so far (PhaseInterrupted)
                status = ("interrupted: the trials and LLM calls so far are in the ledger and the artifacts are "
                          "written; `paratune tune ... --resume` continues this run"
                          + (f" ({report.headline})" if report else ""))
        else:
            seeds, report, status = None, None, llm
        if seeds is None:  # no LLM phase, or its server never started: score the seeds here
            exhausted = score_seed_plan(ledger, run.id, workload, cluster, budget=seed_budget,
                                        fidelity=options.profiling_mode, note=note)
            best_seed = ledger.best(run.id)
            seeds = SeedOutcome(exhausted=exhausted, best=best_seed.tokens_per_s_per_gpu if best_seed else None)
            timings["seed_s"] = time.perf_counter() - start
        note(f"LLM phase {status}")
        swept: SweepResult | None = None
        earlier = ledger.sweep_summaries(run.id) if options.resume else []
        if interrupted:
            pass  # no sweep after an interrupt: the run closes now
        elif options.sweep and not options.seed_only and earlier:  # a finished sweep is not run (or recorded) twice
            note(f"sweep: run {run.id} already holds a finished sweep of {earlier[-1].space_size:,} points; kept")
        elif options.sweep and not options.seed_only:
            swept = sweep(workload, cluster, top_k=options.top_k, within=uncertainty(workload.model, cluster.gpu).mape,
                          jobs=options.jobs, progress=progress)
            record_sweep(ledger, run.id, swept)
            timings["sweep_s"] = swept.wall_s
        v = verdict(ledger, run.id, workload, cluster, own or TrialConfig(), options.pick, workload_file)
        best = v.winner
        trials = ledger.trials(run.id)
        ledger.set_status(run.id, "finished")
        timings["total_s"] = time.perf_counter() - start
        last = earlier[-1] if earlier and swept is None else None
        sweep_best = (swept.top[0].tokens_per_s_per_gpu if swept and swept.top else
                      last.top_k[0]["tokens_per_s_per_gpu"] if last and last.top_k else None)
        outcome = TuneOutcome(
            run_id=run.id, winner=best.result if best else None, winner_trial_id=best.id if best else None,
            winner_origin=best.origin if best else None, winner_calibrated=best.calibrated if best else None,
            pick=v.pick, baseline=v.attribution.baseline, attribution=v.attribution, measurements_used=adopted.line(),
            seed_best=seeds.best, sweep_best=sweep_best,
            seed_vs_sweep=seeds.best / sweep_best if seeds.best and sweep_best else None,
            space_size=swept.space_size if swept else last.space_size if last else None,
            sweep_fits=swept.fits if swept else last.fits if last else None,
            trials=len(trials), seed_trials=sum(t.origin.startswith("seed:") for t in trials),
            budget_exhausted=seeds.exhausted, llm_phase=status, hypotheses=report.hypotheses if report else [],
            investigation=report, timings_s=timings, stack=cluster.stack_text, launch=v.launch,
            workload_file=workload_file, workload_notes=list(workload.notes),
            not_modelled=list(workload.not_modelled),
        )
        write_verdict(out_dir, ledger, run.id, workload, cluster, v, outcome.model_dump(mode="json"))
        exports.write_text(out_dir / "scratchpad.txt", _scratchpad(ledger, run.id))
    return outcome
