"""A DSPy LM bounded the way a run needs: each call under its timeout (never past the phase's wall
clock), its token cap and retries, failed calls kept with their class for the ledger, and a circuit
breaker that ends the phase after repeated transport failures instead of retrying a dead endpoint
every round."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import dspy

from ..llm.bounds import LLMBounds
from ..llm.failures import TRANSPORT, classify
from ..llm.selection import DRY_RUN, KEYLESS_PLACEHOLDER, LLMConfig, offline_litellm

CHARS_PER_TOKEN = 4  # the prompt estimate (no tokenizer download): about 4 characters per token in English


def prompt_tokens(messages: list[dict[str, Any]] | None) -> int:
    """An estimate of a prompt's tokens: its characters / CHARS_PER_TOKEN."""
    return sum(len(m.get("content") or "") for m in messages or [] if isinstance(m.get("content"), str)) // (
        CHARS_PER_TOKEN)


def context_of(model: str, configured: int | None) -> int | None:
    """The model's input window: configured, else LiteLLM's bundled model info, else unknown (None)."""
    if configured:
        return configured
    try:
        import litellm

        info = litellm.get_model_info(model)
    except Exception:  # a model LiteLLM does not know: no check
        return None
    return info.get("max_input_tokens") or info.get("max_tokens")


class PhaseStop(Exception):
    """The LLM phase must end now (its wall clock is spent, or the breaker opened); the message says why."""


@dataclass(frozen=True)
class FailedCall:
    model: str
    outcome: str  # a failure class (`classify`)


class BoundedLM(dspy.LM):
    """dspy.LM with the run's `LLMBounds` (module doc); `failures` is drained with the history."""

    def __init__(self, model: str, bounds: LLMBounds, **kwargs: Any):
        super().__init__(model, cache=False, num_retries=bounds.retries, timeout=bounds.call_timeout_s,
                         max_tokens=bounds.max_tokens, **kwargs)
        self.bounds = bounds
        self.deadline = time.monotonic() + bounds.phase_timeout_s
        self.failures: list[FailedCall] = []  # drained into the ledger after each step
        self.consecutive = 0
        self.last_failure = ""
        self.stop_reason: str | None = None
        self.window = context_of(model, bounds.context_window)

    def _check(self) -> float:
        """Seconds this call may take; PhaseStop when the phase is over."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            self.stop_reason = self.stop_reason or (f"the LLM phase's wall clock ({self.bounds.phase_timeout_s:g} s, "
                                                    "agent.llm.phase_timeout_s) is spent")
        if self.consecutive >= self.bounds.breaker:
            self.stop_reason = self.stop_reason or (f"{self.consecutive} LLM calls in a row failed to reach the "
                                                    f"provider ({self.last_failure}); the phase is ended")
        if self.stop_reason:
            raise PhaseStop(self.stop_reason)
        return min(self.bounds.call_timeout_s, remaining)

    def _fits(self, messages: list[dict[str, Any]] | None) -> None:
        """PhaseStop when the prompt and the completion cap cannot fit the model's window: every later
        step's prompt is longer, so the phase ends with what to change."""
        need = prompt_tokens(messages) + self.bounds.max_tokens
        if self.window and need > self.window:
            self.stop_reason = (f"a prompt of ~{need - self.bounds.max_tokens:,} tokens plus max_tokens "
                                f"{self.bounds.max_tokens:,} exceeds {self.model}'s context of {self.window:,} tokens; "
                                "lower --llm-max-tokens or use a model with a larger window (agent.llm.context_window)")
            raise PhaseStop(self.stop_reason)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["timeout"] = self._check()
        self._fits(kwargs.get("messages"))
        try:
            out = super().__call__(*args, **kwargs)
        except Exception as exc:
            outcome = classify(exc)
            self.failures.append(FailedCall(self.model, outcome))
            self.consecutive = self.consecutive + 1 if outcome in TRANSPORT else 0
            self.last_failure = outcome
            raise
        self.consecutive = 0
        return out


def build_lm(config: LLMConfig, bounds: LLMBounds) -> dspy.BaseLM:
    """A DSPy LM for `config`: the scripted one for --dry-run, else LiteLLM with no response cache (every
    call is a real one), bounded by `bounds` (`BoundedLM`)."""
    if config.source == DRY_RUN:
        from .dry import DryRunLM

        return DryRunLM(config.model)

    offline_litellm()
    extra: dict[str, str] = {}
    if config.api_base:
        extra["api_base"] = config.api_base
        if not os.environ.get("OPENAI_API_KEY"):
            extra["api_key"] = KEYLESS_PLACEHOLDER
    return BoundedLM(config.model, bounds, **extra)
