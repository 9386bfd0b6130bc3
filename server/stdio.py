"""MCP over stdin/stdout like the SDK's `mcp.server.stdio.stdio_server`, except that a line which is not a
JSON-RPC message is answered (-32700 or -32600, as JSON-RPC 2.0 says) instead of dropped unanswered.

The SDK sends such a line's validation error into the read stream, and its dispatcher only logs it
(`mcp/shared/jsonrpc_dispatcher.py`, `_dispatch`, when no `on_stream_exception` observer is set, as on
the server side), so the client waits for its own timeout (modelcontextprotocol/python-sdk#2751). A line goes
to the server exactly when the SDK's validation passes it, but for one case: a request whose `id` is neither a
string nor an integer (true, 1.5, null), which the SDK's union takes for a notification and drops unanswered;
JSON-RPC calls it an invalid request, as the SDK's own 2026-07-28 HTTP path does (`_is_notification_shaped` in
`mcp/server/_streamable_http_modern.py`).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from typing import Any, BinaryIO, Literal

import anyio
import pydantic_core
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from mcp.os.win32.utilities import rebind_std_handle_to_fd
from mcp.shared.message import SessionMessage
from mcp_types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    JSONRPCNotification,
    RequestId,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError
from pydantic_core import ErrorDetails

MAX_MESSAGE = 200
"""Longest error `message` answered; the reasons never quote the offending line."""


class Rejected(Exception):
    """A stdin line that is not a JSON-RPC message, with the error response it is owed."""

    def __init__(self, code: int, message: str, request_id: RequestId | None = None):
        super().__init__(message)
        self.response = JSONRPCError(jsonrpc="2.0", id=request_id,
                                     error=ErrorData(code=code, message=message[:MAX_MESSAGE]))


def parse_line(line: bytes) -> JSONRPCMessage | None:
    """The message on one stdin line (None for a blank line), validated as the SDK validates it.

    Raises:
        Rejected: the line is not UTF-8 or not JSON (-32700), or JSON but not a valid message (-32600).
    """
    try:
        text = line.decode("utf-8")  # strict: the SDK's errors="replace" would rewrite the request silently
    except UnicodeDecodeError as exc:
        raise Rejected(PARSE_ERROR, f"Parse error: invalid UTF-8 at byte {exc.start}") from None
    if not text.strip():
        return None
    try:
        message = jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValidationError as exc:
        raise _rejection(text, exc) from None
    if isinstance(message, JSONRPCNotification) and "id" in pydantic_core.from_json(text):
        # An `id` the union could not take as a request id (true, 1.5, null) made this a "notification";
        # JSON-RPC calls it an invalid request, and its sender waits for an answer.
        raise Rejected(INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
    return message


def _rejection(text: str, exc: ValidationError) -> Rejected:
    """The error owed for a line the SDK's validation refused: -32700 when no JSON parser reads it, else
    -32600 with the request's id where it has a usable one."""
    first = exc.errors(include_url=False, include_input=False)[0]
    value = _json_value(text, first)
    if isinstance(value, list):
        reason = "a JSON array (batch); MCP has no batch requests"
    elif first["type"] == "json_invalid":
        reason = f"the SDK's JSON parser refuses it ({_parser_reason(first)})"
    else:
        where = ".".join(map(str, first["loc"]))
        reason = f"{where}: {first['msg']}" if where else first["msg"]
    return Rejected(INVALID_REQUEST, f"Invalid Request: {reason}", _usable_id(value))


def _json_value(text: str, first: ErrorDetails) -> Any:
    """`text` as JSON: by pydantic's parser, or by Python's where pydantic's gave up (it refuses lone-surrogate
    escapes and nesting deeper than 200, which are JSON still).

    Raises:
        Rejected: -32700, neither parser reads it (truncated, not JSON, nested too deeply even for Python).
    """
    if first["type"] != "json_invalid":
        return pydantic_core.from_json(text)
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise Rejected(PARSE_ERROR, f"Parse error: {_parser_reason(first)}") from None


def _parser_reason(error: ErrorDetails) -> str:
    """Pydantic's JSON error without its prefix, e.g. "EOF while parsing an object at line 1 column 39"."""
    return error["msg"].removeprefix("Invalid JSON: ")


def _usable_id(value: Any) -> RequestId | None:
    """The object's `id` when a response can carry it back (a string that encodes as UTF-8, or an integer)."""
    request_id = value.get("id") if isinstance(value, dict) else None
    if isinstance(request_id, int) and not isinstance(request_id, bool):
        return request_id
    if isinstance(request_id, str):
        with suppress(UnicodeEncodeError):
            request_id.encode("utf-8")
            return request_id
    return None


@contextmanager
def _claimed(fd: int, mode: Literal["rb", "wb"], stand_in: Callable[[], int]) -> Iterator[BinaryIO]:
    """The wire behind `fd`, served from a private duplicate while `fd` points at `stand_in()` (restored on
    exit), so handlers and child processes read EOF and their stray output lands on stderr, not the wire."""
    wire = os.dup(fd)  # fds 0-2 are open, so this lands above them; non-inheritable (PEP 446)
    replacement = stand_in()
    os.dup2(replacement, fd)
    os.close(replacement)
    with suppress(OSError):
        rebind_std_handle_to_fd(fd)  # Windows: children inherit the Win32 handle slot; a no-op elsewhere
    try:
        # closefd=False: an abandoned reader thread may still block on the wire after the transport exits.
        yield os.fdopen(wire, mode, closefd=False)
    finally:
        os.dup2(wire, fd)
        with suppress(OSError):
            rebind_std_handle_to_fd(fd)


async def _read_lines(wire: BinaryIO, to_server: ObjectSendStream[SessionMessage],
                      to_client: ObjectSendStream[SessionMessage]) -> None:
    """Valid messages to the server; every rejected line's error straight to the client."""
    async with to_server, to_client:
        with suppress(anyio.BrokenResourceError):  # the server, or the writer, stopped
            while line := await anyio.to_thread.run_sync(wire.readline, abandon_on_cancel=True):
                try:
                    message = parse_line(line)
                except Rejected as rejected:
                    await to_client.send(SessionMessage(rejected.response))
                    continue
                if message is not None:
                    await to_server.send(SessionMessage(message))


async def _write_lines(messages: ObjectReceiveStream[SessionMessage], wire: BinaryIO) -> None:
    """One line per message, flushed at once; the only writer, so server output and rejections never interleave."""
    async with messages:
        async for item in messages:
            data = item.message.model_dump_json(by_alias=True, exclude_unset=True).encode("utf-8") + b"\n"
            await anyio.to_thread.run_sync(_put, wire, data)


def _put(wire: BinaryIO, data: bytes) -> None:
    wire.write(data)
    wire.flush()


@asynccontextmanager
async def stdio_streams() -> AsyncIterator[tuple[ObjectReceiveStream[SessionMessage],
                                                 ObjectSendStream[SessionMessage]]]:
    """(read, write) streams for the low-level `Server.run`, over the process's fds 0 and 1.

    Leaving stops the stdin reader at once (it never waits for EOF) but lets the writer finish what the
    server sent.
    """
    with _claimed(0, "rb", lambda: os.open(os.devnull, os.O_RDONLY)) as wire_in, \
            _claimed(1, "wb", lambda: os.dup(2)) as wire_out:
        to_server, from_client = anyio.create_memory_object_stream[SessionMessage](0)
        to_client, from_server = anyio.create_memory_object_stream[SessionMessage](0)
        async with anyio.create_task_group() as writers:
            writers.start_soon(_write_lines, from_server, wire_out)
            async with anyio.create_task_group() as readers:
                readers.start_soon(_read_lines, wire_in, to_server, to_client.clone())
                yield from_client, to_client
                readers.cancel_scope.cancel()
            await to_client.aclose()  # the writer ends once every sender is closed
