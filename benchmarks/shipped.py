"""The shipped examples the benchmarks measure: each workload with the cluster it was written for."""

from __future__ import annotations

from pathlib import Path

from paratune.oracle.inputs import load_cluster, load_workload
from paratune.oracle.specs import ClusterSpec, Workload

ROOT = Path(__file__).resolve().parents[1]

PAIRS = [
    ("mixtral-8x22b-mi355x.yaml", "mi355x-4n.yaml"),
    ("llama3-70b-h100.yaml", "h100-8n.yaml"),
    ("deepseek-v3-h100.yaml", "h100-32n.yaml"),
    ("llama3-8b-mi300x.yaml", "mi300x-1n.yaml"),
]


def shipped() -> list[tuple[Workload, ClusterSpec]]:
    """(workload, cluster) of every shipped example, in a fixed order."""
    return [(load_workload(ROOT / "examples" / "workloads" / w), load_cluster(ROOT / "examples" / "clusters" / c))
            for w, c in PAIRS]
