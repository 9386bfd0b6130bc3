"""The class of a failed LLM call, as `llm_calls.outcome` records it and the circuit breaker counts it
(no DSPy import: the MCP server's `query_llm` uses it too)."""

from __future__ import annotations

import os

TRANSPORT = ("timeout", "connection", "rate_limit", "server_error")  # failures the breaker counts
UNPARSED = "unparsed"  # an answer that came back but could not be read as the call's output fields


def classify(exc: BaseException) -> str:
    """A failed call's class from DSPy's LM errors (`dspy/utils/exceptions.py`: LMTimeoutError,
    LMRateLimitError, LMTransportError, LMServerError) or LiteLLM's: timeout, rate_limit, connection,
    server_error, else error:<Exception>."""
    name = type(exc).__name__
    status = getattr(exc, "status_code", None)
    if "Timeout" in name:
        return "timeout"
    if "RateLimit" in name or status == 429:
        return "rate_limit"
    if "Connection" in name or "Transport" in name or "Connection error" in str(exc):  # LiteLLM's wording for
        return "connection"  # a refused connection it raises as InternalServerError
    if name in ("LMServerError", "InternalServerError", "ServiceUnavailableError") or (
            isinstance(status, int) and status >= 500):
        return "server_error"
    return f"error:{name}"


def one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception as one short line for the scratchpad, the report and the agent, with the value of any
    key or token variable in this environment blanked out (provider errors may quote what they were sent)."""
    text = " ".join(str(exc).split())
    for name, value in os.environ.items():
        if name.endswith(("_KEY", "_TOKEN")) and len(value) >= 8:
            text = text.replace(value, "***")
    return f"{type(exc).__name__}: {text[:limit]}"
