"""The `paratune project` CLI as a user runs it: the installed console script in a subprocess."""

from __future__ import annotations

import json
import subprocess

import pytest

from .conftest import EXAMPLES, PARATUNE

MIXTRAL = ["--workload", str(EXAMPLES / "workloads" / "mixtral-8x22b-mi355x.yaml"),
           "--target-cluster", str(EXAMPLES / "clusters" / "mi355x-4n.yaml")]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PARATUNE, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("kind", ["memory", "performance"])
def test_json_is_exactly_one_eval_result(kind):
    proc = run("project", kind, *MIXTRAL, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)  # one object, nothing else on stdout
    assert result["legal"] is True and result["config"]["ep"] == 8
    assert result["source"] == ("simulate" if kind == "performance" else "memory_only")
    assert (result["tokens_per_s_per_gpu"] is None) == (kind == "memory")


def test_table_output_shows_breakdown():
    proc = run("project", "memory", *MIXTRAL)
    assert proc.returncode == 0, proc.stderr
    assert "memory per GPU" in proc.stdout and "mem_weights" in proc.stdout


def test_illegal_config_still_exits_zero_with_reasons():
    proc = run("project", "memory", *MIXTRAL, "--set", "tp=3", "--set", "ep=3", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["legal"] is False
    assert {"tp_num_query_groups", "ep_experts"} <= {v["code"] for v in result["violations"]}


def test_config_json_and_set_combine():
    proc = run("project", "memory", *MIXTRAL, "--config", '{"pp": 8, "mbs": 1}', "--set", "mbs=2", "--json")
    cfg = json.loads(proc.stdout)["config"]
    assert (cfg["pp"], cfg["mbs"]) == (8, 2)


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--set", "tpp=2"], "--set: tpp: unknown key; did you mean 'tp'?"),
        (["--set", "tp=two"], "--set: tp:"),
        (["--config", "{not json"], "--config: not valid JSON"),
        (["--set", "recompute_granularity=sometimes"], "--set: recompute_granularity:"),
    ],
)
def test_bad_knobs_exit_2_with_one_line(extra, fragment):
    proc = run("project", "memory", *MIXTRAL, *extra)
    assert proc.returncode == 2
    assert fragment in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_missing_files_exit_2(tmp_path):
    proc = run("project", "memory", "--workload", str(tmp_path / "none.yaml"),
               "--target-cluster", str(EXAMPLES / "clusters" / "mi355x-4n.yaml"))
    assert proc.returncode == 2
    assert f"{tmp_path / 'none.yaml'}: file not found" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_malformed_yaml_reports_line_and_column(tmp_path):
    bad = tmp_path / "w.yaml"
    bad.write_text("extends: llama3-8b\nseq_length: 4096\n  micro_batch_size: 2\n")
    proc = run("project", "memory", "--workload", str(bad), "--target-cluster",
               str(EXAMPLES / "clusters" / "mi300x-1n.yaml"))
    assert proc.returncode == 2
    assert "malformed YAML at line 3, column" in proc.stderr and str(bad) in proc.stderr
