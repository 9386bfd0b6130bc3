"""What the LLM phase may still spend, and the gate every one of its tool calls passes through."""

from __future__ import annotations

from typing import Any

from mcp.types import CallToolResult

from .mcp_client import ToolCallError, ToolClient

TAGGED = ("evaluate_memory_only", "evaluate_simulate", "evaluate_with_benchmark")  # recorded with an origin
BUDGETED = ("evaluate_simulate", "evaluate_with_benchmark")  # refused once the phase must stop


class Progress:
    """The incumbent and the simulate budget as the phase sees them, and whether it must stop."""

    def __init__(self, best: float | None, budget_left: int | None, patience: int):
        self.best = best
        self.budget_left = budget_left
        self.patience = patience
        self.since_best = 0
        self.simulated = 0

    @classmethod
    def from_server(cls, server: ToolClient, patience: int) -> Progress:
        best = server.call("get_best")
        progress = cls(best["result"]["tokens_per_s_per_gpu"] if best["found"] else None, None, patience)
        progress.refresh_budget(server)
        return progress

    def refresh_budget(self, server: ToolClient) -> None:
        self.budget_left = server.call("get_budget_status")["fidelities"]["simulate"]["left"]

    def observe(self, evaluation: dict[str, Any]) -> None:
        """Account for one evaluate_simulate answer: a new legal layout counts as simulated (and against
        patience); an illegal one spent no budget and counts for neither."""
        self.budget_left = evaluation["budget"]["left"]
        result = evaluation["result"]
        if not evaluation["cached"] and result["legal"]:
            self.simulated += 1
            self.since_best += 1
        tps = result.get("tokens_per_s_per_gpu")
        if result["legal"] and result.get("fits") and tps is not None and (self.best is None or tps > self.best):
            self.best, self.since_best = tps, 0

    @property
    def stop_reason(self) -> str | None:
        if self.budget_left == 0:
            return "the simulate budget is spent"
        if self.since_best >= self.patience:
            return f"no better layout in the last {self.patience} simulate calls"
        return None


class ToolGate(ToolClient):
    """The server as one step of the phase sees it: evaluations tagged with `origin`, at most `max_calls`
    tool calls, budgeted evaluations refused once `progress` says stop."""

    def __init__(self, server: ToolClient, progress: Progress, *, origin: str, max_calls: int | None = None):
        self.server = server
        self.progress = progress
        self.origin = origin
        self.max_calls = max_calls
        self.calls = 0
        self.simulated = 0

    def call_raw(self, name: str, arguments: dict[str, Any]) -> CallToolResult:
        """Pass one call on (counted), or refuse it (not counted) once the round's calls or the phase's
        budget are spent; evaluations carry the step's origin, notes its author."""
        if self.max_calls is not None and self.calls >= self.max_calls:
            raise ToolCallError(f"this round's {self.max_calls} tool calls are used up: finish now")
        if name in BUDGETED and self.progress.stop_reason:
            raise ToolCallError(f"no more evaluations: {self.progress.stop_reason}; finish now")
        self.calls += 1
        if name in TAGGED:
            arguments = {**arguments, "origin": self.origin}
        elif name == "note_to_scratchpad" and arguments.get("author", "agent") == "agent":
            arguments = {**arguments, "author": self.origin}  # the round, not a generic agent
        result = self.server.call_raw(name, arguments)
        if name == "evaluate_simulate":
            if result.is_error:
                self.progress.refresh_budget(self.server)
            else:
                before = self.progress.simulated
                self.progress.observe(result.structured_content or {})
                self.simulated += self.progress.simulated - before
        return result
