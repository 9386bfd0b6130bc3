"""Tools that read or annotate the active run: history, incumbent, inputs, budget, scratchpad, LLM.

The quick ones are coroutines that run inline on the event loop; `query_llm` waits on the network in a
worker thread of its own limiter, bounded in time (`server/llm.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, Field

from paratune.ledger import BudgetLine, Calibrated, Factors, Measurement, Note, history_lines
from paratune.oracle.specs import (
    ClusterSpec,
    EffectiveConfig,
    EvalResult,
    ModelArch,
    TrainingArgs,
)
from paratune.planner.launch import LaunchPlan
from paratune.planner.run.measurements import record
from paratune.planner.run.steps import configured_llm, final_pick, how_to_run
from paratune.planner.search.pick import Pick

from .llm import LLMAnswer, ask_bounded
from .paths import plain_text
from .session import Session

T = TypeVar("T")


ANSWER_TEXT = 24_000  # characters of lines or notes in one answer; the SDK sends them twice (text and structured)


def newest_within(items: list[T], size: Callable[[T], int]) -> tuple[list[T], int]:
    """The newest of `items` (oldest first) whose sizes add up to at most ANSWER_TEXT, and how many older ones
    were left out: an answer stays far below 64 KB however long the run's history or notes are."""
    kept, total = 0, 0
    for item in reversed(items):
        total += size(item)
        if total > ANSWER_TEXT and kept:
            break
        kept += 1
    return items[len(items) - kept:], len(items) - kept


class History(BaseModel):
    """The latest trials of a run, one line each."""

    run_id: int
    total_trials: int
    lines: list[str]
    omitted: int = Field(0, description="older lines of the k left out to keep the answer small (ask for fewer, "
                                        "or read paratune://runs/{run_id}/trials)")


class Best(BaseModel):
    """The incumbent and how to launch it."""

    found: bool
    trial_id: int | None = None
    origin: str | None = None
    result: EvalResult | None = Field(default=None, description="the raw projection")
    calibrated: Calibrated | None = Field(default=None, description="under the run's measurement factors")
    measured: list[Measurement] = Field(default_factory=list, description="what the cluster measured for it")
    pick: Pick | None = Field(default=None, description="why it is the pick")
    stack: str | None = None
    launch: LaunchPlan | None = None


class Recorded(BaseModel):
    """A stored measurement, the factors the run now applies, and the measured trial under them."""

    measurement: Measurement
    factors: Factors
    trial_id: int
    raw: EvalResult
    calibrated: Calibrated | None


class Architecture(BaseModel):
    """The workload's model, training arguments and baseline layout."""

    workload_name: str
    is_moe: bool
    model: ModelArch
    training: TrainingArgs
    baseline: EffectiveConfig


class ClusterInfo(BaseModel):
    """The target cluster with its derived figures."""

    cluster: ClusterSpec
    world_size: int
    memory_cap_gb: float = Field(description="usable HBM per GPU after the safety margin, GiB")
    llm_model: str | None = Field(description="the LLM query_llm would use, if any")


class BudgetStatus(BaseModel):
    """Spend per fidelity of a run."""

    run_id: int
    fidelities: dict[str, BudgetLine]
    max_rounds: int


class Scratchpad(BaseModel):
    """A run's latest notes, oldest first."""

    run_id: int
    notes: list[Note]
    omitted: int = Field(0, description="older notes left out to keep the answer small (all of them: "
                                        "paratune://runs/{run_id}/scratchpad)")


def tools(session: Session) -> list[Callable]:
    """The read and note tools bound to `session`."""

    async def get_history(k: Annotated[int, Field(ge=1, le=1000, description="latest trials to show")] = 20
                          ) -> History:
        """The run's latest k trials, oldest first, one line each: trial id, fidelity, origin, the knobs that differ
        from the baseline, then legality, fit, memory and tokens/s/GPU (raw; then calibrated and measured where
        the run has measurements); when the lines are long, the newest of them (`omitted` counts the rest). Free.
        Call it to see what has been tried before proposing more."""
        a = session.active
        lines, omitted = newest_within(history_lines(session.ledger, a.run.id, a.workload.effective(), k), len)
        return History(run_id=a.run.id, total_trials=session.ledger.trial_count(a.run.id), lines=lines,
                       omitted=omitted)

    async def get_best(fidelity: Literal["simulate", "benchmark"] | None = None) -> Best:
        """The run's pick, as export_best picks it (robust: a measured layout ranks by its measurement, the rest
        by their projections calibrated to the measurements; never below the workload's own layout), optionally
        among one fidelity's trials, with its raw projection, calibrated or measured figures, its measurements,
        the pick's reason, the cluster's stack and its launch (command and the files it reads). Free.
        found=false when nothing legal that fits has been simulated yet."""
        a = session.active
        best, chosen = final_pick(session.ledger, a.run.id, a.workload, a.cluster, fidelity=fidelity)
        if best is None:
            return Best(found=False)
        measured = [m for m in session.ledger.measurements(a.run.id) if m.trial_id == best.id]
        return Best(found=True, trial_id=best.id, origin=best.origin, result=best.result, calibrated=best.calibrated,
                    measured=measured, pick=chosen, stack=a.cluster.stack_text,
                    launch=how_to_run(best, a.workload, a.cluster, a.workload_file))

    async def record_measurement(
            trial_id: Annotated[int, Field(ge=1, description="the measured trial (of the active run)")],
            tokens_per_s_per_gpu: Annotated[float, Field(gt=0, allow_inf_nan=False,
                                                         description="what the cluster measured")],
            peak_memory_gib: Annotated[float | None, Field(gt=0, allow_inf_nan=False,
                                                           description="measured peak per GPU, GiB")] = None,
            note: Annotated[str, Field(max_length=2000)] = "") -> Recorded:
        """Record what the user's cluster measured for a trial of the active run (trial_id from an evaluation or
        get_history): tokens_per_s_per_gpu, optionally peak_memory_gib per GPU; refused when not finite, not above
        0, above the layout's rate at the GPU's dense peak, or above its HBM (a layout projected not to fit is
        accepted: it ran). The measured layout then ranks by its measurement, and the run's other projections
        carry `calibrated` beside the raw value (a time and an activation-memory factor fitted to the
        measurements); get_best and export_best follow. Returns the measurement, the factors, and the trial raw
        and as measured."""
        run_id = session.active.run.id
        m, f, trial = record(session.ledger, run_id, trial_id, tokens_per_s_per_gpu, peak_memory_gib, note)
        return Recorded(measurement=m, factors=f, trial_id=trial.id, raw=trial.result, calibrated=trial.calibrated)

    async def get_architecture() -> Architecture:
        """The workload: model architecture in Megatron argument names (layers, hidden size, heads, query groups,
        experts, top-k, MLA ranks, ...), its training arguments and the baseline layout they give. Free."""
        w = session.active.workload
        return Architecture(workload_name=w.name, is_moe=w.model.is_moe, model=w.model, training=w.training,
                            baseline=w.effective())

    async def get_cluster() -> ClusterInfo:
        """The target cluster: nodes, GPUs per node, the GPU's peak figures and links, usable memory per GPU after
        the safety margin, the budget, whether a GPU is present for benchmarks and the configured LLM. Free."""
        c = session.active.cluster
        return ClusterInfo(cluster=c, world_size=c.world_size, memory_cap_gb=c.memory_cap_gb,
                           llm_model=configured_llm(c))

    async def get_budget_status() -> BudgetStatus:
        """Calls spent, limit and left per fidelity (dry, memory_only, simulate, benchmark) for the run; limit null
        means unlimited. Free. Check it before a batch of evaluate_simulate calls."""
        a = session.active
        return BudgetStatus(run_id=a.run.id, fidelities=session.ledger.budget_status(a.run.id),
                            max_rounds=a.run.budget.max_rounds)

    async def note_to_scratchpad(text: Annotated[str, Field(min_length=1, max_length=8000)],
                           author: Annotated[str, Field(min_length=1, max_length=64)] = "agent") -> Note:
        """Append a note to the run's scratchpad (kept in the ledger, survives restarts): hypotheses, what was ruled
        out and why, the plan for the next round. Free. Never put secrets in notes; text that looks like an API
        key is refused. Returns the stored note."""
        return session.ledger.add_note(session.active.run.id, text, author=plain_text(author, "author"))

    async def read_scratchpad() -> Scratchpad:
        """The run's scratchpad notes (id, author, text, time), oldest first: all, or the latest when they are long
        (`omitted` counts the older ones; paratune://runs/{run_id}/scratchpad has them). Free. Read it at the
        start of a round to recall the hypotheses and what was ruled out."""
        run_id = session.active.run.id
        notes, omitted = newest_within(session.ledger.notes(run_id), lambda n: len(n.text))
        return Scratchpad(run_id=run_id, notes=notes, omitted=omitted)

    async def query_llm(prompt: Annotated[str, Field(min_length=1, max_length=50_000)],
                        system: Annotated[str | None, Field(max_length=20_000)] = None,
                        max_tokens: Annotated[int, Field(ge=1, le=8192)] = 1024) -> LLMAnswer:
        """Ask the run's configured LLM (env LLM_MODEL or the cluster's agent.llm.model, through LiteLLM) one
        question; tokens and cost are recorded in the ledger. Costs money at the provider. Fails with the reason
        when no LLM is configured or LiteLLM is missing. Returns the answer text and its usage."""
        a = session.active
        return await ask_bounded(session.ledger, a.run.id, a.cluster.llm_model, prompt, system=system,
                                 max_tokens=max_tokens, timeout_s=a.cluster.llm_timeout_s)

    return [get_history, get_best, record_measurement, get_architecture, get_cluster, get_budget_status,
            note_to_scratchpad, read_scratchpad, query_llm]
