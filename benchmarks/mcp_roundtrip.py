"""MCP round trip: wall time of `evaluate_simulate` over stdio, client to `paratune serve` and back.

Starts `paratune serve` as a subprocess with a fresh ledger, opens a run of the Llama 3 8B example on a
copy of its cluster whose budget allows every call (max_perf_calls 1000), then calls evaluate_simulate
with a distinct legal layout each time, so every call is a new trial: oracle, ledger write and
transport included. Warm-up calls are not counted. Last line: `p50_ms=X p95_ms=Y` (target p50 <= 5).

`--against PYTHONPATH` also serves the same calls from a second server whose code is that path's (a shim of
another checkout, e.g. the code before a change; each server its own ledger) and alternates the calls between the
two, call by call, the first of each pair alternating: both meet the same load, which on a shared machine moves
the figures more than most changes do. Its line comes first: `against: p50_ms=X p95_ms=Y`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import yaml
from mcp import Client, StdioServerParameters

from paratune.oracle.inputs import load_cluster, load_workload
from paratune.planner.search.space import enumerate_space

ROOT = Path(__file__).resolve().parents[1]

WORKLOAD = ROOT / "examples" / "workloads" / "llama3-8b-mi300x.yaml"
CLUSTER = ROOT / "examples" / "clusters" / "mi300x-1n.yaml"


def inputs(tmp: Path) -> tuple[Path, Path]:
    """The example workload and a copy of its cluster with budget for every call, under `tmp`."""
    cluster = yaml.safe_load(CLUSTER.read_text())
    cluster["optimization"]["budget"]["max_perf_calls"] = 1000
    (tmp / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    shutil.copy(WORKLOAD, tmp / "workload.yaml")
    return tmp / "workload.yaml", tmp / "cluster.yaml"


def layouts(n: int) -> list[dict]:
    """`n` distinct legal layouts as TrialConfig objects (JSON)."""
    space = enumerate_space(load_workload(WORKLOAD), load_cluster(CLUSTER))
    return [t.model_dump(exclude_none=True) for _, t in zip(range(n), space)]


def server(tmp: Path, name: str, pythonpath: str | None) -> StdioServerParameters:
    """`paratune serve` on a fresh ledger under `tmp`, importing its code from `pythonpath` (None: this process's)."""
    env = dict(os.environ)  # the SDK's default keeps only HOME, PATH, ...: PYTHONPATH picks the code measured
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    return StdioServerParameters(command=str(Path(sys.executable).parent / "paratune"),
                                 args=["serve", "--ledger", str(tmp / f"{name}.sqlite"), "--allow-root", str(tmp)],
                                 env=env)


async def measure(calls: int, warmup: int, against: str | None = None) -> list[list[float]]:
    """Each server's round trips in ms (this code's first, then `against`'s), warm-up left out."""
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        workload, cluster = inputs(tmp)
        configs = layouts(warmup + calls)
        servers = [server(tmp, "ledger", None)] + ([] if against is None else [server(tmp, "against", against)])
        times: list[list[float]] = [[] for _ in servers]
        async with AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(Client(params)) for params in servers]
            for client in clients:
                opened = await client.call_tool("open_run", {"workload": str(workload), "cluster": str(cluster)})
                assert not opened.is_error, opened.content
            for i, config in enumerate(configs):
                turns = list(enumerate(clients))
                for k, client in turns[::-1] if i % 2 else turns:
                    start = time.perf_counter()
                    result = await client.call_tool("evaluate_simulate", {"config": config, "origin": "bench"})
                    elapsed = time.perf_counter() - start
                    assert not result.is_error and not result.structured_content["cached"], result.content
                    if i >= warmup:
                        times[k].append(elapsed * 1e3)
        return times


def percentiles(times: list[float]) -> str:
    return f"p50_ms={statistics.median(times):.2f} p95_ms={statistics.quantiles(times, n=20)[18]:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--against", metavar="PYTHONPATH", help="also time the code on this path, call by call")
    args = parser.parse_args()
    times, *against = anyio.run(measure, args.calls, args.warmup, args.against)
    for other in against:
        print(f"against: {percentiles(other)}")
    print(f"{len(times)} new-config evaluate_simulate calls over stdio: min {min(times):.2f} ms, "
          f"mean {statistics.fmean(times):.2f} ms, max {max(times):.2f} ms")
    print(percentiles(times))


if __name__ == "__main__":
    main()
