"""Tools that open, search and export a run: open_run, run_seed_plan, sweep, export_best.

All run off the event loop, in a worker thread under a deadline (`server/offload.py`); the seed plan and the
sweep relay their progress to the client and stop at their next step once the call is given up.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable
from pathlib import PurePath
from typing import Annotated, Literal

import anyio.from_thread
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from paratune.ledger import BudgetLine, trial_line
from paratune.oracle.errors import InputError
from paratune.oracle.evaluate import evaluate_simulate
from paratune.oracle.performance.uncertainty import uncertainty
from paratune.oracle.specs import Budget, EvalResult
from paratune.planner.launch import LaunchPlan
from paratune.planner.run.steps import (
    final_pick,
    how_to_run,
    record_sweep,
    score_seed_plan,
    write_artifacts,
)
from paratune.planner.search.pick import Pick
from paratune.planner.search.seed_plan import seed_plan
from paratune.planner.search.sweep import sweep as run_sweep

from .offload import SEARCH_S, off_loop
from .session import Session
from .tools_eval import benchmark_unavailable

PROGRESS_EVERY_S = 0.2  # at most this often a long tool sends a progress notification
log = logging.getLogger(__name__)


class RunSummary(BaseModel):
    """The run tools now act on."""

    run_id: int
    status: str
    workload_name: str
    cluster_name: str
    world_size: int
    budget: Budget
    trials: int = Field(description="trials already in the ledger for this run")
    measurements_used: int = Field(description=(
        "measurements of this model on this cluster from earlier runs (or calibration_from's) the run now uses: "
        "a measured layout ranks by its measurement and calibrates the projections of the others"))
    measurements: str = Field(description="that count in a sentence, with any measurement left out and why")


class SeedPlanReport(BaseModel):
    """What scoring the seed plan did."""

    run_id: int
    candidates: int
    new_trials: int
    budget_exhausted: bool
    simulate_budget: BudgetLine
    best_trial_id: int | None
    best_tokens_per_s_per_gpu: float | None


class SweepEntry(BaseModel):
    """One of the sweep's best layouts, recorded as a trial (its whole result: get_history, get_best)."""

    trial_id: int
    tokens_per_s_per_gpu: float | None
    memory_per_gpu_gb: float | None
    line: str = Field(description="the trial as get_history shows it: the knobs that differ from the baseline")


class SweepReport(BaseModel):
    """The sweep's counts and its best layouts, best first (one line each, so a top 100 stays a small answer)."""

    run_id: int
    space_size: int
    fits: int
    wall_s: float
    jobs: int
    recorded: int = Field(description=(
        "layouts recorded as trials: the top_k and those beyond it within the oracle's stated error of the best, "
        "which the robust pick weighs"))
    top: list[SweepEntry]


class Export(BaseModel):
    """Where the artifacts went and the winner."""

    out_dir: str
    files: list[str]
    winner: EvalResult | None
    winner_origin: str | None
    pick: Pick | None = Field(description="which trial won and why (robust: within the oracle's error, most headroom)")
    stack: str
    launch: LaunchPlan | None


def _relay(ctx: Context, what: str) -> Callable[[int, int], None]:
    """A worker-thread `progress(done, total)` that forwards to the client, throttled."""
    last = 0.0

    def progress(done: int, total: int) -> None:
        nonlocal last
        now = time.monotonic()
        if done < total and now - last < PROGRESS_EVERY_S:
            return
        last = now
        anyio.from_thread.run(functools.partial(ctx.report_progress, done, total, f"{what}: {done}/{total}"))

    return progress


def tools(session: Session) -> list[Callable]:
    """The run-level tools bound to `session`."""

    async def open_run(workload: Annotated[str, Field(description="workload YAML path")],
                       cluster: Annotated[str, Field(description="target-cluster YAML path")],
                       resume: bool = True,
                       calibration_from: Annotated[str | None, Field(description=(
                           "a `paratune tune` output folder (under the allowed roots) whose measurements of this "
                           "model on this cluster the run takes; default: the server ledger's earlier runs"))] = None,
                       ) -> RunSummary:
        """Load a workload YAML (native or Primus experiment) and a target-cluster YAML and make their run the
        current one, resuming the latest run for exactly these inputs unless resume=false. The run takes the
        measurements of the same model on the same cluster from earlier runs (or from calibration_from's folder),
        as `paratune tune` does. Paths are relative to the server's first allowed root and must stay under the
        allowed roots. Free. Returns the run id, names, world size, budget, how many trials it already has and how
        many earlier measurements it uses."""
        def opened() -> RunSummary:
            source = (session.roots.file(str(PurePath(calibration_from) / "ledger.sqlite"), "calibration_from").parent
                      if calibration_from is not None else None)
            a = session.open_run(session.roots.file(workload, "workload"), session.roots.file(cluster, "cluster"),
                                 resume=resume, calibration_from=source)
            return RunSummary(run_id=a.run.id, status=a.run.status, workload_name=a.workload.name,
                              cluster_name=a.cluster.name, world_size=a.cluster.world_size, budget=a.run.budget,
                              trials=session.ledger.trial_count(a.run.id), measurements_used=a.adopted.used,
                              measurements=a.adopted.line())

        return await off_loop(opened, what="opening the run")

    async def run_seed_plan(ctx: Context,
                            budget: Annotated[int | None, Field(ge=1, le=10_000, description=(
                                "max scored calls; default the run's budget for the fidelity"))] = None,
                            fidelity: Annotated[Literal["simulate", "benchmark"], Field(description=(
                                "simulate (analytic), or benchmark (measured on the local GPU)"))] = "simulate",
                            ) -> SeedPlanReport:
        """Score the deterministic seed plan: single-axis sweeps around the baseline (recompute, MoE dispatcher and
        EP overlap, TP overlap, FP8 where allowed, schedules, neighbours, DP sharding, a coarse parallelism
        grid), only what the cluster's stack and the search constraints allow. Each candidate gets a free memory
        check and, when it fits, one simulate call of budget (at most `budget` calls, default the run's
        max_perf_calls); already-scored candidates are free. Takes seconds; reports progress. Returns the counts,
        whether the budget ran out and the incumbent."""
        a = session.active
        ledger, run_id = session.ledger, a.run.id
        if fidelity == "benchmark":
            reason = benchmark_unavailable(session)
            if reason:
                raise ToolError(reason)
        limit = a.cluster.budget.max_benchmark_calls if fidelity == "benchmark" else a.cluster.budget.max_perf_calls
        before = len(ledger.trials(run_id))
        exhausted = await off_loop(functools.partial(
            score_seed_plan, ledger, run_id, a.workload, a.cluster, budget=budget or limit, fidelity=fidelity,
            note=log.info, progress=_relay(ctx, "seed plan")), what="the seed plan", deadline_s=SEARCH_S)
        best = ledger.best(run_id)
        return SeedPlanReport(
            run_id=run_id, candidates=len(seed_plan(a.workload, a.cluster)),
            new_trials=len(ledger.trials(run_id)) - before, budget_exhausted=exhausted,
            simulate_budget=ledger.budget_status(run_id)["simulate"], best_trial_id=best.id if best else None,
            best_tokens_per_s_per_gpu=best.tokens_per_s_per_gpu if best else None)

    async def sweep(ctx: Context,
                    jobs: Annotated[int, Field(ge=1, le=os.cpu_count() or 1, description="worker processes")] = 1,
                    top_k: Annotated[int, Field(ge=1, le=100, description="best layouts to list")] = 10) -> SweepReport:
        """Score the whole legal space of the run with the oracle (memory pre-filter, then simulate) and record the
        top_k layouts as trials, with up to 50 more within the oracle's stated error of the best, for the robust
        pick (export_best) to weigh, as `paratune tune` does: the reference optimum, spending no budget. CPU-heavy
        (seconds to minutes); reports progress. Returns the space size, how many fit, the wall time, how many it
        recorded and the top_k layouts, best first (trial id, tokens/s/GPU, memory, history line; get_best and
        get_history read their whole results)."""
        a = session.active
        result = await off_loop(functools.partial(
            run_sweep, a.workload, a.cluster, top_k=top_k, within=uncertainty(a.workload.model, a.cluster.gpu).mape,
            jobs=jobs, progress=_relay(ctx, "sweep")), what="the sweep", deadline_s=SEARCH_S)
        ids = record_sweep(session.ledger, a.run.id, result)
        base = a.workload.effective().as_trial().__dict__
        top = [SweepEntry(trial_id=t.id, tokens_per_s_per_gpu=t.tokens_per_s_per_gpu,
                          memory_per_gpu_gb=t.memory_per_gpu_gb, line=trial_line(t, base))
               for t in (session.ledger.trial(a.run.id, i) for i in ids[:top_k])]
        return SweepReport(run_id=a.run.id, space_size=result.space_size, fits=result.fits, wall_s=result.wall_s,
                           jobs=result.jobs, recorded=len(ids), top=top)

    async def export_best(
            out_dir: Annotated[str, Field(description="folder for the artifacts, under the allowed roots")],
            pick: Annotated[Literal["robust", "argmax"], Field(description=(
                "robust: of the layouts within the oracle's stated error of the best, the one with the most memory "
                "headroom; argmax: the highest projected tokens/s/GPU"))] = "robust") -> Export:
        """Write the run's artifacts to out_dir (under the allowed roots; created if missing): trials.jsonl,
        summary.json, trials.png, trials/<id>.yaml (re-runnable workload overlays) and, when there is a winner,
        launch.sh and the files its command reads (Primus: winner.primus.yaml). The winner is the `pick`
        (robust by default). Free. Returns the files, the winner, the pick and why, the stack and its launch."""

        def exported() -> Export:
            a = session.active
            trials = session.ledger.trials(a.run.id)
            if not trials:
                raise InputError(f"run {a.run.id} has no trials yet: evaluate or run the seed plan first")
            target = session.roots.directory(out_dir, "out_dir")
            best, chosen = final_pick(session.ledger, a.run.id, a.workload, a.cluster, pick)
            launch = how_to_run(best, a.workload, a.cluster, a.workload_file)
            summary = {"run_id": a.run.id, "workload": a.workload.name, "cluster": a.cluster.name,
                       "trials": len(trials), "winner": best.result.model_dump(mode="json") if best else None,
                       "winner_origin": best.origin if best else None,
                       "pick": chosen.model_dump() if chosen else None,
                       "budget": {f: line.model_dump()
                                  for f, line in session.ledger.budget_status(a.run.id).items()},
                       "stack": a.cluster.stack_text, "launch": launch.model_dump() if launch else None}
            baseline = evaluate_simulate(a.workload, a.cluster)
            summary["baseline"] = baseline.model_dump(mode="json")
            files = write_artifacts(target, a.workload, a.cluster, trials, summary, launch, baseline=baseline,
                                    winner=best, measured=session.ledger.measurements(a.run.id),
                                    error=chosen.error if chosen else None)
            return Export(out_dir=str(target), files=files, winner=best.result if best else None,
                          winner_origin=best.origin if best else None, pick=chosen, stack=a.cluster.stack_text,
                          launch=launch)

        return await off_loop(exported, what="the export")

    return [open_run, run_seed_plan, sweep, export_best]
