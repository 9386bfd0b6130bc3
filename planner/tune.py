"""`paratune tune`: seed plan, optional sweep, (LLM phase), then the run's artifacts."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from ledger.store import Ledger
from oracle.specs import ClusterSpec, EvalResult, Workload

from .runs import configured_llm, how_to_run, record_sweep, score_seed_plan, write_artifacts
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
    model = configured_llm(cluster)
    if not model:
        return "skipped: no LLM configured (set LLM_MODEL or agent.llm.model)"
    return f"skipped: the DSPy investigator is not part of this release (LLM {model} configured but unused)"


def tune(workload: Workload, cluster: ClusterSpec, out_dir: Path, options: TuneOptions, *, workload_file: str,
         note: Callable[[str], None] = print, progress: Callable[[int, int], None] | None = None) -> TuneOutcome:
    """Run the search and write every artifact into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    with Ledger(out_dir / "ledger.sqlite") as ledger:
        run = ledger.open_run(workload, cluster, resume=options.resume)
        note(f"run {run.id} in {out_dir / 'ledger.sqlite'}")
        exhausted = score_seed_plan(ledger, run.id, workload, cluster,
                                    budget=options.seed_budget or cluster.budget.max_perf_calls,
                                    dry_run=options.dry_run, note=note)
        timings["seed_s"] = time.perf_counter() - start
        seed_best = ledger.best(run.id)
        swept: SweepResult | None = None
        if options.sweep and not options.seed_only:
            if options.dry_run:
                note("sweep skipped: --dry-run has no oracle to sweep with")
            else:
                swept = sweep(workload, cluster, top_k=options.top_k, jobs=options.jobs, progress=progress)
                record_sweep(ledger, run.id, swept)
                timings["sweep_s"] = swept.wall_s
        llm = llm_phase_status(cluster, options)
        note(f"LLM phase {llm}")
        best = ledger.best(run.id)
        trials = ledger.trials(run.id)
        ledger.set_status(run.id, "finished")
        timings["total_s"] = time.perf_counter() - start
        sweep_best = swept.top[0].tokens_per_s_per_gpu if swept and swept.top else None
        seed_tps = seed_best.tokens_per_s_per_gpu if seed_best else None
        env_lines, command = how_to_run(best, workload_file)
        outcome = TuneOutcome(
            run_id=run.id, winner=best.result if best else None, winner_origin=best.origin if best else None,
            seed_best=seed_tps, sweep_best=sweep_best,
            seed_vs_sweep=seed_tps / sweep_best if seed_tps and sweep_best else None,
            space_size=swept.space_size if swept else None, sweep_fits=swept.fits if swept else None,
            trials=len(trials), seed_trials=sum(t.origin.startswith("seed:") for t in trials),
            budget_exhausted=exhausted, llm_phase=llm, timings_s=timings,
            env_exports=env_lines, launch_command=command,
        )
        write_artifacts(out_dir, workload, cluster, trials, outcome.model_dump(mode="json"), env_lines, command)
    return outcome

