"""Typed options and reports of the LLM phase (no DSPy import: `paratune tune` reads them cheaply)."""

from __future__ import annotations

import shutil
from typing import Any, Literal

from pydantic import BaseModel, Field


class InvestigatorOptions(BaseModel):
    """How the LLM phase runs: which loop, how many rounds and tool calls, when to stop early."""

    agent_loop: Literal["react", "rlm"] = "react"
    rounds: int | None = Field(default=None, ge=0, description="default: the cluster's budget.max_rounds")
    calls_per_round: int = Field(default=8, ge=1, description="tool calls one round may make")
    patience: int = Field(default=8, ge=1, description="simulate calls without a better incumbent before stopping")
    allow_local_interpreter: bool = Field(default=False, description="RLM may run LLM-written code unsandboxed")

    def sandbox_problem(self) -> str | None:
        """Why the RLM loop cannot run here, or None (ReAct runs no code)."""
        if self.agent_loop != "rlm" or self.allow_local_interpreter or shutil.which("deno"):
            return None
        return ("--agent-loop rlm runs LLM-written code in DSPy's Deno sandbox and deno is not on PATH: install "
                "Deno (npm or PyPI package `deno`; its first start fetches a module from deno.land), or pass "
                "--allow-local-interpreter to run that code unsandboxed on this machine")


class CandidateOutcome(BaseModel):
    """What became of one planner candidate: simulated, or rejected/skipped with the reasons."""

    config: Any
    status: Literal["simulated", "rejected", "skipped"]
    reasons: list[str] = Field(default_factory=list)
    trial_id: int | None = None
    tokens_per_s_per_gpu: float | None = None


class PlanReport(BaseModel):
    """The planner's hypothesis and its candidates, in the planner's order (or why it failed)."""

    hypothesis: str | None = None
    candidates: list[CandidateOutcome] = Field(default_factory=list)
    error: str | None = None


class RoundReport(BaseModel):
    """One investigation round: its findings and next hypothesis, or why it failed."""

    round: int
    status: Literal["ok", "failed"]
    findings: str | None = None
    next_hypothesis: str | None = None
    error: str | None = None
    tool_calls: int
    simulate_calls: int


class InvestigationReport(BaseModel):
    """The LLM phase as summary.json records it (model names only, never keys)."""

    model: str
    agent_loop: Literal["react", "rlm"]
    plan: PlanReport
    rounds: list[RoundReport]
    stop_reason: str
    llm_calls: int
    start_best: float | None
    best_tokens_per_s_per_gpu: float | None

    @property
    def hypotheses(self) -> list[str]:
        """The planner's hypothesis, then each round's next one."""
        found = [self.plan.hypothesis] + [r.next_hypothesis for r in self.rounds]
        return [h for h in found if h]
