"""`paratune serve` over stdio, spoken to in raw JSON-RPC: every malformed line gets exactly one JSON-RPC 2.0
error (-32700 or -32600, the request's id where readable), valid notifications and blank lines get none, and the
server keeps answering pings throughout; its tool list, as written on the wire, fits an assistant's context."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from mcp_types import INVALID_REQUEST, PARSE_ERROR

from .test_server_common import Wire, stdio_server


@pytest.fixture(scope="module")
def wire(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wire]:
    """A `paratune serve` (stdio) past the initialize handshake."""
    with stdio_server(tmp_path_factory.mktemp("jsonrpc")) as w:
        yield w


BIG = json.dumps({"jsonrpc": "1.0", "id": "big", "method": "ping", "params": {"x": "a" * 1_000_000}}).encode()

MALFORMED = {  # the line, the error code owed, the id it must carry
    "truncated JSON": (b'{"jsonrpc":"2.0","id":1,"method":"ping"', PARSE_ERROR, None),
    "a JSON array (batch)": (b'[{"jsonrpc":"2.0","id":2,"method":"ping"}]', INVALID_REQUEST, None),
    "no method": (b'{"jsonrpc":"2.0","id":3}', INVALID_REQUEST, 3),
    "jsonrpc 1.0": (b'{"jsonrpc":"1.0","id":4,"method":"ping"}', INVALID_REQUEST, 4),
    "lone surrogate, raw bytes": (b"\xed\xa0\x80", PARSE_ERROR, None),
    "lone surrogate, raw bytes in a request": (
        b'{"jsonrpc":"2.0","id":5,"method":"ping","params":{"x":"\xed\xa0\x80"}}', PARSE_ERROR, None),
    "100,000-deep nesting": (b"[" * 100_000, PARSE_ERROR, None),
    "1 MB string in an invalid request": (BIG, INVALID_REQUEST, "big"),
    "id true": (b'{"jsonrpc":"2.0","id":true,"method":"ping"}', INVALID_REQUEST, None),
    "id null": (b'{"jsonrpc":"2.0","id":null,"method":"ping"}', INVALID_REQUEST, None),
    "not an object": (b"42", INVALID_REQUEST, None),
    "string id, params not an object": (b'{"jsonrpc":"2.0","id":"s","method":"ping","params":[1]}',
                                        INVALID_REQUEST, "s"),
}


@pytest.mark.parametrize("line, code, request_id", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_line_gets_one_error_and_the_server_keeps_serving(wire, line, code, request_id):
    wire.send(line)
    [error, _pong] = wire.answers_until_pong(wire.ping())
    assert error["jsonrpc"] == "2.0" and error["id"] == request_id and error["error"]["code"] == code
    assert len(error["error"]["message"].encode()) <= 1024
    assert len(json.dumps(error)) < 2048  # nothing of a large input comes back


def test_a_json_escaped_lone_surrogate_in_a_valid_request_is_answered(wire):
    wire.send(b'{"jsonrpc":"2.0","id":7,"method":"ping","params":{"x":"\\ud800"}}')
    [answer, _pong] = wire.answers_until_pong(wire.ping())
    assert answer["id"] == 7
    assert "result" in answer or answer["error"]["code"] == INVALID_REQUEST


@pytest.mark.parametrize("line", [b"", b"  \t ", b'{"jsonrpc":"2.0","method":"notifications/paratune-test"}'],
                         ids=["empty", "blank", "notification"])
def test_blank_lines_and_notifications_get_no_answer(wire, line):
    wire.send(line)
    assert len(wire.answers_until_pong(wire.ping())) == 1


TOOLS_LIST_LIMIT = 32 * 1024  # issue 29: the bytes every assistant reads before its first call


def test_the_tool_list_on_the_wire_is_at_most_32_kib(wire):
    wire.send(b'{"jsonrpc":"2.0","id":"tools","method":"tools/list"}')
    line = wire.receive_line()
    tools = json.loads(line)["result"]["tools"]
    assert len(tools) == 19 and all(t["description"] and t["inputSchema"] and t["outputSchema"] for t in tools)
    assert len(line.rstrip(b"\n")) <= TOOLS_LIST_LIMIT, f"tools/list is {len(line):,} bytes"
