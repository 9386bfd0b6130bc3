"""The limits of the LLM phase, as the cluster's agent.llm block and the CLI set them."""

from __future__ import annotations

from pydantic import BaseModel, Field


class LLMBounds(BaseModel):
    """Limits of the LLM phase: each call, its retries and tokens, and the whole phase's wall clock."""

    call_timeout_s: float
    max_tokens: int
    retries: int
    phase_timeout_s: float
    breaker: int = Field(default=3, description="consecutive transport failures that end the phase")
    context_window: int | None = Field(default=None, description="the model's input tokens (agent.llm."
                                                                  "context_window, else LiteLLM's model info)")
