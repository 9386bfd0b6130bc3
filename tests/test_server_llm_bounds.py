"""A provider that never answers cannot freeze the server: `query_llm` calls wait in a worker pool of
their own and end with a timeout error within their limit, while the server keeps answering (MCP
2026-07-28 removed `ping`: `tools/list` and a tool call stand for it).
A real `paratune serve` over stdio, LiteLLM pointed at a loopback socket that accepts and never replies."""

from __future__ import annotations

import os

import anyio
import yaml
from mcp import Client, StdioServerParameters

from .test_server_common import PARATUNE, silent_listener, small_inputs

CALLS = 50
LIMIT_S = 10.0  # each call's limit; LiteLLM is imported (by a first call) before the timed calls start


def test_a_silent_provider_times_out_each_call_and_the_server_keeps_answering(tmp_path):
    listener, held = silent_listener()
    workload, cluster = small_inputs(tmp_path, llm="openai/never-answers")
    data = yaml.safe_load(cluster.read_text())
    data["agent"]["llm"]["timeout_s"] = LIMIT_S
    cluster.write_text(yaml.safe_dump(data))
    env = {**os.environ, "OPENAI_API_BASE": f"http://127.0.0.1:{listener.getsockname()[1]}/v1"}
    env.pop("LLM_MODEL", None)
    params = StdioServerParameters(command=PARATUNE, env=env, args=[
        "serve", "--workload", str(workload), "--target-cluster", str(cluster), "--ledger", str(tmp_path / "l.sqlite")])

    async def session():
        async with Client(params) as client:
            results: list = []

            async def ask(i: int) -> None:
                results.append(await client.call_tool("query_llm", {"prompt": f"call {i}"}))

            async with anyio.create_task_group() as tg:
                # a first call imports LiteLLM in the server (seconds, more on a loaded machine): the calls
                # below start once it has reached the provider, so each can reach it within its limit
                tg.start_soon(client.call_tool, "query_llm", {"prompt": "first"})
                with anyio.fail_after(300):  # a hang guard
                    while not held:
                        await anyio.sleep(0.1)
                reached_first = len(held)
                for i in range(CALLS):
                    tg.start_soon(ask, i)
                await anyio.sleep(0.5)  # every call is in flight or queued
                await client.list_tools()
                budget = await client.call_tool("get_budget_status", {})
                ended_before = len(results)  # LLM calls answered before the server answered these two
            return results, ended_before, budget, reached_first

    try:
        results, ended_before, budget, reached_first = anyio.run(session)
    finally:
        listener.close()
        for conn in held:
            conn.close()
    assert ended_before == 0 and not budget.is_error  # answered while 50 LLM calls hang
    assert len(results) == CALLS and all(r.is_error for r in results)
    # each ended by the tool's own deadline (server/offload.py: its timer counts the wait for a thread of the
    # LLM pool), not by LiteLLM's timeout, which a queued call would reach only after its wait; that the
    # deadline answers at once is test_server_limits.py's test_a_call_past_its_deadline_answers_...
    assert all(f"did not answer within {LIMIT_S:g} s (agent.llm.timeout_s)" in r.content[0].text for r in results)
    assert len(held) > reached_first  # the 50 calls reached the provider too


OFFLINE_PROBE = """
import socket, sys
reached = []
def hook(event, args):
    if event == "socket.connect":
        reached.append(args[1])
    elif event == "socket.getaddrinfo":  # a name lookup comes first (and is all that happens offline)
        reached.append((args[0], args[1]))
sys.addaudithook(hook)
from paratune.planner.cli import main
try:
    main(["catalog", "gpus"])  # the CLI's start-up, then the query_llm path: resolve, import, cost table
except SystemExit:
    pass
from paratune.server.llm import resolve_llm
import litellm
resolve_llm("openai/gpt-4o")
litellm.model_cost.get("gpt-4o")
print("REACHED", [a for a in reached if not (isinstance(a, tuple) and a[0] in ("127.0.0.1", "::1", "localhost"))])
"""


def test_litellm_stays_offline_with_an_endpoint_configured():
    """With OPENAI_API_BASE set, importing and using LiteLLM looks up no host and opens no connection (its
    price table is the bundled one): every name lookup and socket connect is audited."""
    env = {**os.environ, "OPENAI_API_BASE": "http://127.0.0.1:9/v1"}
    env.pop("LITELLM_LOCAL_MODEL_COST_MAP", None)
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", OFFLINE_PROBE], env=env, capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "REACHED []" in out.stdout
