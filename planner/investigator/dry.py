"""A scripted LM for `paratune tune --dry-run`: the whole LLM phase offline and free, on the real tools.

It answers each DSPy call by what the call asks for (the planner's candidates, a ReAct step, RLM code,
a round's summary), so any workload and any --calls-per-round work. One candidate is illegal on
purpose, so a dry run also shows a rejection with its reasons.
"""

from __future__ import annotations

import re
from typing import Any

from dspy.clients.engines.dummy_engine import AsyncDummyEngine, DummyEngine
from dspy.lm15 import Message, Response, TextPart, Usage
from dspy.utils import DummyLM

PLAN = [
    {"mbs": 1, "recompute_granularity": "none", "use_turbo_deepep": True},
    {"mbs": 1, "recompute_granularity": "selective", "use_turbo_deepep": True},
    {"mbs": 1, "recompute_granularity": "selective"},
    {"recompute_granularity": "selective", "use_turbo_deepep": True},
    {"mbs": 1, "recompute_granularity": "none"},
    {"tp": 3},
]
PROBES = [
    {"mbs": 1, "recompute_granularity": "none", "fp8": "hybrid"},
    {"mbs": 1, "recompute_granularity": "none", "use_turbo_deepep": True, "fp8": "hybrid"},
    {"recompute_granularity": "selective", "use_turbo_deepep": True, "fp8": "hybrid"},
]


def _round(text: str) -> int:
    found = re.search(r"round (\d+) of", text)
    return int(found.group(1)) if found else 1


def _react_step(step: int, number: int) -> dict[str, Any]:
    probe = PROBES[(number - 1) % len(PROBES)]
    steps = [("read_scratchpad", {}), ("evaluate_memory_only", {"config": probe}),
             ("evaluate_simulate", {"config": probe}),
             ("note_to_scratchpad", {"text": f"dry run, round {number}: probed {probe}", "author": "dry-run"}),
             ("finish", {})]
    name, args = steps[min(step, len(steps) - 1)]
    return {"next_thought": f"dry run: call {name}", "next_tool_name": name, "next_tool_args": args}


def _rlm_code(number: int) -> str:
    probe = PROBES[(number - 1) % len(PROBES)]
    return (f"r = evaluate_simulate(config={probe!r})\n"
            "print(r['result']['tokens_per_s_per_gpu'])\n"
            f"SUBMIT(findings={'dry run: probed ' + str(probe)!r}, next_hypothesis='dry run: probe the next layout')")


class DryRunLM(DummyLM):
    """Answers by the output fields the call asks for; tokens are counted as zero."""

    def __init__(self, model: str) -> None:
        super().__init__({})
        self.model = model
        self._engine_spec = _ScriptEngine(self)
        self._async_engine_spec = AsyncDummyEngine(self._engine_spec)

    def answer(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        asked = messages[-1]["content"]
        if "[[ ## candidates ## ]]" in asked:
            return {"reasoning": "dry run: fixed candidates", "candidates": PLAN,
                    "hypothesis": "dry run: a smaller micro-batch with a cheaper MoE dispatch frees memory to "
                                  "recompute less"}
        if "[[ ## next_tool_args ## ]]" in asked:
            return _react_step(asked.count("[[ ## tool_name_"), _round(asked))
        if "[[ ## code ## ]]" in asked:
            return {"reasoning": "dry run: one probe", "code": _rlm_code(_round(asked))}
        return {"reasoning": "dry run: summarise", "findings": "dry run: the scripted probes are in the history",
                "next_hypothesis": "dry run: probe the next layout"}


class _ScriptEngine(DummyEngine):
    def _complete_messages(self, messages: list[dict[str, Any]]) -> Response:
        text = self.owner._format_answer_fields(self.owner.answer(messages))
        return Response(id=None, model=self.owner.model, message=Message.assistant([TextPart(text)]),
                        finish_reason="stop", usage=Usage(input_tokens=0, output_tokens=0, total_tokens=0))
