"""What the planner and each round read, as text: fetched through the server's tools."""

from __future__ import annotations

import json
from typing import Any

from .mcp_client import ToolClient

HISTORY_LINES = 60


def _json(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"))


def describe_run(server: ToolClient) -> dict[str, str]:
    """The fixed part: architecture, cluster, legal axes and the user's guidance (agent.prompt_extras)."""
    cluster = server.call("get_cluster")
    return {"architecture": _json(server.call("get_architecture")), "cluster": _json(cluster),
            "legal_axes": _json(server.call("get_legal_axes")), "guidance": cluster["cluster"]["prompt_extras"]}


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
        "scratchpad": "\n".join(f"[{n['author']}] {n['text']}" for n in notes) or "empty",
    }
