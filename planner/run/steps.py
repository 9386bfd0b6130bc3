"""Ledger-backed steps of a tuning run, shared by `paratune tune` and the MCP server.

Scoring one layout at a fidelity (dedupe + budget), the seed plan through the ledger, recording a
sweep, and writing a run's artifacts with its winner as env exports and a launch command.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from paratune.ledger.models import Fidelity, Measurement, TrialRecord
from paratune.ledger.store import BudgetExhausted, Ledger
from paratune.oracle.benchmark import evaluate_with_benchmark
from paratune.oracle.benchmark.cache import LedgerCache
from paratune.oracle.cancel import checkpoint
from paratune.oracle.evaluate import evaluate_config, layout_violations
from paratune.oracle.performance.uncertainty import uncertainty
from paratune.oracle.specs import ClusterSpec, EffectiveConfig, EvalResult, Violation, Workload

from ..launch import LaunchPlan, launch_plan
from ..llm.selection import named_llm
from ..search.pick import Pick, PickRule, pick
from ..search.seed_plan import seed_plan
from ..search.sweep import SweepResult
from . import exports
from .measurements import recalibrate
from .plots import write_breakdown_plot, write_trials_plot

Scorer = Callable[[Ledger, Workload, ClusterSpec, EffectiveConfig, list[Violation]], EvalResult]

# fidelity -> how a layout is scored, given the violations `score` already found (not checked again)
SCORERS: dict[str, Scorer] = {
    "memory_only": lambda ledger, workload, cluster, cfg, violations: evaluate_config(
        workload, cluster, cfg, performance=False, violations=violations),
    "simulate": lambda ledger, workload, cluster, cfg, violations: evaluate_config(
        workload, cluster, cfg, performance=True, violations=violations),
    "benchmark": lambda ledger, workload, cluster, cfg, violations: evaluate_with_benchmark(
        workload, cluster, cfg, cache=LedgerCache(ledger), violations=violations),
}


def configured_llm(cluster: ClusterSpec) -> str:
    """The LLM a run may use, by the investigator's precedence: env LLM_MODEL, else agent.llm.model,
    else the default."""
    return named_llm(cluster.llm_model).model


def score(ledger: Ledger, run_id: int, workload: Workload, cluster: ClusterSpec, cfg: EffectiveConfig,
          fidelity: Fidelity, *, origin: str) -> tuple[TrialRecord, bool]:
    """(trial, cached) of one layout at one fidelity through the ledger's dedupe and budget; an
    illegal layout (or one a search constraint refuses) is recorded with its violations without
    spending budget. A new trial of a run with measurements is stored with its calibrated projection."""
    scorer = SCORERS[fidelity]
    violations = layout_violations(workload, cluster, cfg)  # checked once: the scorer takes them
    if violations:
        hit = ledger.lookup(run_id, cfg.key, fidelity)
        if hit is not None:
            return hit, True
        result = scorer(ledger, workload, cluster, cfg, violations)
        return ledger.record_trial(run_id, cfg, result, fidelity=fidelity, wall_ms=0.0, origin=origin), False
    record, cached = ledger.evaluate_once(run_id, cfg, fidelity,
                                          lambda: scorer(ledger, workload, cluster, cfg, violations), origin=origin)
    if not cached and record.result.iteration_ms and recalibrate(ledger, run_id, [record.id]) is not None:
        record = ledger.trial(run_id, record.id)
    return record, cached


def score_seed_plan(ledger: Ledger, run_id: int, workload: Workload, cluster: ClusterSpec, *, budget: int,
                    fidelity: Fidelity = "simulate", note: Callable[[str], None] = print,
                    progress: Callable[[int, int], None] | None = None) -> bool:
    """Score the seed plan through the ledger: a free memory-only check first, then a budgeted call at
    `fidelity` (simulate, or benchmark for --profiling-mode benchmark) for each candidate that fits.
    True when the budget ran out. `progress(done, total)` follows the candidates; a stopped caller
    (`oracle.cancel`) ends it before the next candidate."""
    plan = seed_plan(workload, cluster)
    scored = 0
    for done, (origin, trial) in enumerate(plan, 1):
        if scored >= budget:
            break
        checkpoint()
        cfg = workload.effective(trial)
        if score(ledger, run_id, workload, cluster, cfg, "memory_only", origin=origin)[0].fits:
            try:
                score(ledger, run_id, workload, cluster, cfg, fidelity, origin=origin)
            except BudgetExhausted as exc:
                note(f"seed plan stopped: {exc}")
                return True
            scored += 1
        if progress:
            progress(done, len(plan))
    return False


def record_sweep(ledger: Ledger, run_id: int, result: SweepResult) -> list[int]:
    """Store a sweep's top-k as trials (no budget: the sweep is the reference) and its summary; their trial ids,
    best first."""
    ids = [ledger.record_trial(run_id, EffectiveConfig(**r.config), r, fidelity="simulate", wall_ms=0.0,
                               origin="sweep").id for r in result.top]
    recalibrate(ledger, run_id, ids)
    ledger.record_sweep_summary(
        run_id, space_size=result.space_size, legal=result.space_size, fits=result.fits, scored=result.scored,
        top_k=[{"config_key": r.config_key, "tokens_per_s_per_gpu": r.tokens_per_s_per_gpu} for r in result.top],
        wall_s=result.wall_s,
    )
    return ids


def own_trial(ledger: Ledger, run_id: int, workload: Workload, cluster: ClusterSpec) -> TrialRecord:
    """The run's trial of the workload's own layout: simulated when it fits, else its memory check; what the
    run lacks of that is evaluated now, free (as the seed plan would, without spending its budget)."""
    cfg = workload.effective()
    hit = ledger.lookup(run_id, cfg.key, "simulate")
    if hit is not None:
        return hit
    violations = layout_violations(workload, cluster, cfg)
    checked = ledger.lookup(run_id, cfg.key, "memory_only") or ledger.record_trial(
        run_id, cfg, evaluate_config(workload, cluster, cfg, performance=False, violations=violations),
        fidelity="memory_only", wall_ms=0.0, origin="baseline")
    if not (checked.legal and checked.fits):
        return checked
    result = evaluate_config(workload, cluster, cfg, performance=True, violations=violations)
    record = ledger.record_trial(run_id, cfg, result, fidelity="simulate", wall_ms=0.0, origin="baseline")
    return ledger.trial(run_id, record.id) if recalibrate(ledger, run_id, [record.id]) else record


def final_pick(ledger: Ledger, run_id: int, workload: Workload, cluster: ClusterSpec, rule: PickRule = "robust",
               fidelity: Fidelity | None = None) -> tuple[TrialRecord | None, Pick | None]:
    """(winner, why) among the run's fitting trials (at `fidelity`, or any) under the oracle's stated error for
    the family, never below the workload's own layout when it fits (`pick`; a run with trials gets its own
    layout projected, free, if it has none); (None, None) for a run without trials."""
    if not ledger.trial_count(run_id):
        return None, None
    own = own_trial(ledger, run_id, workload, cluster)
    trials = [t for t in ledger.trials(run_id) if fidelity is None or t.fidelity == fidelity]
    mine = next((t for t in trials if t.id == own.id), None)
    chosen = pick(trials, uncertainty(workload.model, cluster.gpu).mape, rule, mine)
    return (ledger.trial(run_id, chosen.trial_id) if chosen else None), chosen


def how_to_run(best: TrialRecord | None, workload: Workload, cluster: ClusterSpec,
               workload_file: str) -> LaunchPlan | None:
    """The launch of a run's winner on the cluster's stack; None when there is none."""
    if best is None:
        return None
    return launch_plan(EffectiveConfig(**best.config), workload, cluster, workload_file)


def write_artifacts(out_dir: Path, workload: Workload, cluster: ClusterSpec, trials: list[TrialRecord],
                    summary: dict[str, Any], launch: LaunchPlan | None, *, baseline: EvalResult,
                    winner: TrialRecord | None, measured: list[Measurement], error: float | None) -> list[str]:
    """trials.jsonl, summary.json, trials/*.yaml, trials.png and (with a winner) breakdown.png, launch.sh
    and the files its command reads, in `out_dir`; returns the names written."""
    title = f"{workload.name} on {cluster.name}"
    exports.write_trials_jsonl(out_dir / "trials.jsonl", trials)
    exports.write_summary(out_dir / "summary.json", summary)
    exports.write_overlays(out_dir / "trials", workload, trials)
    write_trials_plot(out_dir / "trials.png", trials, title, baseline=baseline.tokens_per_s_per_gpu,
                       measured=measured, winner_id=winner.id if winner else None, error=error)
    written = ["trials.jsonl", "summary.json", "trials/", "trials.png"]
    if winner is not None and winner.result.iteration_ms and baseline.iteration_ms:
        write_breakdown_plot(out_dir / "breakdown.png", baseline, winner.result, f"{title}: baseline vs winner")
        written.append("breakdown.png")
    if launch is not None:
        exports.write_text(out_dir / "launch.sh", f"#!/usr/bin/env bash\n# run from {launch.where}, on every node: "
                           f"bash {out_dir.resolve() / 'launch.sh'}\n# stack: {cluster.stack_text}\n"
                           f"{launch.command}\n", executable=True)
        for name, text in launch.files.items():
            exports.write_text(out_dir / name, text)
        written += ["launch.sh", *launch.files]
    return written
