"""The phase's gate and progress count what they should: a refused call is not counted, an illegal
layout spends no patience, a round's notes carry the round as author."""

from __future__ import annotations

import pytest
from mcp.types import CallToolResult, TextContent

from paratune.planner.investigator.mcp_client import ToolCallError, ToolClient
from paratune.planner.investigator.tool_gate import Progress, ToolGate


class Recorder(ToolClient):
    def __init__(self):
        self.sent: list[tuple[str, dict]] = []

    def call_raw(self, name, arguments):
        self.sent.append((name, arguments))
        return CallToolResult(content=[TextContent(type="text", text="{}")], structured_content={})


def _evaluation(legal: bool, tps: float | None = None, cached: bool = False) -> dict:
    return {"cached": cached, "budget": {"left": 10},
            "result": {"legal": legal, "fits": legal, "tokens_per_s_per_gpu": tps}}


def test_a_refused_call_is_not_counted_and_notes_carry_the_round():
    server = Recorder()
    gate = ToolGate(server, Progress(None, 10, patience=3), origin="llm:round2", max_calls=1)
    gate.call("note_to_scratchpad", text="tp=2 is slower")
    with pytest.raises(ToolCallError, match="tool calls are used up"):
        gate.call("get_history")
    assert gate.calls == 1 and server.sent == [("note_to_scratchpad", {"text": "tp=2 is slower",
                                                                         "author": "llm:round2"})]


def test_an_illegal_layout_spends_no_patience():
    progress = Progress(100.0, 10, patience=2)
    progress.observe(_evaluation(False))
    progress.observe(_evaluation(False))
    assert (progress.simulated, progress.since_best, progress.stop_reason) == (0, 0, None)
    progress.observe(_evaluation(True, 90.0))
    progress.observe(_evaluation(True, 95.0, cached=True))  # a repeat spends nothing either
    assert (progress.simulated, progress.since_best) == (1, 1)
    progress.observe(_evaluation(True, 80.0))
    assert progress.stop_reason == "no better layout in the last 2 simulate calls"
