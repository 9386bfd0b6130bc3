"""`paratune tune`: seed plan, optional sweep, (LLM phase), then the run's artifacts."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from ledger import exports
from ledger.store import BudgetExhausted, Ledger
from oracle.evaluate import evaluate_config
from oracle.specs import ClusterSpec, EffectiveConfig, EvalResult, Workload

from .dry import dry_result
from .launch import env_exports, launch_command
from .seed_plan import seed_plan
from .sweep import SweepResult, sweep


class TuneOptions(BaseModel):
    """What `paratune tune` should do."""

    seed_only: bool = False
    sweep: bool = False
    seed_budget: int | None = None
    resume: bool = False
    dry_run: bool = False
    jobs: int | None = None
    top_k: int = 10


class TuneOutcome(BaseModel):
    """The run's headline: winner, seed best, sweep best and how it went."""

    run_id: int
    winner: EvalResult | None
    winner_origin: str | None
    seed_best: float | None
    sweep_best: float | None
    seed_vs_sweep: float | None
    space_size: int | None
    sweep_fits: int | None
    trials: int
    seed_trials: int
    budget_exhausted: bool
    llm_phase: str
    timings_s: dict[str, float]
    env_exports: list[str]
    launch_command: str | None


def llm_phase_status(cluster: ClusterSpec, options: TuneOptions) -> str:
    """Why the LLM investigator did not run in this build."""
    if options.seed_only:
        return "skipped: --seed-only"
    model = os.environ.get("LLM_MODEL") or cluster.llm_model
    if not model:
        return "skipped: no LLM configured (set LLM_MODEL or agent.llm.model)"
    return f"skipped: the DSPy investigator is not part of this release (LLM {model} configured but unused)"


def _seed(ledger: Ledger, run_id: int, workload: Workload, cluster: ClusterSpec, options: TuneOptions,
          note: Callable[[str], None]) -> bool:
    """Score the seed plan through the ledger (dedupe + budget): a free memory-only check first, then a
    budgeted simulate call for each candidate that fits. True when the budget ran out."""
    budget = options.seed_budget or cluster.budget.max_perf_calls
    scored = 0
    for origin, trial in seed_plan(workload, cluster):
        if scored >= budget:
            break
        cfg = workload.effective(trial)
        if options.dry_run:
            fidelity, run = "dry", (lambda cfg=cfg: dry_result(cfg, cluster))
        else:
            memory, _ = ledger.evaluate_once(
                run_id, cfg, "memory_only", lambda cfg=cfg: evaluate_config(workload, cluster, cfg, performance=False),
                origin=origin)
            if not memory.fits:
                continue
            fidelity, run = "simulate", (lambda cfg=cfg: evaluate_config(workload, cluster, cfg, performance=True))
        try:
            ledger.evaluate_once(run_id, cfg, fidelity, run, origin=origin)
        except BudgetExhausted as exc:
            note(f"seed plan stopped: {exc}")
            return True
        scored += 1
    return False


def _record_sweep(ledger: Ledger, run_id: int, result: SweepResult) -> None:
    for r in result.top:
        ledger.record_trial(run_id, EffectiveConfig(**r.config), r,
                            fidelity="simulate", wall_ms=0.0, origin="sweep")
    ledger.record_sweep_summary(
        run_id, space_size=result.space_size, legal=result.space_size, fits=result.fits, scored=result.fits,
        top_k=[{"config_key": r.config_key, "tokens_per_s_per_gpu": r.tokens_per_s_per_gpu} for r in result.top],
        wall_s=result.wall_s,
    )


def tune(workload: Workload, cluster: ClusterSpec, out_dir: Path, options: TuneOptions, *, workload_file: str,
         note: Callable[[str], None] = print, progress: Callable[[int, int], None] | None = None) -> TuneOutcome:
    """Run the search and write every artifact into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    with Ledger(out_dir / "ledger.sqlite") as ledger:
        run = ledger.open_run(workload, cluster, resume=options.resume)
        note(f"run {run.id} in {out_dir / 'ledger.sqlite'}")
        exhausted = _seed(ledger, run.id, workload, cluster, options, note)
        timings["seed_s"] = time.perf_counter() - start
        seed_best = ledger.best(run.id)
        swept: SweepResult | None = None
        if options.sweep and not options.seed_only:
            if options.dry_run:
                note("sweep skipped: --dry-run has no oracle to sweep with")
            else:
                swept = sweep(workload, cluster, top_k=options.top_k, jobs=options.jobs, progress=progress)
                _record_sweep(ledger, run.id, swept)
                timings["sweep_s"] = swept.wall_s
        llm = llm_phase_status(cluster, options)
        note(f"LLM phase {llm}")
        best = ledger.best(run.id)
        trials = ledger.trials(run.id)
        ledger.set_status(run.id, "finished")
        timings["total_s"] = time.perf_counter() - start
        sweep_best = swept.top[0].tokens_per_s_per_gpu if swept and swept.top else None
        seed_tps = seed_best.tokens_per_s_per_gpu if seed_best else None
        winner_cfg = EffectiveConfig(**best.config) if best else None
        outcome = TuneOutcome(
            run_id=run.id, winner=best.result if best else None, winner_origin=best.origin if best else None,
            seed_best=seed_tps, sweep_best=sweep_best,
            seed_vs_sweep=seed_tps / sweep_best if seed_tps and sweep_best else None,
            space_size=swept.space_size if swept else None, sweep_fits=swept.fits if swept else None,
            trials=len(trials), seed_trials=sum(t.origin.startswith("seed:") for t in trials),
            budget_exhausted=exhausted, llm_phase=llm, timings_s=timings,
            env_exports=env_exports(winner_cfg) if winner_cfg else [],
            launch_command=launch_command(winner_cfg, workload_file) if winner_cfg else None,
        )
        _write_artifacts(out_dir, workload, cluster, trials, outcome)
    return outcome


def _write_artifacts(out_dir: Path, workload: Workload, cluster: ClusterSpec, trials: list,
                     outcome: TuneOutcome) -> None:
    exports.write_trials_jsonl(out_dir / "trials.jsonl", trials)
    exports.write_summary(out_dir / "summary.json", outcome.model_dump(mode="json"))
    exports.write_overlays(out_dir / "trials", workload, trials)
    exports.write_plot(out_dir / "trials.png", trials, f"{workload.name} on {cluster.name}")
    if outcome.winner:
        exports.write_text(out_dir / "winner.env", "\n".join(outcome.env_exports) + "\n")
        exports.write_text(out_dir / "launch.sh", "#!/usr/bin/env bash\n" + "\n".join(outcome.env_exports)
                           + "\n" + (outcome.launch_command or "") + "\n")
