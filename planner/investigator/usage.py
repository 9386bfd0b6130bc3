"""Usage of every call the client's LM made, drained from its DSPy history and handed to a sink.

The server has no tool that records a client's LLM usage, so the caller supplies the sink: `paratune
tune` writes each record with `Ledger.record_llm_call` into the ledger file the server also uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel


class LLMUsage(BaseModel):
    """Model, tokens and cost of one LLM call (never a key)."""

    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None


UsageSink = Callable[[LLMUsage], None]


def _usage(entry: dict[str, Any]) -> LLMUsage:
    tokens = entry.get("usage") or {}
    return LLMUsage(model=entry["model"], prompt_tokens=int(tokens.get("prompt_tokens") or 0),
                    completion_tokens=int(tokens.get("completion_tokens") or 0), cost_usd=entry.get("cost"))


def drain_usage(lm: Any, sink: UsageSink) -> int:
    """Hand each call in `lm.history` to `sink` and empty the history; returns how many there were."""
    entries = list(lm.history)
    lm.history.clear()
    for entry in entries:
        sink(_usage(entry))
    return len(entries)
