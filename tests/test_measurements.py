"""Learning from the user's cluster: `paratune measure` and the MCP `record_measurement` store what was
measured; later projections of the run carry `calibrated` beside the raw value, by factors checked
against hand derivations."""

from __future__ import annotations

import sqlite3
import subprocess

import anyio
import pytest
from mcp import Client, StdioServerParameters

from paratune.ledger import Ledger
from paratune.ledger import schema as ledger_schema
from paratune.ledger.models import Measurement
from paratune.oracle.evaluate import evaluate_simulate
from paratune.oracle.inputs import load_cluster, load_workload
from paratune.oracle.specs import EvalResult, TrialConfig
from paratune.planner.measurements import calibrate, fit

from .test_server_common import PARATUNE, in_process, portal_client, small_inputs


def _result(compute: float, other: float, tokens: float, memory: float = 50.0, act: float = 20.0) -> EvalResult:
    return EvalResult(legal=True, fits=True, iteration_ms=compute + other, tokens_per_s_per_gpu=tokens,
                      memory_per_gpu_gb=memory, activation_gb=act, memory_cap_gb=80.0, source="simulate",
                      breakdown={"time_compute_ms": compute, "time_recompute_ms": 0.0})


def _measured(tokens: float, peak: float | None = None, trial: int = 1) -> Measurement:
    return Measurement(id=trial, run_id=1, trial_id=trial, tokens_per_s_per_gpu=tokens, peak_memory_gib=peak, note="",
                       created="now")


def test_two_measurements_of_different_mix_recover_two_time_factors():
    # by hand: measured iteration = 1.2 x compute + 0.5 x other; tokens/s scale inversely with the iteration
    a, b = 1.2, 0.5
    r1, r2 = _result(800.0, 200.0, 1000.0), _result(500.0, 500.0, 1000.0)
    m1 = _measured(1000.0 * 1000.0 / (a * 800 + b * 200), peak=58.0)  # peak: 30 static + 1.4 x 20 activations
    m2 = _measured(1000.0 * 1000.0 / (a * 500 + b * 500), trial=2)
    f = fit([(r1, m1), (r2, m2)])
    assert (f.compute, f.other) == (pytest.approx(a), pytest.approx(b)) and "two time factors" in f.fit
    assert f.activations == pytest.approx(1.4)
    c = calibrate(_result(600.0, 400.0, 2000.0), f)  # a third layout: 600 x 1.2 + 400 x 0.5 = 920 ms
    assert c.iteration_ms == pytest.approx(920.0) and c.tokens_per_s_per_gpu == pytest.approx(2000.0 * 1000 / 920)
    assert c.memory_per_gpu_gb == pytest.approx(50.0 + 0.4 * 20.0) and c.fits


def test_alike_mixes_give_one_factor_and_no_measurement_gives_none():
    r1, r2 = _result(800.0, 200.0, 1000.0), _result(801.0, 199.0, 1000.0)
    f = fit([(r1, _measured(800.0)), (r2, _measured(900.0, trial=2))])
    assert f.compute == f.other == pytest.approx((1000 / 800 * 1000 / 900) ** 0.5) and "one time factor" in f.fit
    assert f.activations == 1.0 and fit([]) is None


def _tuned(tmp_path):
    workload, cluster = small_inputs(tmp_path / "inputs")
    out = tmp_path / "run"
    subprocess.run([PARATUNE, "tune", "--workload", str(workload), "--target-cluster", str(cluster), "--out-dir",
                    str(out), "--seed-only", "--seed-budget", "4"], capture_output=True, text=True, timeout=300,
                   check=True)
    with Ledger(out / "ledger.sqlite") as ledger:
        simulated = [t for t in ledger.trials(1) if t.fidelity == "simulate" and t.tokens_per_s_per_gpu]
    return workload, cluster, out, simulated[0]


def test_cli_measurement_calibrates_the_next_projection_of_a_neighbouring_layout(tmp_path):
    workload_file, cluster_file, out, measured = _tuned(tmp_path)
    tokens = 0.8 * measured.tokens_per_s_per_gpu  # the cluster ran 20 % slower than projected
    done = subprocess.run([PARATUNE, "measure", "--out-dir", str(out), "--trial", str(measured.id),
                           "--tokens-per-s-per-gpu", str(tokens), "--peak-memory-gib",
                           str(measured.memory_per_gpu_gb)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "one time factor" in done.stdout and "calibrated" in done.stdout
    # a neighbouring layout (another micro-batch), projected over MCP on the same run after the measurement
    params = StdioServerParameters(command=PARATUNE, args=["serve", "--workload", str(workload_file),
                                                           "--target-cluster", str(cluster_file),
                                                           "--ledger", str(out / "ledger.sqlite")])
    neighbour = {"mbs": 2 if measured.config["mbs"] == 1 else 1}

    async def session():
        async with Client(params) as client:
            return (await client.call_tool("evaluate_simulate", {"config": neighbour, "origin": "test"}),
                    await client.call_tool("get_history", {"k": 1000}))

    got, history = anyio.run(session)
    raw = evaluate_simulate(load_workload(workload_file), load_cluster(cluster_file), TrialConfig(**neighbour))
    data = got.structured_content
    assert data["result"]["tokens_per_s_per_gpu"] == pytest.approx(raw.tokens_per_s_per_gpu)  # the raw value is kept
    # one measurement: every time term x projected/measured = 1.25, so tokens/s x 0.8 (hand: 1 / 1.25)
    assert data["calibrated"]["tokens_per_s_per_gpu"] == pytest.approx(0.8 * raw.tokens_per_s_per_gpu)
    assert data["calibrated"]["factors"]["compute"] == pytest.approx(1.25)
    lines = history.structured_content["lines"]
    assert any(f"#{measured.id} " in line and f"measured {tokens:.1f}" in line for line in lines)
    with Ledger(out / "ledger.sqlite") as ledger:  # measured, calibrated and raw, all kept
        [m] = ledger.measurements(1)
        again = ledger.trial(1, measured.id)
        assert m.tokens_per_s_per_gpu == pytest.approx(tokens) and m.source == "measured"
        assert again.tokens_per_s_per_gpu == measured.tokens_per_s_per_gpu
        assert again.calibrated.tokens_per_s_per_gpu == pytest.approx(tokens)
        assert again.calibrated.memory_per_gpu_gb == pytest.approx(measured.memory_per_gpu_gb)
    bad = subprocess.run([PARATUNE, "measure", "--out-dir", str(out), "--trial", "9999", "--tokens-per-s-per-gpu", "1"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "no trial 9999" in bad.stderr and "Traceback" not in bad.stderr


def test_mcp_record_measurement_shows_measured_calibrated_and_raw(tmp_path):
    with in_process(tmp_path) as (server, session), portal_client(server) as (portal, client):
        def call(tool, **args):
            return portal.call(client.call_tool, tool, args)

        first = call("evaluate_simulate", config={}).structured_content
        assert first["calibrated"] is None  # no measurement yet
        rec = call("record_measurement", trial_id=first["trial_id"],
                   tokens_per_s_per_gpu=first["result"]["tokens_per_s_per_gpu"] / 2).structured_content
        assert rec["factors"]["compute"] == pytest.approx(2.0) and rec["measurement"]["source"] == "measured"
        assert rec["calibrated"]["tokens_per_s_per_gpu"] == pytest.approx(first["result"]["tokens_per_s_per_gpu"] / 2)
        best = call("get_best").structured_content
        assert best["result"]["tokens_per_s_per_gpu"] == first["result"]["tokens_per_s_per_gpu"]
        assert best["calibrated"]["tokens_per_s_per_gpu"] == pytest.approx(best["result"]["tokens_per_s_per_gpu"] / 2)
        assert [m["trial_id"] for m in best["measured"]] == [first["trial_id"]]
        wrong = call("record_measurement", trial_id=9999, tokens_per_s_per_gpu=100.0)
        assert wrong.is_error and "no trial 9999" in wrong.content[0].text
        negative = call("record_measurement", trial_id=first["trial_id"], tokens_per_s_per_gpu=-1.0)
        assert negative.is_error


def test_a_v2_ledger_gains_measurements_and_llm_outcomes_and_keeps_its_trials(tmp_path):
    workload, cluster = small_inputs(tmp_path / "inputs")
    path = tmp_path / "old.sqlite"
    w, c = load_workload(workload), load_cluster(cluster)
    with Ledger(path) as led:  # a run with one trial, then taken back to schema v2 (before measurements)
        run = led.open_run(w, c)
        cfg = w.effective()
        led.record_trial(run.id, cfg, evaluate_simulate(w, c), fidelity="simulate", wall_ms=1.0, origin="old")
    raw = sqlite3.connect(path)
    raw.executescript("DROP TABLE measurements; DROP INDEX trials_by_run; "
                      "ALTER TABLE trials DROP COLUMN calibrated_json; "
                      "ALTER TABLE llm_calls DROP COLUMN outcome; PRAGMA user_version = 2;")
    raw.close()
    assert len(ledger_schema.MIGRATIONS) == 4
    with Ledger(path) as led:
        [t] = led.trials(run.id)
        assert t.origin == "old" and t.calibrated is None and led.measurements(run.id) == []
        led.record_measurement(run.id, t.id, 100.0)
        assert [m.trial_id for m in led.measurements(run.id)] == [t.id]
        call = led.record_llm_call(run.id, model="m", prompt_tokens=0, completion_tokens=0, outcome="timeout")
        assert call.outcome == "timeout"
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 4
    raw.close()
