"""What the planner and each round read, as text: fetched through the server's tools."""

from __future__ import annotations

import json
from typing import Any

from .mcp_client import ServerConnection, ToolClient

HISTORY_LINES = 12  # the latest trials in every prompt (the incumbent is stated apart)
NOTES = 6  # the latest scratchpad notes in every prompt
NOTE_CHARS = 200  # of each note


def _json(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"))


def describe_run(server: ServerConnection) -> dict[str, str]:
    """The fixed part: architecture, cluster, legal axes, the knobs (once) and the user's guidance
    (agent.prompt_extras)."""
    cluster = server.call("get_cluster")
    guidance = cluster["cluster"]["prompt_extras"]
    [simulate] = [t for t in server.tools if t.name == "evaluate_simulate"]
    config = simulate.input_schema["properties"]["config"]
    schema = simulate.input_schema.get("$defs", {}).get(config.get("$ref", "").rsplit("/", 1)[-1], config)
    arch = server.call("get_architecture")
    architecture = {"workload": arch["workload_name"], "model": _set(arch["model"]), "baseline": _set(arch["baseline"])}
    hardware = {k: v for k, v in cluster["cluster"].items() if not k.startswith(("llm_", "prompt_")) and v is not None}
    cluster = {**cluster, "cluster": hardware}
    return {"architecture": _json(architecture), "cluster": _json(cluster),
            "legal_axes": _json(server.call("get_legal_axes")), "knobs": compact_knobs(schema),
            "guidance": guidance}


def describe_progress(server: ToolClient) -> dict[str, str]:
    """The moving part: incumbent, budget, latest history and the scratchpad."""
    best = server.call("get_best")
    incumbent = (f"trial #{best['trial_id']} ({best['origin']}): "
                 f"{best['result']['tokens_per_s_per_gpu']:.1f} tokens/s/GPU, "
                 f"{best['result']['memory_per_gpu_gb']:.1f} GiB per GPU; config {_json(best['result']['config'])}"
                 if best["found"] else "none yet")
    line = server.call("get_budget_status")["fidelities"]["simulate"]
    notes = server.call("read_scratchpad")["notes"]
    return {
        "incumbent": incumbent,
        "budget": f"simulate calls: {line['spent']} spent, {'no limit' if line['left'] is None else line['left']} left",
        "history": "\n".join(server.call("get_history", k=HISTORY_LINES)["lines"]) or "no trials yet",
        "scratchpad": "\n".join(f"[{n['author']}] {_cut(n['text'])}" for n in notes[-NOTES:]) or "empty",
    }


def _set(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields that say something: not unset, not off, not empty."""
    return {k: v for k, v in fields.items() if v not in (None, False, "", [], {})}


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= NOTE_CHARS else text[:NOTE_CHARS] + "..."


def compact_knobs(schema: dict[str, Any]) -> str:
    """The TrialConfig knobs of a JSON schema as one short line each (`name: int | a|b|c | list of ...`):
    the one statement of the knob schema every prompt carries, instead of the schema in every tool."""
    def kind(node: dict[str, Any]) -> str:
        if "enum" in node:
            return "|".join(str(v) for v in node["enum"])
        if node.get("type") == "array":
            return f"list of {kind(node.get('items', {}))}"
        names: dict[Any, str] = {"integer": "int", "boolean": "bool", "string": "str", "number": "float"}
        return names.get(node.get("type"), "any")

    lines = []
    for name, prop in schema.get("properties", {}).items():
        options = [o for o in prop.get("anyOf", [prop]) if o.get("type") != "null"]
        lines.append(f"{name}: {' or '.join(kind(o) for o in options)}")
    return "; ".join(lines)
