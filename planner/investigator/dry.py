"""A scripted LM for `paratune tune --dry-run`: the whole LLM phase offline and free, on the real tools.

It answers each DSPy call by what the call asks for (the planner's candidates, a ReAct step, RLM code,
a round's summary), so any workload and any --calls-per-round work. Its layouts come from the run as the
prompt states it: the incumbent with one more knob moved to each of its other legal values (`neighbours`:
the cross-axis combinations the one-knob seed plan could not reach), so they are legal on their own axes on
any workload and most fit; the last candidate is illegal on purpose (a TP degree outside the legal axes),
so a dry run also shows a rejection with its reasons.
"""

from __future__ import annotations

import json
import re
from typing import Any

from dspy.clients.engines.dummy_engine import AsyncDummyEngine, DummyEngine
from dspy.lm15 import Message, Response, TextPart, Usage
from dspy.utils import DummyLM

PLANNED = 6  # candidates the scripted planner proposes before its illegal one


def field_text(prompt: str, name: str) -> str:
    """The value of input field `name` in a ChatAdapter prompt ('' when absent)."""
    found = re.search(rf"\[\[ ## {name} ## \]\]\n(.*?)(?=\n\[\[ ## |\Z)", prompt, re.DOTALL)
    return found.group(1).strip() if found else ""


def neighbours(legal_axes: dict[str, Any], incumbent: dict[str, Any], baseline: dict[str, Any]) -> list[dict[str, Any]]:
    """The incumbent's layout with one knob moved to another legal value, taking the axes in turn (each
    axis's first alternative, then its second, ...), so consecutive candidates differ in different knobs;
    each states only the knobs that differ from the workload's `baseline` (absent knobs keep its values)."""
    base = {k: v for k, v in incumbent.items() if k in legal_axes and v != baseline.get(k)
            and not (v in (None, False) and k not in baseline)}
    current = {**baseline, **incumbent}
    moves = {axis: [v for v in values if v != current.get(axis)] for axis, values in legal_axes.items()
             if isinstance(values, list) and len(values) > 1}
    depth = max(map(len, moves.values()), default=0)
    return [{**base, axis: values[i]} for i in range(depth) for axis, values in moves.items() if i < len(values)]


def _round(text: str) -> int:
    found = re.search(r"round (\d+) of", text)
    return int(found.group(1)) if found else 1


def _react_step(step: int, number: int, probe: dict[str, Any]) -> dict[str, Any]:
    steps = [("read_scratchpad", {}), ("evaluate_memory_only", {"config": probe}),
             ("evaluate_simulate", {"config": probe}),
             ("note_to_scratchpad", {"text": f"dry run, round {number}: probed {probe}", "author": "dry-run"}),
             ("finish", {})]
    name, args = steps[min(step, len(steps) - 1)]
    return {"next_thought": f"dry run: call {name}", "next_tool_name": name, "next_tool_args": args}


def _rlm_code(probe: dict[str, Any]) -> str:
    return (f"r = evaluate_simulate(config={probe!r})\n"
            "print(r['result']['tokens_per_s_per_gpu'])\n"
            f"SUBMIT(findings={'dry run: probed ' + str(probe)!r}, next_hypothesis='dry run: probe the next layout')")


def _incumbent(prompt: str) -> dict[str, Any]:
    """The incumbent's config as the prompt states it (`prompt_context.describe_progress`), else {}."""
    text = field_text(prompt, "incumbent")
    return json.loads(text.split("config ", 1)[1]) if "config " in text else {}


class DryRunLM(DummyLM):
    """Answers by the output fields the call asks for; tokens are counted as zero. The planner's prompt sets
    the layouts (`neighbours`); each round then probes the next one the planner did not propose."""

    def __init__(self, model: str) -> None:
        super().__init__({})
        self.model = model
        self._engine_spec = _ScriptEngine(self)
        self._async_engine_spec = AsyncDummyEngine(self._engine_spec)
        self.layouts: list[dict[str, Any]] = []

    def _probe(self, number: int) -> dict[str, Any]:
        probes = self.layouts[PLANNED:] or self.layouts or [{}]
        return probes[(number - 1) % len(probes)]

    def answer(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        asked = messages[-1]["content"]
        if "[[ ## candidates ## ]]" in asked:
            legal = json.loads(field_text(asked, "legal_axes"))
            baseline = json.loads(field_text(asked, "architecture") or "{}").get("baseline", {})
            self.layouts = neighbours(legal, _incumbent(asked), baseline)
            illegal = {"tp": max(legal["tp"]) + 1}
            return {"candidates": [*self.layouts[:PLANNED], illegal], "reasoning": "dry run: the incumbent with one "
                    "more knob moved", "hypothesis": "dry run: the best seed improves with a second knob moved"}
        if "[[ ## next_tool_args ## ]]" in asked:
            return _react_step(asked.count("[[ ## tool_name_"), _round(asked), self._probe(_round(asked)))
        if "[[ ## code ## ]]" in asked:
            return {"reasoning": "dry run: one probe", "code": _rlm_code(self._probe(_round(asked)))}
        return {"reasoning": "dry run: summarise", "findings": "dry run: the scripted probes are in the history",
                "next_hypothesis": "dry run: probe the next layout"}


class _ScriptEngine(DummyEngine):
    def _complete_messages(self, messages: list[dict[str, Any]]) -> Response:
        text = self.owner._format_answer_fields(self.owner.answer(messages))
        return Response(id=None, model=self.owner.model, message=Message.assistant([TextPart(text)]),
                        finish_reason="stop", usage=Usage(input_tokens=0, output_tokens=0, total_tokens=0))
