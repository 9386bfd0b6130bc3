"""A layout paratune prints is accepted back: `--config` takes an EvalResult's whole `config` (inline,
however long, as @file or on stdin) and reproduces the same layout; a workload setting that differs
from the workload's is refused naming the key."""

from __future__ import annotations

import json
import subprocess

from .conftest import EXAMPLES
from .test_server_common import PARATUNE

BASE = [PARATUNE, "project", "memory", "--json", "--workload", str(EXAMPLES / "workloads" / "deepseek-v3-h100.yaml"),
        "--target-cluster", str(EXAMPLES / "clusters" / "h100-32n.yaml")]


def _run(*extra: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*BASE, *extra], input=stdin, capture_output=True, text=True, timeout=120, check=False)


def test_a_printed_layout_round_trips_through_config(tmp_path):
    first = json.loads(_run("--set", "vpp=2", "--set", "pp_layout=none", "--set", "pp_last_layers=5",
                            "--set", "recompute_granularity=none").stdout)
    layout = json.dumps(first["config"])
    assert len(layout) > 255  # longer than a file name may be
    inline = json.loads(_run("--config", layout).stdout)
    assert inline["config_key"] == first["config_key"] and inline["config"] == first["config"]
    path = tmp_path / "winner.json"
    path.write_text(layout)
    assert json.loads(_run("--config", f"@{path}").stdout)["config_key"] == first["config_key"]
    assert json.loads(_run("--config", "-", stdin=layout).stdout)["config_key"] == first["config_key"]
    # --set still wins over the layout it is given with
    assert json.loads(_run("--config", layout, "--set", "mbs=2").stdout)["config"]["mbs"] == 2


def test_a_workload_setting_in_a_config_is_refused_naming_the_key():
    layout = json.loads(_run().stdout)["config"]
    proc = _run("--config", json.dumps({**layout, "seq_length": 8192}))
    assert proc.returncode == 2 and "seq_length" in proc.stderr and "Traceback" not in proc.stderr
