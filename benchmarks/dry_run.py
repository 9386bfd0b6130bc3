"""The offline dry run's wall time: `paratune tune --dry-run` on the Mixtral example (seed plan, scripted
LLM phase through the MCP server, artifacts), REPEATS runs each in a fresh process (tests/test_tune.py
checks what the run does; its time is measured here). Prints each run's seconds, then the median.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARATUNE = str(Path(sys.executable).parent / "paratune")
REPEATS = 5


def once() -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("LLM_MODEL", "OPENAI_API_KEY", "OPENAI_API_BASE")}
    with tempfile.TemporaryDirectory() as out:
        start = time.monotonic()
        subprocess.run([PARATUNE, "tune", "--workload", str(ROOT / "examples/workloads/mixtral-8x22b-mi355x.yaml"),
                        "--target-cluster", str(ROOT / "examples/clusters/mi355x-4n.yaml"), "--out-dir", out,
                        "--dry-run"], check=True, capture_output=True, env=env, timeout=600)
        return time.monotonic() - start


def main() -> None:
    runs = []
    for _ in range(REPEATS):
        runs.append(once())
        print(f"dry run: {runs[-1]:.1f} s", flush=True)
    print(f"median dry run: {statistics.median(runs):.1f} s over {REPEATS} runs")


if __name__ == "__main__":
    main()
