"""History at scale: wall time of `get_history(k=5)` and of one trials-resource page on a run of 10,000
trials, over `paratune serve` on stdio (client to server and back).

Builds a ledger whose run holds TRIALS trials (one real EvalResult, stored under distinct layouts), then
calls get_history(k=5) and reads `paratune://runs/<id>/trials` (its first page) repeatedly. Last line:
`history_p50_ms=X history_p95_ms=Y page_p50_ms=Z trials=N` (target: history p50 <= 10 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

from paratune.ledger import Ledger
from paratune.oracle.evaluate import evaluate_simulate
from paratune.server.paths import AllowedRoots
from paratune.server.session import Session

ROOT = Path(__file__).resolve().parents[1]

WORKLOAD = ROOT / "examples" / "workloads" / "llama3-8b-mi300x.yaml"
CLUSTER = ROOT / "examples" / "clusters" / "mi300x-1n.yaml"
PARATUNE = str(Path(sys.executable).parent / "paratune")


def fill(path: Path, trials: int) -> None:
    """A ledger with one run of `trials` trials (distinct keys, one real result), written in one go: the run that
    `serve --workload --target-cluster` resumes, opened as the server opens it (the workload pinned to the cluster's
    stack, so its stored form, and hash, is the server's)."""
    with Ledger(path) as ledger:
        active = Session(ledger, AllowedRoots([])).open_run(WORKLOAD, CLUSTER, confined=False)
        w, c = active.workload, active.cluster
        result = evaluate_simulate(w, c).model_dump_json()
        cfg = json.dumps(w.effective().model_dump(mode="json"), sort_keys=True)
        conn = ledger._conn  # bulk insert: the benchmark's set-up, not the code under test
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO trials (run_id, config_key, config_json, fidelity, result_json, legal, fits, "
            "tokens_per_s_per_gpu, memory_per_gpu_gb, wall_ms, origin) VALUES (?, ?, ?, 'simulate', ?, 1, 1, ?, 40.0, "
            "1.0, 'bench')", [(active.run.id, f"k{i}", cfg, result, 1000.0 + i) for i in range(trials)])
        conn.execute("COMMIT")


async def measure(ledger: Path, calls: int) -> tuple[list[float], list[float], int]:
    params = StdioServerParameters(
        command=PARATUNE, args=["serve", "--workload", str(WORKLOAD), "--target-cluster", str(CLUSTER), "--ledger",
                                str(ledger)],
        env=dict(os.environ))  # the SDK's default keeps only HOME, PATH, ...: PYTHONPATH picks the code measured
    history, page = [], []
    async with Client(params) as client:
        first = await client.call_tool("get_history", {"k": 5})
        total = first.structured_content["total_trials"]
        run_id = first.structured_content["run_id"]
        for _ in range(calls):
            t = time.perf_counter()
            await client.call_tool("get_history", {"k": 5})
            history.append((time.perf_counter() - t) * 1e3)
            t = time.perf_counter()
            await client.read_resource(f"paratune://runs/{run_id}/trials")
            page.append((time.perf_counter() - t) * 1e3)
    return history, page, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.sqlite"
        fill(path, args.trials)
        history, page, total = anyio.run(measure, path, args.calls)
    assert total == args.trials, f"the server's run holds {total} trials, not the {args.trials} written"
    q = statistics.quantiles(history, n=20)
    print(f"history_p50_ms={statistics.median(history):.2f} history_p95_ms={q[18]:.2f} "
          f"page_p50_ms={statistics.median(page):.2f} trials={total}")


if __name__ == "__main__":
    main()
