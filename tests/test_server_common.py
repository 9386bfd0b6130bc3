"""Helpers the MCP server tests share: small inputs, an in-process server, a client on a portal."""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import Client
from mcp_types.version import LATEST_HANDSHAKE_VERSION

from paratune.ledger import Ledger
from paratune.server.app import ParatuneServer, build_server
from paratune.server.paths import AllowedRoots
from paratune.server.session import Session

from .conftest import EXAMPLES, PARATUNE

LLAMA8B = EXAMPLES / "workloads" / "llama3-8b-mi300x.yaml"
MI300X_1N = EXAMPLES / "clusters" / "mi300x-1n.yaml"


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
        return json.loads(self.receive_line(timeout))

    def receive_line(self, timeout: float = ANSWER_S) -> bytes:
        """The next line the server wrote, as written."""
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no answer within {timeout} s; server stderr:\n{self.stderr.read_text()[-3000:]}")

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


@contextmanager
def stdio_server(folder: Path, *extra: str) -> Iterator[Wire]:
    """A `paratune serve` (stdio) on the small inputs under `folder`, past the initialize handshake; on leaving,
    its stdin is closed and it must exit 0."""
    workload, cluster = small_inputs(folder / "inputs")
    stderr = folder / "stderr.txt"
    with stderr.open("wb") as err:
        proc = subprocess.Popen([PARATUNE, "serve", "--workload", str(workload), "--target-cluster", str(cluster),
                                 "--ledger", str(folder / "l.sqlite"), "--allow-root", str(folder), *extra],
                                cwd=folder, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                env={k: v for k, v in os.environ.items() if k != "LLM_MODEL"})
    w = Wire(proc, stderr)
    try:
        w.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": LATEST_HANDSHAKE_VERSION, "capabilities": {},
            "clientInfo": {"name": "paratune-tests", "version": "0"}}}).encode())
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


def small_inputs(folder: Path, *, max_perf_calls: int = 40, has_gpu: bool = False,
                 llm: str | None = None, search: dict | None = None) -> tuple[Path, Path]:
    """Llama 3 8B (GBS 8, 4k sequence: a small space) and a 2 x MI300X cluster (with `search`, its
    search block), written under `folder`."""
    workload = yaml.safe_load(LLAMA8B.read_text()) | {"global_batch_size": 8, "seq_length": 4096,
                                                       "micro_batch_size": 1}
    cluster = yaml.safe_load(MI300X_1N.read_text())
    cluster["target_cluster"]["gpus_per_node"] = 2
    cluster["optimization"]["budget"]["max_perf_calls"] = max_perf_calls
    cluster["available_for_benchmark"] = {"has_gpu": has_gpu, "benchmark_gpus": int(has_gpu)}
    cluster["optimization"]["budget"]["max_benchmark_calls"] = 3 if has_gpu else 0
    cluster["agent"] = {"llm": {"model": llm}}
    if search:
        cluster["search"] = search
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "workload.yaml").write_text(yaml.safe_dump(workload))
    (folder / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    return folder / "workload.yaml", folder / "cluster.yaml"


@contextmanager
def in_process(root: Path, *, open_run: bool = True, **inputs) -> Iterator[tuple[ParatuneServer, Session]]:
    """A server over a fresh ledger in `root` (its only allowed root), with the small run open."""
    workload, cluster = small_inputs(root / "inputs", **inputs)
    with Ledger(root / "ledger.sqlite") as ledger:
        session = Session(ledger, AllowedRoots([root]))
        if open_run:
            session.open_run(workload, cluster)
        yield build_server(session), session


@contextmanager
def portal_client(server: object) -> Iterator[tuple[BlockingPortal, Client]]:
    """A connected client whose coroutines synchronous code runs with `portal.call`."""
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(Client(server)) as client:
        yield portal, client


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def silent_listener() -> tuple[socket.socket, list[socket.socket]]:
    """A loopback server socket whose connections are accepted and then left unanswered (a provider
    that never replies), and the connections it holds."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(128)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return server, held
