"""Typed output on every LLM call: each answer's JSON schema, sent as the request's `response_format`, and
the adapters that send it and mark an answer that does not parse.

A small model rarely writes DSPy's `[[ ## field ## ]]` markers, and DSPy's own JSON fallback sends a bare
`json_object` grammar whenever LiteLLM does not know the model (`dspy/adapters/json_adapter.py`,
`JSONAdapter._prepare_response_format`: no schema unless `lm.supports_response_schema`). So the schema is
built here from the run (the planner's candidates: TrialConfig objects whose knobs are enums of the legal
axes; a ReAct step: the tool name a constant per tool, its arguments that tool's own input schema) and sent
whether or not LiteLLM knows the model. `agent.llm.structured` says how:

  schema   `{"type": "json_schema", "json_schema": {...}}`: OpenAI's structured outputs, vLLM, llama.cpp's
           llama-server, SGLang (the default)
  json     `{"type": "json_object", "schema": {...}}`: JSON mode with the schema beside it, the form
           llama-cpp-python's server reads (`llama_cpp/llama_chat_format.py`, `_grammar_for_response_format`:
           a grammar only for type json_object, from its `schema`)
  markers  no response_format: DSPy's ChatAdapter and its field markers (an endpoint that refuses both)

The schema constrains what the model writes; parsing stays lenient (one malformed candidate is rejected on
its own, `planner_module.evaluate_candidate`).
"""

from __future__ import annotations

from typing import Any, Literal

import dspy
from dspy.utils.exceptions import AdapterParseError

Structured = Literal["schema", "json", "markers"]
MIN_CANDIDATES, MAX_CANDIDATES = 3, 8
TEXT_CHARS = 160  # longest free-text field a schema lets a model write (a small model otherwise rambles)
CONFIG_ARGS = ("config", "from_config", "to_config")  # tool arguments that take a TrialConfig


LAYOUT_KNOBS = ("tp", "pp", "mbs")  # every candidate states these: a whole layout, not one knob of one


def candidate_schema(legal_axes: dict[str, Any]) -> dict[str, Any]:
    """One planner candidate: an object of TrialConfig knobs, each an enum of its legal values (a knob with
    one legal value is left out: nothing to choose), LAYOUT_KNOBS required, no other keys."""
    props = {k: {"enum": v} for k, v in legal_axes.items() if isinstance(v, list) and len(v) > 1}
    return {"type": "object", "properties": props, "required": [k for k in LAYOUT_KNOBS if k in props],
            "additionalProperties": False}


def example_candidate(legal_axes: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """The shape of one candidate for the prompt: the required knobs at the baseline's values, the first of
    them moved to another legal value."""
    required = candidate_schema(legal_axes)["required"]
    example = {k: baseline.get(k, legal_axes[k][0]) for k in required}
    if required:
        first = required[0]
        example[first] = next(v for v in legal_axes[first] if v != example[first])
    return example


def plan_schema(legal_axes: dict[str, Any]) -> dict[str, Any]:
    """The planner's answer: a hypothesis, 3-8 candidates, then optional reasoning."""
    return _object({"hypothesis": _text(), "candidates": {
        "type": "array", "items": candidate_schema(legal_axes), "minItems": MIN_CANDIDATES,
        "maxItems": MAX_CANDIDATES}, "reasoning": _text()}, required=("hypothesis", "candidates"))


def step_schema(tools: dict[str, dict[str, Any]], legal_axes: dict[str, Any]) -> dict[str, Any]:
    """A ReAct step: next_thought, then one of the tools by name with that tool's arguments (`tools`: name to
    MCP input schema; a config argument is a candidate object)."""
    options = []
    for name, schema in tools.items():
        defs = schema.get("$defs", {})
        props = {k: candidate_schema(legal_axes) if k in CONFIG_ARGS else _inline(v, defs)
                 for k, v in schema.get("properties", {}).items() if k not in ("origin", "author")}
        args = _object(props, required=tuple(r for r in schema.get("required", []) if r in props))
        options.append(_object({"next_thought": _text(), "next_tool_name": {"const": name},
                                "next_tool_args": args}, required=("next_thought", "next_tool_name",
                                                                   "next_tool_args")))
    return {"anyOf": options}


def summary_schema(signature: type[dspy.Signature]) -> dict[str, Any]:
    """A round's closing answer: each output field a short text, reasoning optional."""
    fields = [k for k in signature.output_fields if k != "reasoning"]
    return _object({**{k: _text() for k in fields}, "reasoning": _text()}, required=tuple(fields))


def _text() -> dict[str, Any]:
    return {"type": "string", "maxLength": TEXT_CHARS}


def _object(props: dict[str, Any], required: tuple[str, ...]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(required), "additionalProperties": False}


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """`node` with each local `$ref` replaced by its definition (a grammar compiler need not resolve them) and
    each string's maxLength at most TEXT_CHARS: llama.cpp's schema-to-grammar converter writes maxLength N as N
    nested optional characters, and a tool's own bound (a scratchpad note's 8,000, query_llm's prompt's 50,000)
    makes a grammar llama-cpp-python 0.3.36's server fails to parse ("failed to parse grammar") and then dies
    on (the connection error of the ReAct round, benchmarks/real_llm.py). The server still checks its bounds."""
    if isinstance(node, list):
        return [_inline(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref", "")
    if ref.startswith("#/$defs/"):
        return _inline(defs.get(ref.rsplit("/", 1)[-1], {}), defs)
    out = {k: _inline(v, defs) for k, v in node.items() if k not in ("title", "$defs")}
    if isinstance(out.get("maxLength"), int):
        out["maxLength"] = min(out["maxLength"], TEXT_CHARS)
    return out


def response_format(mode: Structured, schema: dict[str, Any]) -> dict[str, Any] | None:
    """The request's response_format for `schema` in `mode` (module doc); None for markers."""
    if mode == "schema":
        return {"type": "json_schema", "json_schema": {"name": "answer", "strict": False, "schema": schema}}
    if mode == "json":
        return {"type": "json_object", "schema": schema}
    return None


class _MarksUnparsed:
    """An adapter mixin: a call whose answer does not parse has its history entries (those past the count
    before the call) marked `parsed: False`, for the ledger's `unparsed` class (`usage.drain_usage`)."""

    def __call__(self, lm: Any, lm_kwargs: dict[str, Any], signature: Any, demos: Any, inputs: Any) -> Any:
        before = len(getattr(lm, "history", []))
        try:
            return super().__call__(lm, lm_kwargs, signature, demos, inputs)  # type: ignore[misc]
        except AdapterParseError:
            for entry in list(getattr(lm, "history", []))[before:]:
                entry["parsed"] = False
            raise


class TypedJSONAdapter(_MarksUnparsed, dspy.JSONAdapter):
    """dspy.JSONAdapter that sends the schema registered for a signature's output fields (else DSPy's own
    schema of the signature) in `mode`."""

    def __init__(self, mode: Structured, schemas: dict[frozenset[str], dict[str, Any]]):
        super().__init__(use_native_function_calling=False)
        self.mode = mode
        self.schemas = schemas

    def _prepare_response_format(self, lm: Any, lm_kwargs: dict[str, Any], signature: Any) -> None:
        schema = self.schemas.get(frozenset(signature.output_fields))
        if schema is None:
            from dspy.adapters.json_adapter import _get_structured_outputs_response_format

            schema = _get_structured_outputs_response_format(signature, False).model_json_schema()
        lm_kwargs["response_format"] = response_format(self.mode, schema)


class MarkedChatAdapter(_MarksUnparsed, dspy.ChatAdapter):
    """dspy.ChatAdapter (field markers) without its JSON retry: one call, one ledger row."""

    def __init__(self) -> None:
        super().__init__(use_json_adapter_fallback=False)


def adapter_for(mode: Structured, schemas: dict[frozenset[str], dict[str, Any]]) -> dspy.Adapter:
    """The adapter of `mode`: field markers, or JSON with the schemas sent."""
    return MarkedChatAdapter() if mode == "markers" else TypedJSONAdapter(mode, schemas)
