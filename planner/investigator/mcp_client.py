"""The paratune MCP server as the investigator reaches it: `paratune serve` over stdio, or a URL.

The MCP session lives on a portal thread's event loop, so synchronous DSPy code (and the threads a
code interpreter calls tools from) can use it; `call_tool` is the async face `dspy.Tool.from_mcp_tool`
drives, usable from any thread or event loop.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Self

import dspy
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent, Tool


class ToolCallError(Exception):
    """The server answered a tool call with an error; the message is the server's one line."""


def error_text(result: CallToolResult) -> str:
    """The text of an error result."""
    return " ".join(c.text for c in result.content if isinstance(c, TextContent)) or "(no message)"


class ToolClient:
    """Tool calls from synchronous code; subclasses provide `call_raw`."""

    def call_raw(self, name: str, arguments: dict[str, Any]) -> CallToolResult:
        raise NotImplementedError

    def call(self, name: str, **arguments: Any) -> dict[str, Any]:
        """The tool's structured result; ToolCallError when the server says the call failed."""
        result = self.call_raw(name, arguments)
        if result.is_error:
            raise ToolCallError(error_text(result))
        return result.structured_content or {}

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> CallToolResult:
        """The MCP client interface `dspy.Tool.from_mcp_tool` expects, from any event loop; an evaluation's
        result comes back without its term breakdown and echoed config (`brief`): the agent reads the
        verdict and the figures, and every observation stays in its prompt for the rest of the round."""
        result = await asyncio.to_thread(self.call_raw, name, arguments or {})
        if result.is_error or not isinstance(result.structured_content, dict):
            return result
        return result.model_copy(update={"structured_content": brief(result.structured_content)})


RESULT_KEEP = ("legal", "fits", "reason", "violations", "memory_per_gpu_gb", "memory_cap_gb", "iteration_ms",
               "tokens_per_s_per_gpu", "mfu", "error", "config_key")


def brief(content: dict[str, Any]) -> dict[str, Any]:
    """An evaluation's structured result with only the EvalResult fields an agent reasons with."""
    if not isinstance(content.get("result"), dict):
        return content
    result = {k: v for k, v in content["result"].items() if k in RESULT_KEEP}
    result["violations"] = [f"{v.get('code')}: {str(v.get('message'))[:160]}" for v in result.get("violations") or []]
    return {**content, "result": result}


CONFIG_ARGS = ("config", "from_config", "to_config")
CONFIG_STUB = {"type": "object", "description": "TrialConfig knobs as a JSON object (the knobs are listed in the "
                                                "task), e.g. {\"tp\": 2, \"pp\": 4}"}


def compact(tool: Tool) -> Tool:
    """`tool` as the agent's prompt carries it: its description's first sentence, and each config argument
    a short object stub (the knobs are stated once, `context.compact_knobs`; the server validates them)."""
    schema = dict(tool.input_schema)
    props = {k: (CONFIG_STUB if k in CONFIG_ARGS else v) for k, v in schema.get("properties", {}).items()}
    schema = {k: v for k, v in schema.items() if k != "$defs"} | {"properties": props}
    first = (tool.description or "").split(". ")[0].rstrip(".") + "."
    return tool.model_copy(update={"input_schema": schema, "description": first})


def paratune_command() -> str:
    """The `paratune` executable next to this interpreter (a venv), else the one on PATH."""
    sibling = Path(sys.executable).parent / "paratune"
    return str(sibling) if sibling.exists() else shutil.which("paratune") or "paratune"


def stdio_server(workload: str | Path, cluster: str | Path, ledger: str | Path,
                 extra: tuple[str, ...] = ()) -> StdioServerParameters:
    """`paratune serve` over stdio on `ledger` with this run open (`extra`: more serve flags); it inherits
    this process's environment (the LLM variables `query_llm` needs), which the MCP SDK would otherwise filter."""
    args = ["serve", "--ledger", str(ledger), "--workload", str(workload), "--target-cluster", str(cluster), *extra]
    return StdioServerParameters(command=paratune_command(), args=args, env=dict(os.environ))


class ServerConnection(ToolClient):
    """A connected MCP session (context manager): its tool list, synchronous calls and DSPy tools."""

    def __init__(self, target: StdioServerParameters | str, *, token: str | None = None):
        self._target = target
        self._token = token
        self._stack = ExitStack()
        self._portal: BlockingPortal | None = None
        self._client: Client | None = None
        self.tools: list[Tool] = []

    def __enter__(self) -> Self:
        try:
            self._portal = self._stack.enter_context(start_blocking_portal())
            server: Any = self._target
            if isinstance(self._target, str) and self._token:
                import httpx2
                from mcp.client.streamable_http import streamable_http_client

                http = self._stack.enter_context(self._portal.wrap_async_context_manager(
                    httpx2.AsyncClient(headers={"Authorization": f"Bearer {self._token}"})))
                server = streamable_http_client(self._target, http_client=http)
            self._client = self._stack.enter_context(self._portal.wrap_async_context_manager(Client(server)))
            self.tools = self._portal.call(self._client.list_tools).tools
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def call_raw(self, name: str, arguments: dict[str, Any]) -> CallToolResult:
        assert self._portal is not None and self._client is not None, "use ServerConnection as a context manager"
        return self._portal.call(self._client.call_tool, name, arguments)

    def dspy_tools(self, names: list[str], client: ToolClient | None = None) -> list[dspy.Tool]:
        """The named server tools as DSPy tools (structured results), calling through `client` (default: this
        connection); a name the server lacks is an error."""
        by_name = {t.name: t for t in self.tools}
        missing = [n for n in names if n not in by_name]
        if missing:
            raise ToolCallError(f"the server has no tool {', '.join(missing)}")
        return [dspy.Tool.from_mcp_tool(client or self, compact(by_name[n]), result_mode="structured") for n in names]
