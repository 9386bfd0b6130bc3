"""MCP refusals: wall time of the audit's reproducers over stdio (tests/test_server_limits.py asserts what
they answer; their times are measured here, not asserted there).

Starts `paratune serve` on the Llama 3 8B example with a fresh ledger and the temporary folder as its only
allowed root, then repeats each request and prints its median: `evaluate_simulate` with PP = 2^64+1 (refused
by the knob bounds), `open_run` with a 1 MB path (refused by the path checks), and `open_run` of a workload
that extends a FIFO named config.json (refused without waiting for a writer). Last line:
`pp_ms=X path_ms=Y fifo_ms=Z` (medians; each well under a second is the intent).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "examples" / "workloads" / "llama3-8b-mi300x.yaml"
CLUSTER = ROOT / "examples" / "clusters" / "mi300x-1n.yaml"


async def measure(repeats: int) -> dict[str, list[float]]:
    """Each reproducer's wall times in ms, `repeats` of each after one warm-up call."""
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        os.mkfifo(tmp / "config.json")
        (tmp / "fifo.yaml").write_text("extends: config.json\nglobal_batch_size: 8\n")
        params = StdioServerParameters(
            command=str(Path(sys.executable).parent / "paratune"), cwd=str(tmp),
            args=["serve", "--workload", str(WORKLOAD), "--target-cluster", str(CLUSTER),
                  "--ledger", str(tmp / "ledger.sqlite"), "--allow-root", str(tmp), "--allow-root", str(ROOT)])
        calls = {"pp": ("evaluate_simulate", {"config": {"pp": 2**64 + 1}}, "config.pp"),
                 "path": ("open_run", {"workload": "a/" * 500_000, "cluster": str(CLUSTER)}, "over the system's limit"),
                 "fifo": ("open_run", {"workload": str(tmp / "fifo.yaml"), "cluster": str(CLUSTER)},
                          "not a regular file")}
        times: dict[str, list[float]] = {name: [] for name in calls}
        async with Client(params) as client:
            await client.call_tool("get_budget_status", {})  # the server's imports, out of the timings
            for name, (tool, arguments, words) in calls.items():
                for i in range(repeats + 1):
                    start = time.perf_counter()
                    result = await client.call_tool(tool, arguments)
                    elapsed = time.perf_counter() - start
                    assert result.is_error and words in result.content[0].text, (name, result.content)
                    if i:
                        times[name].append(elapsed * 1e3)
        return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    times = anyio.run(measure, args.repeats)
    for name, ms in times.items():
        print(f"{name}: {len(ms)} calls, min {min(ms):.2f} ms, median {statistics.median(ms):.2f} ms, "
              f"max {max(ms):.2f} ms")
    print(" ".join(f"{name}_ms={statistics.median(ms):.2f}" for name, ms in times.items()))


if __name__ == "__main__":
    main()
