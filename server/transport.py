"""Run the server over stdio or streamable HTTP (loopback by default, bearer token when set).

Stdio goes through `server.stdio` rather than the SDK's `mcp/server/stdio.py`: the SDK turns a line it cannot
validate into an exception on the read stream, which `mcp/shared/jsonrpc_dispatcher.py` only logs, so truncated
JSON, a batch, a missing `method` or `"jsonrpc": "1.0"` went unanswered until the client timed out. Ours answers
such a line as JSON-RPC 2.0 says: -32700 "Parse error" (id null) when it is not UTF-8 JSON, -32600 "Invalid
Request" when it is JSON but not a message, a request whose id is neither a string nor an integer included
(the request's id when it has a string or integer one, else null).
The SDK's own fix is open: modelcontextprotocol/python-sdk#2751 (its PR #2766 closed unmerged).
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence

import anyio
from mcp.server.mcpserver import MCPServer
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from .bind import check_bind, transport_security
from .stdio import stdio_streams


class BearerGuard:
    """ASGI wrapper: HTTP requests without `Authorization: Bearer <token>` get 401 (the scheme is
    case-insensitive, RFC 7235 §2.1; the token is compared in constant time)."""

    def __init__(self, app: ASGIApp, token: str):
        self.app = app
        self.expected = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scheme, _, given = dict(scope["headers"]).get(b"authorization", b"").strip().partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), self.expected):
                response = JSONResponse({"error": "missing or wrong bearer token"}, status_code=401,
                                        headers={"WWW-Authenticate": 'Bearer realm="paratune"'})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def serve_stdio(server: MCPServer) -> None:
    """JSON-RPC on stdin/stdout, malformed lines answered; fd 1 points at stderr meanwhile, so stray prints
    cannot corrupt the wire."""
    anyio.run(_serve_stdio, server)


async def _serve_stdio(server: MCPServer) -> None:
    """What `MCPServer.run_stdio_async` does, on our streams. `_lowlevel_server` has no public name yet; the SDK
    reaches it the same way (mcp/client/_memory.py: "TODO(Marcelo): Make `lowlevel_server` public")."""
    lowlevel = server._lowlevel_server
    async with stdio_streams() as (read_stream, write_stream):
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


# Streamable HTTP already answers a malformed POST body with HTTP 400 and a JSON-RPC error, id null
# (mcp/server/streamable_http.py, `_handle_post_request`; mcp/server/_streamable_http_modern.py for an
# MCP-Protocol-Version the handshake does not know, e.g. 2026-07-28). The gaps are the legacy path's, left to the
# SDK: JSON that is not a message (a batch, no `method`, "jsonrpc": "1.0") gets -32602 rather than -32600, its
# message is pydantic's multi-line dump (often over 1 KB, quoting the input), the id is null even when readable
# (modelcontextprotocol/python-sdk#3557, its PR #3558 closed unmerged), and a request whose `id` is not a string
# or an integer (true, null) validates as a notification and gets 202, no answer.
def serve_http(server: MCPServer, *, host: str, port: int, token: str | None, log_level: str,
               allowed_hosts: Sequence[str] = ()) -> None:
    """Streamable HTTP at http://host:port/mcp; a non-loopback host needs a token; a request whose Host is
    not this server's name (or one of `allowed_hosts`) gets 421."""
    import uvicorn

    check_bind(host, token)
    app: ASGIApp = server.streamable_http_app(host=host, transport_security=transport_security(host, allowed_hosts))
    if token:
        app = BearerGuard(app, token)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level.lower(), access_log=False)
    anyio.run(uvicorn.Server(config).serve)
