"""Learning from the user's cluster: `paratune measure` and the MCP `record_measurement` store what was
measured; later projections of the run carry `calibrated` beside the raw value, by factors checked
against hand derivations."""

from __future__ import annotations

import json
import math
import os
import sqlite3
import subprocess

import anyio
import pytest
from mcp import Client, StdioServerParameters

from paratune.ledger import Ledger
from paratune.ledger import schema as ledger_schema
from paratune.ledger.models import Measurement, TrialRecord
from paratune.oracle.errors import InputError
from paratune.oracle.evaluate import evaluate_simulate
from paratune.oracle.inputs import load_cluster, load_workload
from paratune.oracle.specs import EvalResult, TrialConfig
from paratune.planner.cli import main
from paratune.planner.run.measurements import adopt, as_measured, calibrate, check_figures, fit, record

from .conftest import EXAMPLES
from .test_server_common import PARATUNE, in_process, portal_client, small_inputs


def _trial(i: int, compute: float, other: float, tokens: float, memory: float = 50.0, act: float = 20.0,
           fits: bool = True) -> TrialRecord:
    r = EvalResult(legal=True, fits=fits, iteration_ms=compute + other, tokens_per_s_per_gpu=tokens,
                   memory_per_gpu_gb=memory, activation_gb=act, memory_cap_gb=80.0, source="simulate", mfu=0.5,
                   breakdown={"time_compute_ms": compute, "time_recompute_ms": 0.0})
    return TrialRecord(id=i, run_id=1, config_key=f"k{i}", config={}, fidelity="simulate", result=r, legal=True,
                       fits=fits, tokens_per_s_per_gpu=tokens, memory_per_gpu_gb=memory, wall_ms=0.0, origin="t",
                       created="now")


def _measured(tokens: float, peak: float | None = None, trial: int = 1) -> list[Measurement]:
    return [Measurement(id=trial, run_id=1, trial_id=trial, tokens_per_s_per_gpu=tokens, peak_memory_gib=peak,
                        note="", created="now")]


def test_one_bad_measurement_does_not_move_the_factor_and_its_residual_shows():
    # by hand: two layouts ran 20 % slower than projected (iteration x 1.25), a third 3x slower (a bad run);
    # the median of the three iteration ratios (1.25, 1.25, 3.0) is 1.25
    t1, t2, t3 = _trial(1, 800.0, 200.0, 1000.0), _trial(2, 500.0, 500.0, 1200.0), _trial(3, 600.0, 400.0, 900.0)
    f = fit([(t1, _measured(800.0, peak=58.0)), (t2, _measured(960.0, trial=2)), (t3, _measured(300.0, trial=3))])
    assert f.compute == f.other == pytest.approx(1.25) and "one time factor" in f.fit and "median of 3" in f.fit
    # residual = measured / calibrated - 1: 300 / (900 / 1.25) - 1 = -58.3 %; the others 0
    assert f.residuals == {1: pytest.approx(0.0), 2: pytest.approx(0.0), 3: pytest.approx(300 / 720 - 1)}
    assert "#3 -58.3%" in f.fit
    assert f.activations == pytest.approx(1.4)  # peak 58 = 30 static + 1.4 x 20 activations
    c = calibrate(_trial(4, 600.0, 400.0, 2000.0).result, f)  # a fourth layout: 1000 ms x 1.25
    assert c.iteration_ms == pytest.approx(1250.0) and c.tokens_per_s_per_gpu == pytest.approx(1600.0)
    assert c.memory_per_gpu_gb == pytest.approx(50.0 + 0.4 * 20.0) and c.fits
    # two measurements that differ in mix (the "communication 38 % cheaper" case) still give one factor:
    # the geometric mean of the two iteration ratios, 1000/800 and 1200/1000
    two = fit([(t1, _measured(800.0)), (t2, _measured(1000.0, trial=2))])
    assert two.compute == two.other == pytest.approx((1.25 * 1.2) ** 0.5) and two.activations == 1.0
    assert fit([]) is None


def test_a_layout_that_ran_although_projected_not_to_fit_is_accepted_and_says_so():
    over = _trial(1, 800.0, 200.0, 1000.0, memory=90.0, act=40.0, fits=False)
    measured = _measured(1000.0, peak=70.0)
    f = fit([(over, measured)])
    assert f.activations == pytest.approx((70.0 - 50.0) / 40.0)  # the disagreement calibrates memory
    assert "ran although projected not to fit: #1 (90.0 GiB projected, cap 80.0)" in f.fit
    shown = as_measured(over, measured, f)
    assert shown.measured and shown.fits and shown.memory_per_gpu_gb == 70.0 and shown.tokens_per_s_per_gpu == 1000.0


@pytest.mark.parametrize(("tokens", "peak", "key"), [
    (math.inf, None, "tokens_per_s_per_gpu"), (math.nan, None, "tokens_per_s_per_gpu"),
    (0.0, None, "tokens_per_s_per_gpu"),
    (2001.0, None, "tokens_per_s_per_gpu"),  # projected 1,000 at MFU 0.5: the dense peak gives 2,000
    (1000.0, 500.0, "peak_memory_gib"), (1000.0, math.inf, "peak_memory_gib")])
def test_figures_no_run_can_produce_are_refused(tokens, peak, key):
    cluster = load_cluster(EXAMPLES / "clusters" / "h100-8n.yaml")  # 80 GB of HBM per GPU
    with pytest.raises(InputError) as err:
        check_figures(_trial(1, 800.0, 200.0, 1000.0).result, cluster, tokens, peak)
    assert err.value.key == key
    check_figures(_trial(1, 800.0, 200.0, 1000.0).result, cluster, 2000.0, 80.0)  # at the bounds: accepted


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
    assert "one time factor" in done.stdout and "calibration:" in done.stdout
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


def test_measuring_the_recipe_above_the_pick_makes_the_recipe_the_pick_in_summary_and_over_mcp(tmp_path, capsys):
    """The issue's scenario, Llama 3 70B on 64 H100: the oracle picks a layout over the recipe (the workload's
    own layout); the cluster measures the pick at 1,600 tokens/s/GPU and the recipe at 1,664. The pick is then
    the recipe, in summary.json (rewritten by `paratune measure`) and in get_best over MCP. Figures no run can
    produce exit 2 and store nothing. `paratune measure` runs in this process (the CLI's main with its argv:
    the console script is `sys.exit(main())`); the test above runs it as the installed script."""
    workload, cluster, out = EXAMPLES / "workloads" / "llama3-70b-h100.yaml", EXAMPLES / "clusters" / "h100-8n.yaml", \
        tmp_path / "run"
    subprocess.run([PARATUNE, "tune", "--workload", str(workload), "--target-cluster", str(cluster), "--out-dir",
                    str(out), "--seed-only", "--seed-budget", "30"], capture_output=True, text=True, timeout=300,
                   check=True)
    before = json.loads((out / "summary.json").read_text())
    recipe, pick = before["pick"]["own_trial_id"], before["winner_trial_id"]
    assert recipe is not None and pick != recipe  # projected above the recipe

    def measure(trial: int, tokens: str, *extra: str) -> tuple[int, str, str]:
        """(exit code, stdout, stderr) of `paratune measure` on the run."""
        capsys.readouterr()
        code = main(["measure", "--out-dir", str(out), "--trial", str(trial), "--tokens-per-s-per-gpu", tokens, *extra])
        said = capsys.readouterr()
        return code, said.out, said.err

    for args, key in ((("inf",), "tokens_per_s_per_gpu"), (("1600", "--peak-memory-gib", "500"), "peak_memory_gib"),
                      (("160000",), "tokens_per_s_per_gpu")):  # 100x: above the H100's dense peak
        code, _, err = measure(pick, *args)
        assert code == 2 and key in err and "internal error" not in err, err
    assert measure(pick, "1600")[0] == 0
    code, said, err = measure(recipe, "1664")
    assert code == 0 and f"pick now trial {recipe}" in said, said + err
    after = json.loads((out / "summary.json").read_text())
    assert after["winner_trial_id"] == recipe and after["winner_calibrated"]["measured"]
    assert after["winner_calibrated"]["tokens_per_s_per_gpu"] == pytest.approx(1664.0)
    assert [m["tokens_per_s_per_gpu"] for m in after["measurements"]] == [1600.0, 1664.0]  # the refused: not stored
    params = StdioServerParameters(command=PARATUNE, args=["serve", "--workload", str(workload), "--target-cluster",
                                                           str(cluster), "--ledger", str(out / "ledger.sqlite")],
                                   env=dict(os.environ))  # the server imports what this process imports

    async def best():
        async with Client(params) as client:
            return await client.call_tool("get_best", {})

    got = anyio.run(best).structured_content
    assert got["trial_id"] == recipe and got["calibrated"]["measured"]
    assert [m["tokens_per_s_per_gpu"] for m in got["measured"]] == [1664.0]


def test_measurements_carry_into_a_new_run_of_the_same_model_and_cluster_and_say_so(tmp_path):
    workload_file, cluster_file = small_inputs(tmp_path / "inputs")
    w, c = load_workload(workload_file), load_cluster(cluster_file)
    with Ledger(tmp_path / "a.sqlite") as led:
        first = led.open_run(w, c)
        trial = led.record_trial(first.id, w.effective(), evaluate_simulate(w, c), fidelity="simulate", wall_ms=0.0,
                                 origin="baseline")
        record(led, first.id, trial.id, 0.8 * trial.tokens_per_s_per_gpu, note="job 1")
        # a new run of the same model on the same cluster, with another batch: same pair, so the measurement counts
        other = w.model_copy(update={"training": w.training.model_copy(update={"global_batch_size": 16})})
        second = led.open_run(other, c, resume=False)
        got = adopt(led, second.id)
        assert (got.found, got.used) == (1, 1) and got.line().startswith("measurements: using 1 of 1")
        [m] = led.measurements(second.id)
        copied = led.trial(second.id, m.trial_id)
        assert copied.config_key == trial.config_key and m.tokens_per_s_per_gpu == 0.8 * trial.tokens_per_s_per_gpu
        assert copied.calibrated.measured and f"run {first.id} measurement" in m.note and m.note.endswith("job 1")
        assert adopt(led, second.id).used == 1 and len(led.measurements(second.id)) == 1  # not copied twice
        # another cluster (four GPUs, not two) is another pair
        bigger = c.model_copy(update={"gpus_per_node": 4})
        third = led.open_run(w, bigger, resume=False)
        assert adopt(led, third.id).found == 0
        # --calibration-from: the same measurement read from another tune folder's ledger
        with Ledger(tmp_path / "b.sqlite") as fresh:
            run = fresh.open_run(w, c)
            assert adopt(fresh, run.id, led).used == 1 and len(fresh.measurements(run.id)) == 1


def test_mcp_open_run_takes_the_pairs_earlier_measurements_and_says_how_many_over_stdio(tmp_path):
    """Measurements belong to the model and cluster (issue 25 item 1), over MCP too: a layout measured at 80 % of
    its projection in one run is, in a new run of the same pair that `open_run` opens (from the server ledger's
    earlier run, or from another tune folder given as calibration_from), ranked by that measurement, and
    open_run says it used 1 measurement. A folder without a ledger is an error naming calibration_from."""
    workload_file, cluster_file = small_inputs(tmp_path / "inputs")
    w, c = load_workload(workload_file), load_cluster(cluster_file)
    (tmp_path / "measured").mkdir()
    with Ledger(tmp_path / "measured" / "ledger.sqlite") as led:
        first = led.open_run(w, c)
        trial = led.record_trial(first.id, w.effective(), evaluate_simulate(w, c), fidelity="simulate", wall_ms=0.0,
                                 origin="baseline")
        record(led, first.id, trial.id, 0.8 * trial.tokens_per_s_per_gpu, note="job 1")
    inputs = {"workload": "inputs/workload.yaml", "cluster": "inputs/cluster.yaml", "resume": False}

    def serve(ledger: str, *calls: tuple[str, dict]) -> list:
        params = StdioServerParameters(command=PARATUNE, args=["serve", "--ledger", str(tmp_path / ledger),
                                                               "--allow-root", str(tmp_path)], env=dict(os.environ))

        async def session() -> list:
            async with Client(params) as client:
                return [await client.call_tool(tool, args) for tool, args in calls]

        return anyio.run(session)

    for ledger, extra in (("measured/ledger.sqlite", {}), ("fresh.sqlite", {"calibration_from": "measured"})):
        opened, again = serve(ledger, ("open_run", inputs | extra), ("evaluate_simulate", {"config": {}}))
        summary, scored = opened.structured_content, again.structured_content
        assert summary["measurements_used"] == 1, summary
        assert summary["measurements"].startswith("measurements: using 1 of 1 from earlier runs")
        assert scored["calibrated"]["measured"]
        assert scored["calibrated"]["tokens_per_s_per_gpu"] == pytest.approx(0.8 * trial.tokens_per_s_per_gpu)
    [missing] = serve("fresh.sqlite", ("open_run", inputs | {"calibration_from": "inputs"}))
    assert missing.is_error and "calibration_from" in missing.content[0].text, missing.content[0].text
