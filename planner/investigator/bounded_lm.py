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

CHARS_PER_TOKEN = 4  # the estimate for a model LiteLLM has no tokenizer for: about 4 characters per token
UNKNOWN_TOKENIZER_MARGIN = 1.5  # and its margin: SmolLM2-135M's own tokenizer counted a ReAct prompt 37 % above
# chars/4 (4,641 tokens, issue 28's run); 1.5 covers that


def prompt_tokens(model: str, messages: list[dict[str, Any]] | None) -> tuple[int, str]:
    """A prompt's tokens and how they were counted: LiteLLM's tokenizer for a model it knows
    (`litellm.token_counter`), else characters / CHARS_PER_TOKEN times UNKNOWN_TOKENIZER_MARGIN."""
    messages = messages or []
    if model_info(model) is not None:
        import litellm

        return int(litellm.token_counter(model=model, messages=messages)), f"{model}'s tokenizer"
    chars = sum(len(m.get("content") or "") for m in messages if isinstance(m.get("content"), str))
    return (int(chars / CHARS_PER_TOKEN * UNKNOWN_TOKENIZER_MARGIN),
            f"chars/{CHARS_PER_TOKEN} x {UNKNOWN_TOKENIZER_MARGIN} margin: LiteLLM has no tokenizer for {model}")


def model_info(model: str) -> dict[str, Any] | None:
    """LiteLLM's bundled model info (its local table: no fetch), or None for a model it does not know."""
    offline_litellm()
    try:
        import litellm

        return dict(litellm.get_model_info(model))
    except Exception:  # a model LiteLLM does not know
        return None


def context_of(model: str, configured: int | None) -> int | None:
    """The model's input window: configured, else LiteLLM's bundled model info, else unknown (None)."""
    if configured:
        return configured
    info = model_info(model) or {}
    return info.get("max_input_tokens") or info.get("max_tokens")


class PhaseStop(Exception):
    """The LLM phase must end now (its wall clock is spent, or the breaker opened); the message says why."""


@dataclass(frozen=True)
class FailedCall:
    model: str
    outcome: str  # a failure class (`classify`)


class BoundedLM(dspy.LM):
    """dspy.LM with the run's `LLMBounds` (module doc); `failures` is drained with the history.

    Retries are made here, not by LiteLLM, so that every failed attempt (a timeout a retry then answered
    included) is a ledger row, and no attempt outlives the phase's clock: each gets the lesser of the call
    timeout and the phase's time left. A timed-out request's connection is dropped by the HTTP client
    (httpx closes a response it gives up on) before any retry; a local server that does not notice keeps
    generating, which is why a loopback endpoint gets no retries by default (`LLMBounds.retries_for`)."""

    def __init__(self, model: str, bounds: LLMBounds, **kwargs: Any):
        super().__init__(model, cache=False, num_retries=0, timeout=bounds.call_timeout_s,
                         max_tokens=bounds.max_tokens, **kwargs)
        self.bounds = bounds
        self.retries = bounds.retries_for(kwargs.get("api_base"))
        self.structured = bounds.structured
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
                                                    f"{self.bounds.phase_timeout_from}) is spent")
        if self.consecutive >= self.bounds.breaker:
            self.stop_reason = self.stop_reason or (f"{self.consecutive} LLM calls in a row failed to reach the "
                                                    f"provider ({self.last_failure}); the phase is ended")
        if self.stop_reason:
            raise PhaseStop(self.stop_reason)
        return min(self.bounds.call_timeout_s, remaining)

    def _fits(self, messages: list[dict[str, Any]] | None) -> None:
        """PhaseStop when the prompt and the completion cap cannot fit the model's window: every later
        step's prompt is longer, so the phase ends with what to change."""
        if not self.window:
            return
        tokens, how = prompt_tokens(self.model, messages)
        if tokens + self.bounds.max_tokens > self.window:
            self.stop_reason = (f"a prompt of ~{tokens:,} tokens ({how}) plus max_tokens {self.bounds.max_tokens:,} "
                                f"exceeds {self.model}'s context of {self.window:,} tokens; lower --llm-max-tokens "
                                "or use a model with a larger window (--llm-context-window)")
            raise PhaseStop(self.stop_reason)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._fits(kwargs.get("messages"))
        for attempt in range(self.retries + 1):
            kwargs["timeout"] = self._check()
            try:
                out = super().__call__(*args, **kwargs)
            except Exception as exc:
                outcome = classify(exc)
                self.failures.append(FailedCall(self.model, outcome))
                self.consecutive = self.consecutive + 1 if outcome in TRANSPORT else 0
                self.last_failure = outcome
                if outcome not in TRANSPORT or attempt == self.retries:
                    raise
                continue
            self.consecutive = 0
            return out
        raise AssertionError("unreachable: the last attempt returns or raises")


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
