"""The planner: a hypothesis and 3-8 cross-axis candidates, each then checked for free and simulated."""

from __future__ import annotations

import json
from typing import Any

import dspy

from .mcp_client import ToolCallError
from .phase_types import CandidateOutcome, PlanReport
from .signatures import PlanLayouts
from .structured import MAX_CANDIDATES
from .tool_gate import ToolGate

ECHO = 80  # characters of a malformed candidate kept in the report and the scratchpad


class Planner(dspy.Module):
    """Reads the run and proposes layouts to simulate, best expected first (dspy.Predict: the signature's
    optional reasoning comes after the answer, so a small model's token budget goes to the candidates)."""

    def __init__(self) -> None:
        super().__init__()
        self.propose = dspy.Predict(PlanLayouts)

    def forward(self, **inputs: str) -> dspy.Prediction:
        return self.propose(**inputs)


def evaluate_candidate(gate: ToolGate, config: Any) -> CandidateOutcome:
    """A free memory check, then (legal and fitting) one simulate call; rejections keep their reasons.
    A JSON-encoded object is decoded first (a real-model habit); anything else is rejected on its own,
    stored cut to `ECHO` characters."""
    def clip(text: str) -> str:
        return text if len(text) <= ECHO else text[:ECHO] + "..."

    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            return CandidateOutcome(config=clip(config), status="rejected", reasons=["not a TrialConfig object"])
    if not isinstance(config, dict):
        return CandidateOutcome(config=clip(repr(config)), status="rejected", reasons=["not a TrialConfig object"])
    try:
        memory = gate.call("evaluate_memory_only", config=config)
    except ToolCallError as exc:
        return CandidateOutcome(config=config, status="rejected", reasons=[str(exc)])
    result = memory["result"]
    if not result["legal"]:
        return CandidateOutcome(config=config, status="rejected", trial_id=memory["trial_id"],
                                reasons=[v["message"] for v in result["violations"]])
    if not result["fits"]:
        return CandidateOutcome(config=config, status="rejected", trial_id=memory["trial_id"], reasons=[
            f"needs {result['memory_per_gpu_gb']:.1f} GiB per GPU, {result['memory_cap_gb']:.1f} GiB usable"])
    try:
        simulated = gate.call("evaluate_simulate", config=config)
    except ToolCallError as exc:
        return CandidateOutcome(config=config, status="skipped", reasons=[str(exc)])
    return CandidateOutcome(config=config, status="simulated", trial_id=simulated["trial_id"],
                            tokens_per_s_per_gpu=simulated["result"]["tokens_per_s_per_gpu"])


def plan(gate: ToolGate, inputs: dict[str, str], example: dict[str, Any]) -> PlanReport:
    """Ask the planner (the knobs' line followed by one worked `example` candidate) and evaluate its first
    MAX_CANDIDATES candidates in its order."""
    knobs = f"{inputs['knobs']}\none candidate, for its shape only: {json.dumps(example)}"
    prediction = Planner()(**{**inputs, "knobs": knobs})
    candidates = prediction.candidates if isinstance(prediction.candidates, list) else []
    outcomes: list[CandidateOutcome] = []
    seen: list[Any] = []
    for c in candidates[:MAX_CANDIDATES]:  # a repeat is not evaluated twice (small models repeat themselves)
        if c in seen:
            outcomes.append(CandidateOutcome(config=c, status="skipped", reasons=["a repeat of an earlier candidate"]))
            continue
        seen.append(c)
        outcomes.append(evaluate_candidate(gate, c))
    return PlanReport(hypothesis=prediction.hypothesis, candidates=outcomes)


def plan_note(report: PlanReport) -> str:
    """The scratchpad note of a plan: the hypothesis and what became of each candidate."""
    lines = [f"plan: {report.hypothesis}"]
    for c in report.candidates:
        outcome = (f"{c.tokens_per_s_per_gpu:,.1f} tokens/s/GPU" if c.tokens_per_s_per_gpu is not None
                   else c.status)
        lines.append(f"- {c.config}: {outcome}{': ' + '; '.join(c.reasons) if c.reasons else ''}")
    return "\n".join(lines)
