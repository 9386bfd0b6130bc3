"""Usage of every call the client's LM made, drained from its DSPy history and handed to a sink.

The server has no tool that records a client's LLM usage, so the caller supplies the sink: `paratune
tune` writes each record with `Ledger.record_llm_call` into the ledger file the server also uses.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from ..llm.failures import UNPARSED


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
    """The usage row of one answered call: truncated when cut at max_tokens, unparsed when the adapter could not
    read it (`structured._mark_unparsed`), else ok."""
    tokens = entry.get("usage") or {}
    outcome = "truncated" if truncated(entry) else "ok" if entry.get("parsed", True) else UNPARSED
    return LLMUsage(model=entry["model"], prompt_tokens=int(tokens.get("prompt_tokens") or 0),
                    completion_tokens=int(tokens.get("completion_tokens") or 0), cost_usd=entry.get("cost"),
                    outcome=outcome)


@dataclass(frozen=True)
class Drained:
    """What one drain found: answers that parsed, failed calls by class, answers cut at max_tokens."""

    parsed: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    truncated: int = 0

    def __add__(self, other: Drained) -> Drained:
        return Drained(parsed=self.parsed + other.parsed, failures=self.failures + other.failures,
                       truncated=self.truncated + other.truncated)


def drain_usage(lm: Any, sink: UsageSink) -> Drained:
    """Hand each call in `lm.history` (and each failed call a `BoundedLM` kept) to `sink` and empty both. An
    answer that did not parse is a failed call of class `unparsed` (its row says truncated when it was cut)."""
    entries = list(lm.history)
    lm.history.clear()
    failed = list(getattr(lm, "failures", []))
    if failed:
        lm.failures.clear()
    for entry in entries:
        sink(_usage(entry))
    for f in failed:
        sink(LLMUsage(model=f.model, prompt_tokens=0, completion_tokens=0, cost_usd=None, outcome=f.outcome))
    unparsed = sum(not e.get("parsed", True) for e in entries)
    return Drained(parsed=len(entries) - unparsed, truncated=sum(truncated(e) for e in entries),
                   failures=Counter([f.outcome for f in failed] + [UNPARSED] * unparsed))
