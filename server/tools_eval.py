"""Tools that evaluate or check one layout: memory-only, simulate, benchmark, validate, legal axes, and
explain (a baseline against a winner).

The single-layout ones are coroutines, so they run inline on the event loop: their work (about a
millisecond of oracle and one SQLite commit) costs less than the hop to a worker thread would. `explain`
projects tens of layouts, so it is a plain function the SDK runs in a worker thread.
"""

# No `from __future__ import annotations`: the tools' `Config` type is built per session inside `tools`,
# so their annotations must be evaluated where they are defined.
import json
from collections.abc import Callable
from typing import Annotated

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, BeforeValidator, Field

from paratune.ledger import BudgetLine, Calibrated, Fidelity
from paratune.oracle.constraints import search_axes
from paratune.oracle.errors import InputError
from paratune.oracle.evaluate import layout_violations
from paratune.oracle.layout import layout_facts
from paratune.oracle.legality import LegalAxes
from paratune.oracle.specs import EffectiveConfig, EvalResult, TrialConfig, Violation
from paratune.planner.explanation import Explanation
from paratune.planner.explanation import explain as explain_path
from paratune.planner.runs import final_pick

from .session import Session

CONFIG_TEXT = "TrialConfig knobs, or a whole layout as paratune prints one (an EvalResult's config); {} = baseline"
Origin = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:/+-]+$",
                              description="tag recorded with the trial, e.g. 'llm:round2'")]


class Evaluation(BaseModel):
    """One evaluated layout as the ledger holds it."""

    trial_id: int
    cached: bool = Field(description="answered from the ledger; no budget spent")
    fidelity: Fidelity
    budget: BudgetLine = Field(description="this fidelity's budget after the call")
    result: EvalResult = Field(description="the raw projection")
    calibrated: Calibrated | None = Field(default=None, description=(
        "the projection under the run's factors fitted to recorded measurements (record_measurement)"))


class Validation(BaseModel):
    """Legality of one layout, not recorded."""

    legal: bool
    violations: list[Violation]
    config: EffectiveConfig
    config_key: str
    derived_dp: int | None


def benchmark_unavailable(session: Session) -> str | None:
    """Why benchmark mode cannot run for the active run, or None when it can."""
    if not session.active.cluster.has_gpu:
        return "no GPU: the cluster says has_gpu false (available_for_benchmark.has_gpu); use evaluate_simulate"
    return None


def printed_layouts(session: Session) -> Callable[[object], object]:
    """A validator that reads a JSON string as the object it encodes, and a whole printed layout (every
    EffectiveConfig field) as its knobs after checking its workload settings are the active run's;
    anything else passes to TrialConfig as is."""
    layout_fields = set(EffectiveConfig.model_fields)

    def knobs(value: object) -> object:
        if isinstance(value, str) and value.lstrip().startswith("{"):  # a JSON-encoded config: a real-model habit
            try:
                value = json.loads(value)
            except ValueError:
                raise ValueError("a string config must be a JSON object of knobs") from None
        if isinstance(value, dict) and layout_fields <= set(value):
            layout = EffectiveConfig(**{k: value[k] for k in layout_fields})
            try:
                return session.active.workload.knobs_of(layout).model_dump(exclude_none=True)
            except InputError as exc:
                raise ValueError(str(exc)) from None
        return value

    return knobs


def tools(session: Session) -> list[Callable]:
    """The evaluation tools bound to `session`."""
    knobs = BeforeValidator(printed_layouts(session))
    Config = Annotated[TrialConfig, knobs, Field(default_factory=TrialConfig, description=CONFIG_TEXT)]

    def evaluation(config: TrialConfig, fidelity: Fidelity, origin: str) -> Evaluation:
        record, cached = session.evaluate(config, fidelity, origin)
        line = session.ledger.budget_status(record.run_id)[fidelity]
        return Evaluation(trial_id=record.id, cached=cached, fidelity=fidelity, budget=line, result=record.result,
                          calibrated=record.calibrated)

    async def evaluate_memory_only(config: Config, origin: Origin = "mcp") -> Evaluation:
        """Legality and memory of one layout (free)."""
        return evaluation(config, "memory_only", origin)

    async def evaluate_simulate(config: Config, origin: Origin = "mcp") -> Evaluation:
        """Legality, memory and projected throughput of one layout (one simulate call of budget)."""
        return evaluation(config, "simulate", origin)

    async def evaluate_with_benchmark(config: Config, origin: Origin = "mcp") -> Evaluation:
        """Benchmark one layout on the local GPU, when this build and the cluster allow it."""
        reason = benchmark_unavailable(session)
        if reason:
            raise ToolError(reason)
        return evaluation(config, "benchmark", origin)

    async def validate_config(config: Config) -> Validation:
        """Every legality rule and search constraint (stack, precision, pinned knobs) the layout breaks
        (free, not recorded)."""
        a = session.active
        cfg = a.workload.effective(config)
        violations = layout_violations(a.workload, a.cluster, cfg)
        return Validation(legal=not violations, violations=violations, config=cfg, config_key=cfg.key,
                          derived_dp=layout_facts(a.workload.model, cfg, a.cluster.world_size).dp or None)

    def explain(from_config: Config, to_config: Annotated[TrialConfig | None, knobs, Field(
            description="the winner: " + CONFIG_TEXT.split(";")[0] + "; absent = the run's pick")] = None
                ) -> Explanation:
        """Why `to_config` (default: the run's robust pick) beats `from_config` (default: the workload's layout): the
        path of single-knob changes between them, each re-projected with its tokens/s/GPU and memory delta,
        and the term-by-term difference of their time and memory breakdowns (free, not recorded)."""
        a = session.active
        if to_config is None:
            best, _ = final_pick(session.ledger, a.run.id, a.workload, a.cluster)
            if best is None:
                raise ToolError("the run has no legal trial that fits yet: pass to_config")
            to_config = best.knobs
        return explain_path(a.workload, a.cluster, from_config, to_config)

    async def get_legal_axes() -> LegalAxes:
        """Per-knob values the active run may try: legal for its model and cluster, and allowed by the
        cluster's stack and the search constraints (knobs the stack lacks show only their off value)."""
        a = session.active
        return search_axes(a.workload, a.cluster)

    return [evaluate_memory_only, evaluate_simulate, evaluate_with_benchmark, validate_config, explain, get_legal_axes]
