"""One LiteLLM completion for a run, its usage (never a key) recorded in the ledger.

Each call is bounded: LiteLLM gets the run's `llm_timeout_s` and no retries, and the tool waits for the
worker thread under the same limit (queueing for a thread of the LLM pool included) and abandons it
after (`server/offload.py`).
"""

from __future__ import annotations

import functools
import os

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

from paratune.ledger import Ledger
from paratune.ledger.keyguard import mask_secrets, refuse_keys
from paratune.oracle.errors import InputError
from paratune.planner.llm.failures import classify
from paratune.planner.llm.selection import (
    KEYLESS_PLACEHOLDER,
    LLMNotConfigured,
    offline_litellm,
    resolve_llm,
)

from .offload import off_loop


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


async def ask_bounded(ledger: Ledger, run_id: int, cluster_model: str | None, prompt: str, *, system: str | None,
                      max_tokens: int, timeout_s: float) -> LLMAnswer:
    """`ask` in a worker thread of the LLM pool, given up after `timeout_s` with a clear ToolError."""
    call = functools.partial(ask, ledger, run_id, cluster_model, prompt, system=system, max_tokens=max_tokens,
                             timeout_s=timeout_s)
    return await off_loop(call, what="the LLM call", deadline_s=timeout_s, pool="llm", late=(
        f"the LLM did not answer within {timeout_s:g} s (agent.llm.timeout_s); nothing was recorded"))


def ask(ledger: Ledger, run_id: int, cluster_model: str | None, prompt: str, *, system: str | None,
        max_tokens: int, timeout_s: float) -> LLMAnswer:
    """Call the run's LLM (the investigator's precedence) through LiteLLM and record the call; a clear
    ToolError when no model with credentials is configured or the provider fails."""
    try:
        config = resolve_llm(cluster_model)
    except LLMNotConfigured as exc:
        raise ToolError(f"no LLM is configured: {exc}") from None
    offline_litellm()
    import litellm

    model = config.model
    endpoint = {"api_base": config.api_base, "api_key": os.environ.get("OPENAI_API_KEY") or KEYLESS_PLACEHOLDER} \
        if config.api_base else {}
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    try:
        response = litellm.completion(model=model, messages=messages, max_tokens=max_tokens, timeout=timeout_s,
                                      num_retries=0, **endpoint)
    except Exception as exc:  # any provider failure is the caller's to read, not a server crash
        ledger.record_llm_call(run_id, model=model, prompt_tokens=0, completion_tokens=0, outcome=classify(exc))
        raise ToolError(f"LLM call to {model} failed: {type(exc).__name__}: {_safe(exc)}") from None
    try:
        cost = float(litellm.completion_cost(completion_response=response))
    except Exception:  # LiteLLM has no price for every model
        cost = None
    usage = response.usage
    ledger.record_llm_call(run_id, model=model, prompt_tokens=usage.prompt_tokens,
                           completion_tokens=usage.completion_tokens, cost_usd=cost)
    return LLMAnswer(model=model, text=mask_secrets(response.choices[0].message.content or ""),
                     prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens, cost_usd=cost)
