"""Tools that evaluate or check one layout: memory-only, simulate, benchmark, validate, legal axes, and
explain (a baseline against a winner).

Each layout's knobs are bounded first (`Session.bounded`), then the work runs in a worker thread under a
deadline (`server/offload.py`): a millisecond for one layout as a rule, but no request may hold the event
loop that every session's requests share.
"""

# No `from __future__ import annotations`: the tools' `Config` type is built per session inside `tools`,
# so their annotations must be evaluated where they are defined.
import functools
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
from paratune.planner.run.steps import final_pick
from paratune.planner.search.explanation import Explanation
from paratune.planner.search.explanation import explain as explain_path

from .offload import BENCHMARK_S, EXPLAIN_S, LAYOUT_S, off_loop
from .session import Session

# The knobs themselves are the config schema's properties (TrialConfig's fields): stated once, not restated here.
CONFIG_TEXT = "the knobs to change (values: get_legal_axes) or a whole layout as paratune prints one; {} = the baseline"
WINNER_TEXT = "the winner, as for from_config; absent = the run's pick"
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


def _run_pick(session: Session) -> TrialConfig:
    """The knobs of the active run's pick, as export_best picks (a ToolError when nothing fits yet)."""
    a = session.active
    best, _ = final_pick(session.ledger, a.run.id, a.workload, a.cluster)
    if best is None:
        raise ToolError("the run has no legal trial that fits yet: pass to_config")
    return best.knobs


def tools(session: Session) -> list[Callable]:
    """The evaluation tools bound to `session`."""
    knobs = BeforeValidator(printed_layouts(session))
    Config = Annotated[TrialConfig, knobs, Field(default_factory=TrialConfig, description=CONFIG_TEXT)]

    def evaluation(config: TrialConfig, fidelity: Fidelity, origin: str) -> Evaluation:
        record, cached = session.evaluate(config, fidelity, origin)
        line = session.ledger.budget_line(record.run_id, fidelity)
        return Evaluation(trial_id=record.id, cached=cached, fidelity=fidelity, budget=line, result=record.result,
                          calibrated=record.calibrated)

    async def evaluated(config: TrialConfig, fidelity: Fidelity, origin: str) -> Evaluation:
        return await off_loop(functools.partial(evaluation, config, fidelity, origin), what=f"the {fidelity} call",
                              deadline_s=BENCHMARK_S if fidelity == "benchmark" else LAYOUT_S)

    async def evaluate_memory_only(config: Config, origin: Origin = "mcp") -> Evaluation:
        """Legality and projected per-GPU memory (GiB, most-loaded pipeline stage, with a breakdown) of one layout.
        Free (no budget, about a millisecond): call it before evaluate_simulate when unsure a layout fits
        (fits=false: it would run out of memory). An illegal layout is a result, not an error: legal=false with
        every violated rule's code; recorded, no budget spent. Returns the trial id, cached (the ledger had it),
        the memory_only budget line and the EvalResult."""
        return await evaluated(config, "memory_only", origin)

    async def evaluate_simulate(config: Config, origin: Origin = "mcp") -> Evaluation:
        """Legality, memory and projected throughput of one layout: iteration_ms, tokens_per_s_per_gpu (the
        objective, higher is better), TFLOP/s per GPU, MFU and a time breakdown. Costs one call of the simulate
        budget (max_perf_calls) unless the layout was simulated before (cached=true, free); once it is spent the
        call fails and says so. An illegal layout is a result, not an error (legal=false, every violated rule's
        code; no budget spent). Returns the trial id, cached, the budget line after the call and the EvalResult."""
        return await evaluated(config, "simulate", origin)

    async def evaluate_with_benchmark(config: Config, origin: Origin = "mcp") -> Evaluation:
        """Measure one layout on the GPU at hand (one layer of each type timed with torch, the rest extrapolated).
        Costs one call of the benchmark budget and needs a GPU (cluster has_gpu) and a build with benchmark mode;
        otherwise it fails with the reason, and evaluate_simulate is the tool to use. Returns the same shape as
        evaluate_simulate."""
        reason = benchmark_unavailable(session)
        if reason:
            raise ToolError(reason)
        return await evaluated(config, "benchmark", origin)

    async def validate_config(config: Config) -> Validation:
        """Check one layout against every legality rule and search constraint (stack_knob, stack_value,
        constraint_precision, constraint_fix, constraint_allow, constraint_exclude) without evaluating or
        recording it. Free and instant. Returns legal, the violations (code and sentence), the resolved effective
        config with its canonical key, and the derived data-parallel size."""
        a = session.active
        cfg = a.workload.effective(session.bounded(config))

        def validation() -> Validation:
            violations = layout_violations(a.workload, a.cluster, cfg)
            return Validation(legal=not violations, violations=violations, config=cfg, config_key=cfg.key,
                              derived_dp=layout_facts(a.workload.model, cfg, a.cluster.world_size).dp or None)

        return await off_loop(validation, what="validation")

    async def explain(from_config: Config, to_config: Annotated[TrialConfig | None, knobs, Field(
            description=WINNER_TEXT)] = None) -> Explanation:
        """Why one layout beats another: from_config (default {}, the workload's own layout) to to_config (default:
        the run's pick, as export_best picks). Returns both EvalResults; the path of single-knob changes between
        them (a knob with the knobs that only qualify it; two when only legal together), each with its
        tokens/s/GPU and memory delta and the same change's gain on the baseline alone (knobs interact: `order`
        says how the order was chosen); and the term-by-term difference of the two time breakdowns (ms/iteration)
        and memory breakdowns (GiB). Free, not recorded; a second or two."""
        a = session.active
        baseline = session.bounded(from_config, "from_config")
        winner = None if to_config is None else session.bounded(to_config, "to_config")

        def explanation() -> Explanation:
            return explain_path(a.workload, a.cluster, baseline, _run_pick(session) if winner is None else winner)

        return await off_loop(explanation, what="explain", deadline_s=EXPLAIN_S)

    async def get_legal_axes() -> LegalAxes:
        """The values each knob may take on its own for this model on this cluster (divisibility of heads, layers,
        experts, sequence, world size), within what the cluster's stack has and the search constraints allow (a
        knob the stack lacks shows only its off value), and the world size. Free. Call it first when proposing
        layouts; cross-axis rules (TP*PP*CP*DP = world, GBS divisible by MBS*DP, ...) are validate_config's."""
        a = session.active
        return search_axes(a.workload, a.cluster)

    return [evaluate_memory_only, evaluate_simulate, evaluate_with_benchmark, validate_config, explain, get_legal_axes]
