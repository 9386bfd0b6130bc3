"""One LiteLLM completion for a run, its usage (never a key) recorded in the ledger."""

from __future__ import annotations

import os

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

from ledger import Ledger
from ledger.keyguard import refuse_keys
from oracle.errors import InputError
from planner.investigator.llm_config import (
    KEYLESS_PLACEHOLDER,
    LLMNotConfigured,
    resolve_llm,
)


class LLMAnswer(BaseModel):
    """The answer text and what it cost."""

    model: str
    text: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None


def _safe(exc: Exception) -> str:
    """The provider's error text, shortened, withheld when it holds something key-like."""
    text = " ".join(str(exc).split())[:300]
    try:
        return refuse_keys("error", text)
    except InputError:
        return "(message withheld: it contained a key-like string)"


def ask(ledger: Ledger, run_id: int, cluster_model: str | None, prompt: str, *, system: str | None,
        max_tokens: int) -> LLMAnswer:
    """Call the run's LLM (the investigator's precedence) through LiteLLM and record the call; a clear
    ToolError when no model with credentials is configured or the provider fails."""
    try:
        config = resolve_llm(cluster_model)
    except LLMNotConfigured as exc:
        raise ToolError(f"no LLM is configured: {exc}") from None
    import litellm

    model = config.model
    endpoint = {"api_base": config.api_base, "api_key": os.environ.get("OPENAI_API_KEY") or KEYLESS_PLACEHOLDER} \
        if config.api_base else {}
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    try:
        response = litellm.completion(model=model, messages=messages, max_tokens=max_tokens, **endpoint)
    except Exception as exc:  # any provider failure is the caller's to read, not a server crash
        raise ToolError(f"LLM call to {model} failed: {type(exc).__name__}: {_safe(exc)}") from None
    try:
        cost = float(litellm.completion_cost(completion_response=response))
    except Exception:  # LiteLLM has no price for every model
        cost = None
    usage = response.usage
    ledger.record_llm_call(run_id, model=model, prompt_tokens=usage.prompt_tokens,
                           completion_tokens=usage.completion_tokens, cost_usd=cost)
    return LLMAnswer(model=model, text=response.choices[0].message.content or "",
                     prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens, cost_usd=cost)
