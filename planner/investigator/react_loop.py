"""dspy.ReAct with steps that survive a real model's slips: a step the adapter cannot read, or a tool
name it does not know, becomes a one-line observation the model can correct (instead of ending the
round), tool errors come back as one line (the server's own messages), and a round whose closing
summary cannot be read keeps what its trajectory found."""

from __future__ import annotations

from typing import Any

import dspy

from ..llm.failures import classify, one_line

PARSE_RETRIES = 2  # unreadable steps in a row before the round stops stepping


class SteadyReAct(dspy.ReAct):
    """ReAct whose loop is `forward` below; the prompt and tools are dspy.ReAct's, except that a step's tool
    name is read as plain text (matched to a tool here) rather than refused by the adapter (the request's
    schema constrains it, `structured.step_schema`), and the closing summary is a dspy.Predict whose
    reasoning is optional and last (ChainOfThought's comes first and eats a small model's tokens)."""

    def __init__(self, signature: Any, tools: list[Any], max_iters: int = 20):
        super().__init__(signature, tools=tools, max_iters=max_iters)
        react = self.react.signature.with_updated_fields("next_tool_name", type_=str)
        self.react: Any = dspy.Predict(react)
        extract = self.extract.predict.signature.delete("reasoning").append(
            "reasoning", dspy.OutputField(default=None, desc="optional: why"), type_=str | None)
        self.extract: Any = dspy.Predict(extract)

    def _tool(self, name: Any) -> tuple[str, Any] | tuple[None, None]:
        """The tool a step names, matched case- and separator-insensitively."""
        key = str(name).strip().lower().replace("-", "_").replace(" ", "_")
        for real, tool in self.tools.items():
            if real.lower() == key:
                return real, tool
        return None, None

    def forward(self, **input_args: Any) -> dspy.Prediction:
        trajectory: dict[str, Any] = {}
        unreadable = 0
        for idx in range(input_args.pop("max_iters", self.max_iters)):
            try:
                pred = self._call_with_potential_trajectory_truncation(self.react, trajectory, **input_args)
            except Exception as exc:
                if classify(exc).startswith("error:") and unreadable < PARSE_RETRIES:  # the answer, not the provider
                    unreadable += 1
                    trajectory[f"thought_{idx}"] = "(unreadable step)"
                    trajectory[f"tool_name_{idx}"] = "none"
                    trajectory[f"tool_args_{idx}"] = {}
                    trajectory[f"observation_{idx}"] = (
                        f"your last step could not be read ({one_line(exc, 160)}); answer with next_thought, "
                        f"next_tool_name (one of {', '.join(self.tools)}) and next_tool_args")
                    continue
                raise
            unreadable = 0
            name, tool = self._tool(pred.next_tool_name)
            trajectory[f"thought_{idx}"] = pred.next_thought
            trajectory[f"tool_name_{idx}"] = name or pred.next_tool_name
            trajectory[f"tool_args_{idx}"] = pred.next_tool_args
            if tool is None:
                trajectory[f"observation_{idx}"] = (f"unknown tool {str(pred.next_tool_name)[:60]!r}; the tools are "
                                                    f"{', '.join(self.tools)}")
                continue
            args = pred.next_tool_args if isinstance(pred.next_tool_args, dict) else {}
            try:
                trajectory[f"observation_{idx}"] = tool(**args)
            except Exception as exc:
                trajectory[f"observation_{idx}"] = f"{name} failed: {one_line(exc)}"
            if name == "finish":
                break
        try:
            extract = self._call_with_potential_trajectory_truncation(self.extract, trajectory, **input_args)
        except Exception as exc:
            if not classify(exc).startswith("error:"):
                raise  # the provider is failing: the round fails (and the breaker counts it)
            seen = [str(v)[:200] for k, v in trajectory.items() if k.startswith("observation_")][-3:]
            fields = {k: "" for k in self.signature.output_fields}
            first = next(iter(fields))
            fields[first] = (f"(the closing summary could not be read: {one_line(exc, 120)}) last observations: "
                             + " | ".join(seen))
            return dspy.Prediction(trajectory=trajectory, **fields)
        return dspy.Prediction(trajectory=trajectory, **extract)
