"""The tool schemas `tools/list` publishes (server/schemas.py): compaction keeps what a schema accepts, nested
models are named, the layout's knobs are stated once, and real results validate against both the published
schemas and the whole ones the `paratune://schemas` resource serves.

Expected schemas are derived by hand from JSON Schema 2020-12 (the dialect MCP tool schemas default to, and the
one the MCP client's `jsonschema` validator picks for a schema without `$schema`); acceptance is checked with
that validator, the one the MCP client runs on every tool result.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from jsonschema import Draft202012Validator
from pydantic import BaseModel, Field, PositiveInt

from paratune.server.schemas import SHARED_URI, compact, output_schema

from .test_server_common import in_process, portal_client


class Inner(BaseModel):
    """A nested model."""

    x: int


class Sample(BaseModel):
    tp: PositiveInt | None = None
    fp8: Literal["hybrid", "e4m3"] | Literal["none"] | None = None
    flag: bool | None = None
    modules: tuple[Literal["mlp", "moe"], ...] | None = None
    rate: float = Field(gt=0)
    inner: Inner
    inners: list[Inner] = []
    by_name: dict[str, Inner] = {}
    maybe: Inner | None = Field(default=None, description="an optional inner")


GOOD = {"rate": 0.5, "inner": {"x": 1}}
# Each case: a Sample as JSON, accepted or not (by pydantic's own reading, which the whole schema states).
CASES = [GOOD, GOOD | {"tp": 1, "fp8": "none", "flag": True, "modules": ["mlp"], "maybe": None},
         GOOD | {"tp": None, "fp8": None, "flag": None, "modules": None}, GOOD | {"inners": [{"x": 2}]},
         GOOD | {"tp": 0}, GOOD | {"tp": 1.5}, GOOD | {"fp8": "e5m2"}, GOOD | {"flag": "yes"},
         GOOD | {"modules": ["attn"]}, GOOD | {"rate": 0}, {"rate": 1.0}, GOOD | {"inner": {"x": "1"}},
         GOOD | {"inners": [{"y": 2}]}, GOOD | {"by_name": {"a": {}}}, GOOD | {"maybe": {"x": None}}]


def accepts(schema: dict[str, Any], value: Any) -> bool:
    return not list(Draft202012Validator(schema).iter_errors(value))


def test_compaction_writes_each_field_as_derived_by_hand():
    props = compact(Sample.model_json_schema(), output=True)["properties"]
    assert props["tp"] == {"type": ["integer", "null"], "minimum": 1}  # an integer > 0 is one >= 1
    assert props["fp8"] == {"enum": ["hybrid", "e4m3", "none", None]}  # two enums and null: one enum
    assert props["flag"] == {"type": ["boolean", "null"]}
    assert props["modules"] == {"type": ["array", "null"], "items": {"enum": ["mlp", "moe"], "type": "string"}}
    assert props["rate"] == {"type": "number", "exclusiveMinimum": 0}  # a number keeps its exclusive bound
    assert props["inners"] == {"type": "array", "items": {"$ref": "#/$defs/Inner"}}  # no default in an output
    assert "title" not in json.dumps(props)


def test_compaction_accepts_exactly_what_the_whole_schema_accepts():
    whole = Sample.model_json_schema()
    compacted = compact(whole, output=True)
    verdicts = [accepts(whole, case) for case in CASES]
    assert verdicts.count(True) == 4 and verdicts.count(False) == len(CASES) - 4  # both outcomes are exercised
    assert [accepts(compacted, case) for case in CASES] == verdicts


def test_an_input_schema_asks_to_omit_what_null_would_mean_absent():
    schema = compact(Sample.model_json_schema())
    assert schema["properties"]["tp"] == {"type": "integer", "minimum": 1}
    assert schema["properties"]["fp8"] == {"enum": ["hybrid", "e4m3", "none"]}
    assert schema["properties"]["inners"]["default"] == []  # a real default stays
    assert not accepts(schema, GOOD | {"tp": None}) and Sample(**GOOD | {"tp": None}).tp is None  # omit it instead
    without_nulls = [case for case in CASES if None not in case.values()]
    assert len(without_nulls) == len(CASES) - 2
    assert [accepts(schema, case) for case in without_nulls] == \
        [accepts(Sample.model_json_schema(), case) for case in without_nulls]


def test_an_output_schema_names_its_nested_models():
    props = output_schema(Sample.model_json_schema())["properties"]
    assert props["inner"] == {"type": "object", "description": "Inner"}
    assert props["maybe"] == {"type": ["object", "null"], "description": "Inner: an optional inner"}
    assert props["inners"] == {"type": "array", "items": {"type": "object", "description": "Inner"}}
    assert props["by_name"] == {"type": "object", "additionalProperties": {"type": "object", "description": "Inner"}}


def named_models(schema: dict[str, Any]) -> set[str]:
    """The model names an output schema's objects carry (`"EvalResult"` or `"EvalResult: ..."`)."""
    found = set()
    for s in schema["properties"].values():
        for t in (s, s.get("items"), s.get("additionalProperties")):
            if isinstance(t, dict) and "object" in t.get("type", ()) and t.get("description"):
                found.add(t["description"].split(":")[0])
    return found


def test_results_validate_against_the_published_and_the_whole_schemas(tmp_path):
    with in_process(tmp_path) as (server, _), portal_client(server) as (portal, client):
        listed = {t.name: t for t in portal.call(client.list_tools).tools}
        shared = json.loads(portal.call(lambda: client.read_resource(SHARED_URI)).contents[0].text)
        calls = {"evaluate_simulate": {"config": {"mbs": 2}}, "get_best": {}, "get_architecture": {},
                 "get_cluster": {}, "get_legal_axes": {}, "explain": {"to_config": {"mbs": 2}}}
        results = {name: portal.call(lambda n=name, a=args: client.call_tool(n, a)) for name, args in calls.items()}
    for name, result in results.items():
        assert not result.is_error, result.content
        published = listed[name].output_schema
        whole = {"$defs": shared["$defs"], **shared["tools"][name]}
        assert accepts(published, result.structured_content) and accepts(whole, result.structured_content), name
        assert named_models(published) <= set(shared["$defs"]), name
    evaluation = results["evaluate_simulate"].structured_content
    published = listed["evaluate_simulate"].output_schema
    assert not accepts(published, {k: v for k, v in evaluation.items() if k != "trial_id"})
    assert not accepts(published, evaluation | {"result": 3}) and not accepts(published, evaluation | {"cached": 1})
    whole = {"$defs": shared["$defs"], **shared["tools"]["evaluate_simulate"]}
    assert not accepts(whole, evaluation | {"result": evaluation["result"] | {"legal": "yes"}})  # the nested fields
