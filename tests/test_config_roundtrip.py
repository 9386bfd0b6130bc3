"""A layout paratune prints is accepted back: `--config` takes an EvalResult's whole `config` (inline,
however long, as @file or on stdin) or a trial's workload file and reproduces the same layout, a
history line's words are `--set` arguments, the MCP tools take a printed layout as `config`; a
workload setting that differs from the workload's is refused naming the key."""

from __future__ import annotations

import json
import subprocess

import pytest

from paratune.ledger import Ledger, history_lines
from paratune.oracle.errors import InputError
from paratune.oracle.inputs import load_workload
from paratune.planner.cli.trial_args import trial_from_args

from .conftest import EXAMPLES
from .test_server_common import PARATUNE, in_process, portal_client

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


def test_every_printed_form_of_a_runs_trials_gives_their_layout_back(tmp_path):
    """A seed-only run of the README's Mixtral recipe: each trial's history line (as --set words), its
    trials/<id>.yaml and its trials.jsonl config (as --config) resolve to the trial's own layout."""
    workload = EXAMPLES / "workloads" / "mixtral-8x22b-mi355x-recipe.yaml"
    subprocess.run([PARATUNE, "tune", "--workload", str(workload), "--target-cluster",
                    str(EXAMPLES / "clusters" / "mi355x-4n.yaml"), "--out-dir", str(tmp_path), "--seed-only"],
                   capture_output=True, text=True, timeout=300, check=True)
    w = load_workload(workload)
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        trials = {t.id: t for t in ledger.trials(1)}
        lines = history_lines(ledger, 1, w.effective())
    assert len(lines) == len(trials) > 20
    for line in lines:
        head, _, _ = line.partition(" | ")
        number, _, words = head.partition(": ")
        trial = trials[int(number.split()[0][1:])]
        sets = [] if words == "baseline" else words.split()
        assert w.effective(trial_from_args(None, sets, w)).key == trial.config_key, line
        yaml_file = tmp_path / "trials" / f"{trial.id}.yaml"
        assert w.effective(trial_from_args(str(yaml_file), None, w)).key == trial.config_key
        assert w.effective(trial_from_args(json.dumps(trial.config), None, w)).key == trial.config_key
    other = load_workload(EXAMPLES / "workloads" / "llama3-70b-h100.yaml")
    with pytest.raises(InputError, match="model differs"):
        trial_from_args(str(tmp_path / "trials" / "1.yaml"), None, other)


def test_mcp_tools_take_a_printed_layout_back(tmp_path):
    with in_process(tmp_path) as (server, session), portal_client(server) as (portal, client):
        def call(tool, **args):
            return portal.call(client.call_tool, tool, args)

        first = call("evaluate_simulate", config={"mbs": 2}).structured_content
        again = call("evaluate_simulate", config=first["result"]["config"]).structured_content
        assert again["cached"] and again["trial_id"] == first["trial_id"]
        check = call("validate_config", config=first["result"]["config"]).structured_content
        assert check["config_key"] == first["result"]["config_key"]
        wrong = call("evaluate_memory_only", config={**first["result"]["config"], "seq_length": 1024})
        assert wrong.is_error and "seq_length" in wrong.content[0].text
        x = call("explain", to_config=first["result"]["config"]).structured_content
        assert x["winner"]["config_key"] == first["result"]["config_key"]
        step = call("evaluate_simulate", config=x["steps"][0]["knobs"]).structured_content  # explain's own knobs
        assert step["result"]["legal"] is x["steps"][0]["legal"]
