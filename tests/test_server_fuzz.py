"""Fuzz: over a thousand malformed tool calls, each answered with a one-line error result; the server
keeps serving and the ledger keeps every row."""

from __future__ import annotations

import json
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paratune.oracle.specs import TrialConfig

from .test_server_common import in_process, portal_client

CALLS = 1200

# What kind of value each tool parameter takes; the test fails if a tool grows a parameter not listed.
KINDS = {"config": "config", "origin": "origin", "k": "int", "budget": "int", "jobs": "int", "top_k": "int",
         "max_tokens": "int", "fidelity": "enum", "resume": "bool", "text": "str", "author": "str", "prompt": "str",
         "system": "str", "workload": "str", "cluster": "str", "out_dir": "str", "from_config": "config",
         "to_config": "config", "pick": "enum", "trial_id": "int", "tokens_per_s_per_gpu": "float",
         "peak_memory_gib": "float", "note": "str"}
POSITIVE_KNOBS = ("tp", "pp", "ep", "cp", "etp", "vpp", "mbs", "gbs")
ENUM_KNOBS = ("pp_schedule", "recompute_granularity", "recompute_method", "fp8")
BOOL_WORDS = {"0", "1", "off", "on", "f", "t", "false", "true", "n", "y", "no", "yes", "none", "null"}

negative = st.integers(max_value=-1)
junk = st.text(string.ascii_letters + string.punctuation + " \t", min_size=1, max_size=20).filter(
    lambda s: any(c.isalpha() for c in s) and s.strip().lower() not in BOOL_WORDS)
containers = st.one_of(st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(),
                                                                            max_size=2))
not_a_string = st.one_of(st.integers(), st.floats(allow_nan=False), containers, st.just(True))


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


bad_config = st.one_of(
    st.integers(), st.floats(allow_nan=False), st.lists(st.integers(), max_size=3),
    junk.filter(lambda s: not _is_json_object(s)),
    st.builds(lambda k, v: {k: v}, st.sampled_from(POSITIVE_KNOBS), st.one_of(negative, st.just(0), junk)),
    st.builds(lambda k, v: {k: v}, st.sampled_from(ENUM_KNOBS), junk.map(lambda s: "x" + s)),
    st.builds(lambda k: {k: 1}, st.text(string.ascii_lowercase + "_", min_size=1, max_size=12).filter(
        lambda k: k not in TrialConfig.model_fields)),
)
BAD = {
    "config": bad_config,
    "origin": st.one_of(not_a_string, junk.map(lambda s: s + " !")),
    "int": st.one_of(negative, st.integers(min_value=1_000_000), st.floats(0.1, 0.9), junk, containers),
    "enum": st.one_of(junk.map(lambda s: "x" + s), st.integers(), containers),
    "bool": st.one_of(st.integers(min_value=2), negative, junk, containers),
    "float": st.one_of(st.floats(max_value=0.0, allow_nan=False), junk, containers),
    "str": not_a_string,
}


@st.composite
def malformed(draw, params: dict[str, set[str]], required: dict[str, set[str]]):
    """(tool, arguments) that must fail: unknown tool, unknown key, missing argument or a bad value."""
    tools = sorted(params)
    kind = draw(st.sampled_from(["unknown_tool", "unknown_key", "missing", "bad_value"]))
    tool = draw(st.sampled_from(tools))
    if kind == "unknown_tool":
        return draw(st.text(min_size=1, max_size=30).filter(lambda n: n not in params)), {}
    if kind == "missing" and required[tool]:
        present = draw(st.sets(st.sampled_from(sorted(required[tool])), max_size=len(required[tool]) - 1))
        return tool, dict.fromkeys(present, "x")
    with_values = sorted(params[tool])
    if kind == "bad_value" and with_values:
        name = draw(st.sampled_from(with_values))
        return tool, {name: draw(BAD[KINDS[name]])}
    key = draw(st.text(min_size=1, max_size=15).filter(lambda k: k not in params[tool]))
    return tool, {key: draw(st.one_of(st.integers(), junk, containers))}


def test_malformed_calls_are_error_results_and_lose_nothing(tmp_path):
    with in_process(tmp_path) as (server, session), portal_client(server) as (portal, client):
        run_id = session.active.run.id
        first = portal.call(client.call_tool, "evaluate_memory_only", {"config": {"mbs": 2}})
        assert not first.is_error
        rows = [t.id for t in session.ledger.trials(run_id)]
        listed = portal.call(client.list_tools).tools
        params = {t.name: set(t.input_schema.get("properties", {})) for t in listed}
        required = {t.name: set(t.input_schema.get("required", [])) for t in listed}
        assert set().union(*params.values()) <= set(KINDS)
        sent = []

        @settings(max_examples=CALLS, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
        @given(malformed(params, required))
        def fuzz(call):
            tool, arguments = call
            result = portal.call(client.call_tool, tool, arguments)
            text = result.content[0].text
            assert result.is_error, (tool, arguments, text)
            assert "\n" not in text and "Traceback" not in text and "internal error" not in text, text
            sent.append(tool)

        fuzz()
        assert len(sent) >= 1000
        assert [t.id for t in session.ledger.trials(run_id)] == rows
        after = portal.call(client.call_tool, "evaluate_memory_only", {"config": {"mbs": 4}})
        assert not after.is_error and not after.structured_content["cached"]
        assert [t.id for t in session.ledger.trials(run_id)] == [*rows, after.structured_content["trial_id"]]
