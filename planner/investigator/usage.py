"""Usage of every call the client's LM made, drained from its DSPy history and handed to a sink.

The server has no tool that records a client's LLM usage, so the caller supplies the sink: `paratune
tune` writes each record with `Ledger.record_llm_call` into the ledger file the server also uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel


class LLMUsage(BaseModel):
    """Model, tokens and cost of one LLM call (never a key); `outcome` ok or its failure class."""

    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    outcome: str = "ok"


UsageSink = Callable[[LLMUsage], object]  # what it returns is not read


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def truncated(entry: dict[str, Any]) -> bool:
    """Whether the provider cut the answer at max_tokens (`finish_reason: length`)."""
    return any(_field(c, "finish_reason") == "length" for c in _field(entry.get("response"), "choices") or [])


def _usage(entry: dict[str, Any]) -> LLMUsage:
    tokens = entry.get("usage") or {}
    return LLMUsage(model=entry["model"], prompt_tokens=int(tokens.get("prompt_tokens") or 0),
                    completion_tokens=int(tokens.get("completion_tokens") or 0), cost_usd=entry.get("cost"),
                    outcome="truncated" if truncated(entry) else "ok")


def drain_usage(lm: Any, sink: UsageSink) -> tuple[int, int, int]:
    """Hand each call in `lm.history` (and each failed call a `BoundedLM` kept) to `sink` and empty both;
    returns (calls answered, calls failed, answers cut at max_tokens: recorded as `truncated`)."""
    entries = list(lm.history)
    lm.history.clear()
    failed = list(getattr(lm, "failures", []))
    if failed:
        lm.failures.clear()
    usages = [_usage(entry) for entry in entries]
    for usage in usages:
        sink(usage)
    for f in failed:
        sink(LLMUsage(model=f.model, prompt_tokens=0, completion_tokens=0, cost_usd=None, outcome=f.outcome))
    return len(entries), len(failed), sum(u.outcome == "truncated" for u in usages)
