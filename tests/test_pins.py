"""Pins that cannot be met fail loudly: each is named with why (legal values, rule codes), contradicting
pins are refused, and `tune` exits non-zero instead of printing "no legal layout" and 0."""

from __future__ import annotations

import subprocess

import pytest

from paratune.oracle.inputs import load_cluster, load_workload
from paratune.oracle.specs.search import SearchConstraints
from paratune.planner.search.pins import pin_problems

from .conftest import EXAMPLES
from .test_server_common import PARATUNE

LLAMA70B = EXAMPLES / "workloads" / "llama3-70b-h100.yaml"
H100_8N = EXAMPLES / "clusters" / "h100-8n.yaml"


def _pinned(fix: dict, stack: str | None = None):
    c = load_cluster(H100_8N)
    update: dict = {"search": SearchConstraints(fix=fix)}
    if stack:
        update["stack"] = stack
    return load_workload(LLAMA70B), c.model_copy(update=update)


@pytest.mark.parametrize(("fix", "stack", "fragments"), [
    # 64 heads, 8 query groups, hidden 8192 on 64 GPUs: TP must divide 8 (the query groups) -> 1, 2, 4, 8
    ({"tp": 3}, None, ["tp=3: the legal values on 64 GPUs are 1, 2, 4, 8", "[tp_num_query_groups]"]),
    # dense Llama: no experts, so EP is 1
    ({"ep": 32}, None, ["ep=32: the legal values on 64 GPUs are 1"]),
    # GBS 128 at DP 2 (TP4 PP4 CP2): MBS x DP must divide 128, and MBS 3 divides no power of two
    ({"mbs": 3}, None, ["mbs=3:", "[gbs_mbs_dp]"]),
    # sync-free MoE stages are a Primus knob: Megatron-Bridge has none
    ({"sync_free_stage": 1}, "megatron-bridge", ["sync_free_stage=1:", "megatron-bridge"]),
])
def test_each_unsatisfiable_pin_is_named_with_why(fix, stack, fragments):
    [problem] = pin_problems(*_pinned(fix, stack))
    for fragment in fragments:
        assert fragment in problem


def test_a_satisfiable_pin_is_no_problem():
    assert pin_problems(*_pinned({"tp": 8, "pp": 2})) == []


def _tune(tmp_path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([PARATUNE, "tune", "--workload", str(LLAMA70B), "--target-cluster", str(H100_8N),
                           "--out-dir", str(tmp_path), "--seed-only", "--seed-budget", "2", *extra],
                          capture_output=True, text=True, timeout=300)


def test_tune_with_an_impossible_pin_exits_2_naming_it(tmp_path):
    done = _tune(tmp_path, "--fix", "tp=3")
    assert done.returncode == 2 and "--fix tp" in done.stderr and "tp=3" in done.stderr
    assert "Traceback" not in done.stderr and "no legal layout that fits was found" not in done.stdout
    twice = _tune(tmp_path, "--fix", "tp=2", "--fix", "tp=4")
    assert twice.returncode == 2 and "tp is pinned twice (2 and 4)" in twice.stderr


def test_pins_each_possible_but_impossible_together_fail_naming_them(tmp_path):
    # FSDP2 needs PP 1 and excludes the distributed optimizer; at PP 1, TP 1 and CP 1 Llama 3 70B needs more
    # than 80 GB per GPU: each pin is legal on its own, together nothing fits
    done = _tune(tmp_path / "out", "--fix", "use_torch_fsdp2=true", "--fix", "tp=1", "--fix", "cp=1",
                 "--fix", "pp=1", "--fix", "recompute_granularity=none")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no legal layout that fits meets the pins" in done.stderr and "use_torch_fsdp2=True" in done.stderr
