"""Helpers the MCP server tests share: small inputs, an in-process server, a client on a portal."""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import Client

from paratune.ledger import Ledger
from paratune.server.app import ParatuneServer, build_server
from paratune.server.paths import AllowedRoots
from paratune.server.session import Session

from .conftest import EXAMPLES

PARATUNE = str(Path(sys.executable).parent / "paratune")
LLAMA8B = EXAMPLES / "workloads" / "llama3-8b-mi300x.yaml"
MI300X_1N = EXAMPLES / "clusters" / "mi300x-1n.yaml"


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
