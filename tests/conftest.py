"""Shared fixtures: the shipped examples and paths."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from paratune.oracle.inputs import load_cluster, load_workload

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
CALIBRATION_DATA = ROOT / "calibration" / "data"
PARATUNE = str(Path(sys.executable).parent / "paratune")  # the console script of the venv running the tests

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


# The files that take longest, first (seconds summed per file from `pytest --durations=0`, issue 29): with
# `--dist loadfile --no-loadscope-reorder` (pyproject addopts) a worker takes a whole file at a time in this
# order, so a long file is started early instead of being the run's tail on one worker while the other waits.
# A file not listed keeps its place after these; a stale list costs balance, never a test.
SLOWEST_FIRST = ("test_llm_phase_bounds.py", "test_tune.py", "test_conformance.py", "test_measurements.py",
                 "test_server_llm_bounds.py", "test_stack_search.py", "test_investigator.py",
                 "test_investigator_litellm.py", "test_server_hardening.py", "test_explain.py", "test_hot_path.py",
                 "test_cli.py", "test_config_roundtrip.py", "test_dry_run_examples.py", "test_performance.py",
                 "test_space_is_legal_set.py", "test_server_fuzz.py", "test_search.py", "test_benchmark.py",
                 "test_server_transports.py", "test_array_oracle.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the files of SLOWEST_FIRST first, in its order (a stable sort: each file's tests keep theirs)."""
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(params=sorted(EXAMPLE_PAIRS))
def shipped(request):
    return example(request.param)
