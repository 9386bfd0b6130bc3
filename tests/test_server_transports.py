"""`paratune serve` as a subprocess: a stdio session, a loopback streamable HTTP session with a bearer
token, and the refusal to listen off loopback without one."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from paratune.ledger import Ledger

from .conftest import ROOT
from .test_server_common import PARATUNE, free_port, small_inputs


def desktop_example(ledger: Path) -> StdioServerParameters:
    """claude_desktop_config.example.json's server, its placeholder replaced by this checkout."""
    config = json.loads((ROOT / "claude_desktop_config.example.json").read_text())["mcpServers"]["paratune"]
    args = [a.replace("/ABSOLUTE/PATH/TO/paratune", str(ROOT)) for a in config["args"]]
    args[args.index("--ledger") + 1] = str(ledger)
    assert config["command"] == "/ABSOLUTE/PATH/TO/paratune/.venv/bin/paratune"  # the README's setup
    return StdioServerParameters(command=PARATUNE, args=args, cwd="/")  # desktop clients start anywhere


def test_stdio_session_of_the_desktop_example_runs_the_seed_plan_and_reads_the_history(tmp_path):
    async def session():
        async with Client(desktop_example(tmp_path / "ledger.sqlite")) as client:
            seed = await client.call_tool("run_seed_plan", {"budget": 6})
            history = await client.call_tool("get_history", {"k": 100})
            bad = await client.call_tool("evaluate_simulate", {"config": {"pp": "four"}})
            return seed, history, bad

    seed, history, bad = anyio.run(session)
    assert not seed.is_error and seed.structured_content["simulate_budget"]["spent"] == 6
    lines = history.structured_content["lines"]
    assert len(lines) == seed.structured_content["new_trials"] and lines[0].startswith("#1 ")
    assert sum(" simulate seed:" in line for line in lines) == 6
    assert bad.is_error and "config.pp: expected an integer" in bad.content[0].text
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        [run] = ledger.runs()
        assert (run.workload_name, run.cluster_name) == ("mixtral-8x22b-mi355x", "mi355x-4n")


@contextmanager
def http_server(tmp_path, *extra: str):
    """`paratune serve --transport http` on a free loopback port; yields the MCP endpoint URL."""
    port = free_port()
    workload, cluster = small_inputs(tmp_path)
    proc = subprocess.Popen([PARATUNE, "serve", "--transport", "http", "--port", str(port), "--workload",
                             str(workload), "--target-cluster", str(cluster), *extra], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the HTTP server did not start"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
        assert out == ""  # nothing on stdout, HTTP mode included


def test_http_session_with_a_bearer_token(tmp_path):
    token = "test-token-0123456789"
    with http_server(tmp_path, "--token", token) as url:
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": token}):
            assert httpx2.post(url, json=ping, headers=headers).status_code == 401

        async def session():
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http, \
                    Client(streamable_http_client(url, http_client=http)) as client:
                tools = await client.list_tools()
                result = await client.call_tool("evaluate_simulate", {"config": {"mbs": 2}})
                return tools, result

        tools, result = anyio.run(session)
        assert len(tools.tools) == 19
        assert not result.is_error and result.structured_content["result"]["tokens_per_s_per_gpu"] > 0


def test_http_on_every_address_refuses_a_foreign_host_header(tmp_path):
    token = "test-token-0123456789"
    with http_server(tmp_path, "--host", "0.0.0.0", "--token", token) as url:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
        foreign = httpx2.post(url, json=init, headers={**headers, "Host": "attacker.example"})
        own = httpx2.post(url, json=init, headers=headers)
    assert foreign.status_code == 421 and own.status_code == 200


def test_http_refuses_a_public_address_without_a_token(tmp_path, monkeypatch):
    monkeypatch.delenv("PARATUNE_MCP_TOKEN", raising=False)
    proc = subprocess.run([PARATUNE, "serve", "--transport", "http", "--host", "0.0.0.0"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "refusing to listen on 0.0.0.0 without a bearer token" in proc.stderr
    assert not (tmp_path / "paratune-ledger.sqlite").exists()


def test_serve_needs_both_inputs_or_neither(tmp_path):
    proc = subprocess.run([PARATUNE, "serve", "--workload", "w.yaml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and "give both --workload and --target-cluster" in proc.stderr
