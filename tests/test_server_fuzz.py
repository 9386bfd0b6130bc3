"""Fuzz over a real stdio transport: over a thousand tool calls generated from the tools' own input schemas,
each argument well-formed or hostile (huge, negative, inexact, control characters, megabyte strings, wrong
types), each answered (a wait that guards against a hang, not a speed: `benchmarks/mcp_roundtrip.py` times
calls), in at most 64 KB, with no traceback and no bare internal error; the server keeps serving and exits
cleanly at the end of its input."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .test_server_common import stdio_server

CALLS = 1100
HANG_S = 120.0  # per answer: past the server's own deadline for a non-search call (server/offload.py LAYOUT_S, 60 s);
# the searches generated here are of the small inputs' space
MAX_ANSWER = 64 * 1024
# Tools whose valid calls take a tenth of a second to seconds (plots, searches): one call in twenty.
SLOW = {"export_best", "sweep", "run_seed_plan", "explain"}
PATHS = ["inputs/workload.yaml", "inputs/cluster.yaml", "out", "a/" * 3000, "../etc/passwd", "/etc/passwd"]

hostile = st.one_of(
    st.sampled_from([2**64 + 1, 10**400, -1, 0, 2**63, " 2 ", "2", "true", True, False, 2.5, 1e308, None, [], {},
                     "a\x00b", "evil\u202etxt", "x" * 200_000, [1, [2, [3]]], {"pp": 2**64 + 1}]),
    st.integers(), st.floats(allow_nan=False), st.text(max_size=40))


def _resolved(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    return defs[ref.rsplit("/", 1)[-1]] if ref else schema


def well_formed(schema: dict[str, Any], defs: dict[str, Any], key: str) -> st.SearchStrategy[Any]:
    """Values the schema admits (small numbers, so that valid calls do real work quickly)."""
    schema = _resolved(schema, defs)
    if "anyOf" in schema:
        return st.one_of([well_formed(s, defs, key) for s in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    kind = schema.get("type")
    if isinstance(kind, list):  # the compact schemas' ["integer", "null"] (server/schemas.py)
        return st.one_of([well_formed({**schema, "type": k}, defs, key) for k in kind])
    if kind == "integer":
        low = schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1)
        return st.integers(low, min(schema.get("maximum", low + 8), low + 8))
    if kind == "number":
        return st.floats(0.001, 1e6)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        return st.lists(well_formed(schema.get("items", {}), defs, key), max_size=3)
    if kind == "object":
        return arguments(schema, defs)
    if key in ("workload", "cluster", "out_dir"):
        return st.sampled_from(PATHS)
    return st.text(max_size=min(schema.get("maxLength", 60), 60))


def arguments(schema: dict[str, Any], defs: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """An object for `schema`: some of its properties, each well-formed or (one time in five) hostile, and now
    and then a key it does not have."""
    properties = schema.get("properties", {})
    values = {k: st.one_of(well_formed(s, defs, k), well_formed(s, defs, k), well_formed(s, defs, k),
                           well_formed(s, defs, k), hostile) for k, s in properties.items()}
    chosen = st.fixed_dictionaries({}, optional=values)
    stray = st.dictionaries(st.text(min_size=1, max_size=12).filter(lambda k: k not in properties), hostile,
                            max_size=1)
    return st.one_of(chosen, chosen, chosen, st.builds(lambda a, b: {**a, **b}, chosen, stray))


def calls(tools: list[dict[str, Any]]) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    """(tool name, arguments) from each tool's inputSchema: one call in twenty to a slow tool, one in twenty to a
    tool that does not exist."""
    def of(tool: dict[str, Any]) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
        schema = tool["inputSchema"]
        return st.tuples(st.just(tool["name"]), arguments(schema, schema.get("$defs", {})))

    quick = st.one_of([of(t) for t in tools if t["name"] not in SLOW])
    slow = st.one_of([of(t) for t in tools if t["name"] in SLOW])
    unknown = st.tuples(st.text(max_size=30).filter(lambda n: n not in {t["name"] for t in tools}), st.just({}))
    kinds = {"quick": quick, "slow": slow, "unknown": unknown}
    return st.sampled_from(["quick"] * 18 + ["slow", "unknown"]).flatmap(kinds.__getitem__)


def test_generated_calls_are_answered_quickly_small_and_clean(tmp_path):
    with stdio_server(tmp_path) as wire:
        next_id = iter(range(1, 10**9))

        def request(method: str, params: dict[str, Any]) -> tuple[dict[str, Any], int]:
            """The answer to one request and its size on the wire."""
            rid = next(next_id)
            wire.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode())
            while True:
                line = wire.receive_line(timeout=HANG_S)
                answer = json.loads(line)
                if answer.get("id") == rid:
                    return answer, len(line)

        tools = request("tools/list", {})[0]["result"]["tools"]
        seen: list[tuple[str, int]] = []

        @settings(max_examples=CALLS, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(calls(tools))
        def fuzz(call: tuple[str, dict[str, Any]]) -> None:
            name, args = call
            answer, size = request("tools/call", {"name": name, "arguments": args})
            seen.append((name, size))
            text = json.dumps(answer)
            assert size <= MAX_ANSWER, (name, size)
            assert "Traceback" not in text and f"{name}: {name}:" not in text, text[:2000]
            result = answer.get("result")
            if result is not None and result.get("isError"):
                message = result["content"][0]["text"]
                assert "internal error" not in message and "\n" not in message, (name, args, message[:2000])

        fuzz()
        assert len(seen) >= 1000
        largest = max(seen, key=lambda s: s[1])
        print(f"\nfuzz over stdio: {len(seen)} calls answered, largest {largest[1]:,} B ({largest[0]}), "
              f"{len({s[0] for s in seen} & {t['name'] for t in tools})} tools")
        assert "tools" in request("tools/list", {})[0]["result"]  # still serving
    assert "Traceback" not in (tmp_path / "stderr.txt").read_text()
