"""Typed options and reports of the LLM phase (no DSPy import: `paratune tune` reads them cheaply)."""

from __future__ import annotations

import shutil
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..llm.bounds import LLMBounds


class InvestigatorOptions(BaseModel):
    """How the LLM phase runs: which loop, how many rounds and tool calls, when to stop early."""

    agent_loop: Literal["react", "rlm"] = "react"
    rounds: int | None = Field(default=None, ge=0, description="default: the cluster's budget.max_rounds")
    calls_per_round: int = Field(default=8, ge=1, description="tool calls one round may make")
    patience: int = Field(default=8, ge=1, description="simulate calls without a better incumbent before stopping")
    allow_local_interpreter: bool = Field(default=False, description="RLM may run LLM-written code unsandboxed")
    call_timeout_s: float | None = Field(default=None, gt=0, description="one LLM call; default agent.llm.timeout_s")
    max_tokens: int | None = Field(default=None, ge=1, description="per call; default agent.llm.max_tokens")
    retries: int | None = Field(default=None, ge=0, description="LiteLLM retries; default agent.llm.retries")
    phase_timeout_s: float | None = Field(default=None, gt=0, description="the whole phase; default "
                                                                            "agent.llm.phase_timeout_s")

    def bounds(self, cluster: Any) -> LLMBounds:
        """The phase's limits: these options where given, else the cluster's agent.llm block."""
        return LLMBounds(call_timeout_s=self.call_timeout_s or cluster.llm_timeout_s,
                         max_tokens=self.max_tokens or cluster.llm_max_tokens,
                         retries=cluster.llm_retries if self.retries is None else self.retries,
                         phase_timeout_s=self.phase_timeout_s or cluster.llm_phase_timeout_s,
                         context_window=cluster.llm_context_window)

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
    llm_calls: int = Field(description="LLM calls answered")
    failed_calls: int = Field(default=0, description="LLM calls that failed or timed out (in llm_calls too)")
    truncated_calls: int = Field(default=0, description="answers cut at max_tokens (llm_calls outcome truncated)")
    start_best: float | None
    best_tokens_per_s_per_gpu: float | None

    @property
    def llm_trials(self) -> int:
        """Layouts the LLM had simulated: the planner's candidates and the rounds' simulate calls."""
        return sum(c.status == "simulated" for c in self.plan.candidates) + sum(r.simulate_calls for r in self.rounds)

    @property
    def headline(self) -> str:
        """What the phase did, said plainly: rounds ok and failed, LLM trials, calls, why it stopped."""
        ok = sum(r.status == "ok" for r in self.rounds)
        plan = "plan failed" if self.plan.error else f"plan: {len(self.plan.candidates)} candidate(s)"
        return (f"{plan}; {ok} round(s) ok, {len(self.rounds) - ok} failed; {self.llm_trials} LLM trial(s) "
                f"simulated; {self.llm_calls} LLM call(s) answered"
                + (f" ({self.truncated_calls} cut at max_tokens: raise --llm-max-tokens)"
                   if self.truncated_calls else "")
                + f", {self.failed_calls} failed; stopped: {self.stop_reason}")

    @property
    def hypotheses(self) -> list[str]:
        """The planner's hypothesis, then each round's next one."""
        found = [self.plan.hypothesis] + [r.next_hypothesis for r in self.rounds]
        return [h for h in found if h]
