"""Instructions per memory-only evaluation, counted by valgrind (callgrind): a figure the machine's
noise cannot move, for comparing two versions of the oracle.

Runs the same script twice under callgrind, once evaluating the first N grid points of each shipped
example (the grid of oracle_speed.py) and once evaluating none; the difference over the number of
evaluations is the cost of one. Needs `valgrind` (Debian: apt-get install valgrind); takes ~2 minutes.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PER_EXAMPLE = 1000

WORKLOAD = f"""
import sys
sys.path.insert(0, {str(HERE)!r})
from oracle_speed import grid
from shipped import shipped
from paratune.oracle.evaluate import evaluate_memory_only
n, done = int(sys.argv[1]), 0
for workload, cluster in shipped():
    trials = grid(workload, cluster, 3000)[:n]
    for trial in trials:
        evaluate_memory_only(workload, cluster, trial)
    done += len(trials)
print(done)
"""


def instructions(n: int) -> tuple[int, int]:
    """(instructions executed, evaluations made) of the script evaluating `n` points per example."""
    proc = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                           sys.executable, "-c", WORKLOAD, str(n)], capture_output=True, text=True, check=True)
    return int(re.search(r"Collected : (\d+)", proc.stderr).group(1)), int(proc.stdout.split()[-1])


def main() -> None:
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (Debian: apt-get install valgrind)")
    base, _ = instructions(0)
    total, evaluations = instructions(PER_EXAMPLE)
    print(f"evaluations={evaluations}")
    print(f"instructions_per_memory_eval={(total - base) // evaluations}")


if __name__ == "__main__":
    main()
