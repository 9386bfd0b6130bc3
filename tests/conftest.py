"""Shared fixtures: the shipped examples and paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from paratune.oracle.inputs import load_cluster, load_workload

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
CALIBRATION_DATA = ROOT / "calibration" / "data"

# Each shipped workload with the cluster it was written for.
EXAMPLE_PAIRS = {
    "mixtral": ("mixtral-8x22b-mi355x.yaml", "mi355x-4n.yaml"),
    "llama70b": ("llama3-70b-h100.yaml", "h100-8n.yaml"),
    "deepseek": ("deepseek-v3-h100.yaml", "h100-32n.yaml"),
    "llama8b": ("llama3-8b-mi300x.yaml", "mi300x-1n.yaml"),
}


def example(name: str):
    """(workload, cluster) of a shipped example."""
    w, c = EXAMPLE_PAIRS[name]
    return load_workload(EXAMPLES / "workloads" / w), load_cluster(EXAMPLES / "clusters" / c)


@pytest.fixture(params=sorted(EXAMPLE_PAIRS))
def shipped(request):
    return example(request.param)
