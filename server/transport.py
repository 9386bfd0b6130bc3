"""Run the server over stdio or streamable HTTP (loopback by default, bearer token when set)."""

from __future__ import annotations

import hmac

import anyio
from mcp.server.mcpserver import MCPServer
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from .bind import check_bind


class BearerGuard:
    """ASGI wrapper: HTTP requests without `Authorization: Bearer <token>` get 401."""

    def __init__(self, app: ASGIApp, token: str):
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                response = JSONResponse({"error": "missing or wrong bearer token"}, status_code=401,
                                        headers={"WWW-Authenticate": 'Bearer realm="paratune"'})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def serve_stdio(server: MCPServer) -> None:
    """JSON-RPC on stdin/stdout; the SDK points fd 1 at stderr meanwhile, so stray prints cannot corrupt it."""
    server.run("stdio")


def serve_http(server: MCPServer, *, host: str, port: int, token: str | None, log_level: str) -> None:
    """Streamable HTTP at http://host:port/mcp; a non-loopback host needs a token."""
    import uvicorn

    check_bind(host, token)
    app: ASGIApp = server.streamable_http_app(host=host)
    if token:
        app = BearerGuard(app, token)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level.lower(), access_log=False)
    anyio.run(uvicorn.Server(config).serve)
