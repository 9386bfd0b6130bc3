"""The MCP Inspector CLI (npm, pinned) against `paratune serve` over stdio: list the tools, call one.

Needs Node >= 22 and the Inspector in .tools/: `bash scripts/install-inspector.sh` (CI runs it through
scripts/setup.sh). Without them the test is skipped with that reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from .conftest import ROOT
from .test_server_common import PARATUNE, small_inputs

INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"
TOOLS_DIR = ROOT / ".tools"
BIN = TOOLS_DIR / "node_modules" / ".bin"

pytestmark = pytest.mark.skipif(
    not (BIN / "node").exists() or not (BIN / "mcp-inspector").exists() or shutil.which("npx") is None,
    reason="MCP Inspector not installed: run `bash scripts/install-inspector.sh` (Node 22 + the Inspector into "
           ".tools/; needs npm)")


def inspector(tmp_path, *method: str) -> subprocess.CompletedProcess:
    """`npx -y <Inspector> --cli paratune serve ... <method args>` from .tools/, offline, Node 22 first on PATH."""
    workload, cluster = small_inputs(tmp_path)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "npm_config_offline": "true",
           "npm_config_update_notifier": "false", "MCP_CATALOG_PATH": str(tmp_path / "inspector-catalog.json")}
    command = ["npx", "-y", INSPECTOR, "--cli", PARATUNE, "serve", "--workload", str(workload),
               "--target-cluster", str(cluster), "--ledger", str(tmp_path / "ledger.sqlite"), *method]
    return subprocess.run(command, cwd=TOOLS_DIR, env=env, capture_output=True, text=True, timeout=180)


def test_inspector_lists_the_tools(tmp_path):
    proc = inspector(tmp_path, "--method", "tools/list")
    assert proc.returncode == 0, proc.stderr
    tools = {t["name"]: t for t in json.loads(proc.stdout)["tools"]}
    assert len(tools) == 19 and "evaluate_simulate" in tools and "export_best" in tools
    assert tools["evaluate_simulate"]["inputSchema"]["properties"]["config"]


def test_inspector_calls_evaluate_simulate(tmp_path):
    proc = inspector(tmp_path, "--method", "tools/call", "--tool-name", "evaluate_simulate",
                     "--tool-arg", 'config={"mbs": 2, "recompute_granularity": "full"}', "origin=inspector")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["isError"] is False
    result = out["structuredContent"]["result"]
    assert result["source"] == "simulate" and result["tokens_per_s_per_gpu"] > 0 and result["config"]["mbs"] == 2
