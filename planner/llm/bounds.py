"""The limits of the LLM phase, as the cluster's agent.llm block and the CLI set them."""

from __future__ import annotations

from ipaddress import ip_address
from typing import Literal
from urllib.parse import urlparse

from pydantic import BaseModel, Field

REMOTE_RETRIES = 1  # a hosted provider's transient failure is worth one more try
LOCAL_RETRIES = 0  # a local server that timed out is still busy with the call: a retry only queues behind it


class LLMBounds(BaseModel):
    """Limits of the LLM phase: each call, its retries and tokens, and the whole phase's wall clock."""

    call_timeout_s: float
    max_tokens: int
    retries: int | None = Field(default=None, description="retries of a failed call; None: 0 for a loopback "
                                                          "endpoint, else 1 (`retries_for`)")
    phase_timeout_s: float
    breaker: int = Field(default=3, description="consecutive transport failures that end the phase")
    context_window: int | None = Field(default=None, description="the model's input tokens (--llm-context-window "
                                                                  "or agent.llm.context_window, else LiteLLM's "
                                                                  "model info)")
    structured: Literal["schema", "json", "markers"] = Field(
        default="schema", description="how answers are typed (agent.llm.structured; investigator/structured.py)")
    phase_timeout_from: str = "agent.llm.phase_timeout_s"  # where phase_timeout_s came from, for the messages
    call_timeout_from: str = "agent.llm.timeout_s"

    def retries_for(self, api_base: str | None) -> int:
        """The retries a call gets: as set, else LOCAL_RETRIES for a loopback endpoint, REMOTE_RETRIES otherwise."""
        if self.retries is not None:
            return self.retries
        return LOCAL_RETRIES if is_loopback(api_base) else REMOTE_RETRIES


def is_loopback(api_base: str | None) -> bool:
    """Whether `api_base` is this machine (localhost or a loopback address)."""
    host = urlparse(api_base or "").hostname or ""
    if host == "localhost":
        return True
    try:
        return ip_address(host).is_loopback
    except ValueError:
        return False
