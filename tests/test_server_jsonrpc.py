"""`paratune serve` over stdio, spoken to in raw JSON-RPC: every malformed line gets exactly one JSON-RPC 2.0
error (-32700 or -32600, the request's id where readable), valid notifications and blank lines get none, and the
server keeps answering pings throughout."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_types import INVALID_REQUEST, PARSE_ERROR
from mcp_types.version import LATEST_HANDSHAKE_VERSION

from .test_server_common import PARATUNE, small_inputs

ANSWER_S = 5.0  # a missing answer fails within this, rather than hanging
START_S = 60.0  # the first answer also waits for the server's imports


class Wire:
    """A server process's stdin and stdout as JSON-RPC lines; stdout is read on a thread, so waits time out."""

    def __init__(self, proc: subprocess.Popen[bytes], stderr: Path):
        self.proc, self.stderr = proc, stderr
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.next_id = 1000

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def receive(self, timeout: float = ANSWER_S) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no answer within {timeout} s; server stderr:\n{self.stderr.read_text()[-3000:]}")
        return json.loads(line)

    def ping(self) -> int:
        """Send a ping with a fresh id; return the id."""
        self.next_id += 1
        self.send(json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": "ping"}).encode())
        return self.next_id

    def answers_until_pong(self, ping_id: int) -> list[dict[str, Any]]:
        """Every answer up to and including the ping's, which must be a plain result."""
        answers = [self.receive()]
        while answers[-1].get("id") != ping_id or "error" in answers[-1]:
            answers.append(self.receive())
        assert answers[-1] == {"jsonrpc": "2.0", "id": ping_id, "result": {}}
        return answers


@pytest.fixture(scope="module")
def wire(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wire]:
    """A `paratune serve` (stdio) past the initialize handshake."""
    folder = tmp_path_factory.mktemp("jsonrpc")
    workload, cluster = small_inputs(folder / "inputs")
    stderr = folder / "stderr.txt"
    with stderr.open("wb") as err:
        proc = subprocess.Popen([PARATUNE, "serve", "--workload", str(workload), "--target-cluster", str(cluster),
                                 "--ledger", str(folder / "l.sqlite")], cwd=folder, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err)
    w = Wire(proc, stderr)
    try:
        w.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": LATEST_HANDSHAKE_VERSION, "capabilities": {},
            "clientInfo": {"name": "test_server_jsonrpc", "version": "0"}}}).encode())
        init = w.receive(timeout=START_S)
        assert init["id"] == 0 and init["result"]["protocolVersion"] == LATEST_HANDSHAKE_VERSION
        w.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        yield w
        proc.stdin.close()  # type: ignore[union-attr]
        assert proc.wait(timeout=30) == 0, stderr.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


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
