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
    retries: int | None = Field(default=None, ge=0, description="retries of a failed call; default "
                                                                "agent.llm.retries, else 0 on loopback, 1 remote")
    phase_timeout_s: float | None = Field(default=None, gt=0, description="the whole phase; default "
                                                                            "agent.llm.phase_timeout_s")
    context_window: int | None = Field(default=None, ge=1, description="the model's input tokens; default "
                                                                       "agent.llm.context_window")
    structured: Literal["schema", "json", "markers"] | None = Field(default=None, description="how answers are "
                                                                    "typed; default agent.llm.structured")

    def bounds(self, cluster: Any) -> LLMBounds:
        """The phase's limits: these options (the CLI's flags) where given, else the cluster's agent.llm block."""
        return LLMBounds(call_timeout_s=self.call_timeout_s or cluster.llm_timeout_s,
                         max_tokens=self.max_tokens or cluster.llm_max_tokens,
                         retries=cluster.llm_retries if self.retries is None else self.retries,
                         phase_timeout_s=self.phase_timeout_s or cluster.llm_phase_timeout_s,
                         context_window=self.context_window or cluster.llm_context_window,
                         structured=self.structured or cluster.llm_structured,
                         phase_timeout_from="--phase-timeout" if self.phase_timeout_s else "agent.llm.phase_timeout_s",
                         call_timeout_from="--llm-timeout" if self.call_timeout_s else "agent.llm.timeout_s")

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
    llm_calls: int = Field(description="LLM calls answered with an answer that parsed")
    failed_calls: int = Field(default=0, description="LLM calls that failed, timed out or did not parse")
    failures: dict[str, int] = Field(default_factory=dict, description="failed calls by class (llm_calls.outcome): "
                                                                      "unparsed, timeout, connection, ...")
    truncated_calls: int = Field(default=0, description="answers cut at max_tokens (llm_calls outcome truncated)")
    start_best: float | None
    best_tokens_per_s_per_gpu: float | None

    @property
    def llm_trials(self) -> int:
        """Layouts the LLM had simulated: the planner's candidates and the rounds' simulate calls."""
        return sum(c.status == "simulated" for c in self.plan.candidates) + sum(r.simulate_calls for r in self.rounds)

    @property
    def failed(self) -> bool:
        """No call of the phase gave an answer that parsed, and a call failed or the planner did."""
        return self.llm_calls == 0 and (self.failed_calls > 0 or self.plan.error is not None)

    @property
    def first_change(self) -> str | None:
        """The first thing to change when calls failed, from the commonest cause seen, or None."""
        f = self.failures
        if f.get("unparsed") and self.truncated_calls:
            return "answers were cut at max_tokens: raise --llm-max-tokens"
        if f.get("unparsed"):
            return ("the model's answers did not parse: set agent.llm.structured to the form the endpoint takes "
                    "(schema: response_format json_schema; json: json_object with a schema, e.g. llama-cpp-python; "
                    "markers: none), or use a larger model")
        if f.get("timeout"):
            return ("calls timed out: raise --llm-timeout, lower --llm-max-tokens, or use a smaller model; on a "
                    "local server keep --llm-retries 0 (a retry queues behind the abandoned call)")
        if f.get("connection") or f.get("server_error"):
            return "the endpoint did not answer: check that it is up at OPENAI_API_BASE"
        if self.failed_calls:
            return f"calls failed ({', '.join(sorted(f))}): see llm_calls in the ledger"
        return None

    @property
    def headline(self) -> str:
        """What the phase did, said plainly: rounds ok and failed, LLM trials, calls, why it stopped, and the
        first thing to change when calls failed."""
        ok = sum(r.status == "ok" for r in self.rounds)
        plan = "plan failed" if self.plan.error else f"plan: {len(self.plan.candidates)} candidate(s)"
        classes = ", ".join(f"{n} {k}" for k, n in sorted(self.failures.items()))
        change = self.first_change
        return (f"{plan}; {ok} round(s) ok, {len(self.rounds) - ok} failed; {self.llm_trials} LLM trial(s) "
                f"simulated; {self.llm_calls} LLM call(s) answered and parsed"
                + (f" ({self.truncated_calls} cut at max_tokens: raise --llm-max-tokens)"
                   if self.truncated_calls and not self.failures.get("unparsed") else "")
                + f", {self.failed_calls} failed" + (f" ({classes})" if classes else "")
                + f"; stopped: {self.stop_reason}" + (f"; first change: {change}" if change else ""))

    @property
    def hypotheses(self) -> list[str]:
        """The planner's hypothesis, then each round's next one."""
        found = [self.plan.hypothesis] + [r.next_hypothesis for r in self.rounds]
        return [h for h in found if h]
