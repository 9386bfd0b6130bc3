"""The SQLite ledger: format checks, dedupe, budgets, best, history, and crash/concurrency safety."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from paratune.ledger import APPLICATION_ID, BudgetExhausted, Ledger, history_lines
from paratune.ledger import schema as ledger_schema
from paratune.oracle.errors import InputError
from paratune.oracle.inputs import load_cluster, load_workload
from paratune.oracle.specs import Budget, EvalResult, TrialConfig, Violation

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "examples" / "workloads" / "llama3-8b-mi300x.yaml"
CLUSTER = ROOT / "examples" / "clusters" / "mi300x-1n.yaml"

# A child process that writes one memory-only trial per GBS value, printing a line after each commit.
WRITER = r"""
import os, sys, time
from paratune.ledger import Ledger
from paratune.oracle.inputs import load_cluster, load_workload
from paratune.oracle.specs import EvalResult, TrialConfig

path, workload, cluster, first, count, go = sys.argv[1:7]
w, c = load_workload(workload), load_cluster(cluster)
led = Ledger(path)
run = led.open_run(w, c)
print("ready", run.id, flush=True)
while go and not os.path.exists(go):
    time.sleep(0.005)
for gbs in range(int(first), int(first) + int(count)):
    cfg = w.effective(TrialConfig(gbs=gbs))
    result = EvalResult(legal=True, fits=True, memory_per_gpu_gb=gbs / 10, source="memory_only", config_key=cfg.key)
    led.evaluate_once(run.id, cfg, "memory_only", lambda: result, origin="writer")
    print("committed", cfg.key, flush=True)
"""


@pytest.fixture(scope="module")
def workload():
    return load_workload(WORKLOAD)


@pytest.fixture(scope="module")
def cluster():
    return load_cluster(CLUSTER)


@pytest.fixture
def led(tmp_path):
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        yield ledger


def result_for(cfg, *, source="simulate", legal=True, fits=True, tps=1000.0, mem=50.0, violations=()):
    """A hand-made EvalResult for `cfg`."""
    return EvalResult(
        legal=legal, fits=fits if legal else None, violations=list(violations),
        memory_per_gpu_gb=mem if legal else None,
        tokens_per_s_per_gpu=tps if legal and source not in ("memory_only",) else None,
        source=source, config=cfg.model_dump(), config_key=cfg.key,
    )


def writer(path: Path, first: int, count: int, go: Path | str = "") -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(WORKLOAD), str(CLUSTER), str(first), str(count), str(go)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


# ---- file format ---------------------------------------------------------------------------------
def test_new_ledger_has_application_id_schema_version_and_wal(tmp_path):
    path = tmp_path / "l.sqlite"
    Ledger(path).close()
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert raw.execute("PRAGMA user_version").fetchone()[0] == len(ledger_schema.MIGRATIONS) >= 1
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    meta = dict(raw.execute("SELECT key, value FROM meta"))
    assert meta == {"application": "paratune", "schema_version": str(len(ledger_schema.MIGRATIONS))}
    raw.close()
    Ledger(path).close()  # reopening an up-to-date ledger changes nothing


def test_foreign_sqlite_database_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "other.db"
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    raw.commit()
    raw.close()
    with pytest.raises(InputError, match="not a paratune ledger") as err:
        Ledger(path)
    assert str(path) in str(err.value)
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # not switched to WAL
    assert [r[0] for r in raw.execute("SELECT name FROM sqlite_master")] == ["customers"]
    raw.close()


def test_other_application_id_is_refused(tmp_path):
    path = tmp_path / "app.db"
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA application_id = 12345")
    raw.close()
    with pytest.raises(InputError, match="not a paratune ledger"):
        Ledger(path)


def test_garbage_file_is_a_clear_error(tmp_path):
    path = tmp_path / "garbage.sqlite"
    path.write_bytes(b"this is not a database\n" * 400)
    with pytest.raises(InputError, match="corrupt or not a SQLite database") as err:
        Ledger(path)
    assert str(path) in str(err.value)
    assert not isinstance(err.value.__cause__, sqlite3.Error)


def test_corrupt_ledger_is_a_clear_error(tmp_path, workload, cluster):
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as led:
        run = led.open_run(workload, cluster)
        for gbs in range(1, 60):
            cfg = workload.effective(TrialConfig(gbs=gbs))
            led.record_trial(run.id, cfg, result_for(cfg), fidelity="simulate", wall_ms=1.0, origin="sweep")
    data = bytearray(path.read_bytes())
    assert len(data) > 4 * 4096
    data[4096 : 3 * 4096] = b"\xa5" * (2 * 4096)  # smash pages 2-3, keep the header
    path.write_bytes(bytes(data))
    with pytest.raises(InputError, match="corrupt") as err:
        Ledger(path)
    assert str(path) in str(err.value)


def test_newer_schema_version_is_a_clear_error(tmp_path):
    path = tmp_path / "l.sqlite"
    Ledger(path).close()
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA user_version = 99")
    raw.close()
    with pytest.raises(InputError, match="newer than this paratune") as err:
        Ledger(path)
    assert str(path) in str(err.value)


def test_pending_migration_is_applied_and_keeps_data(tmp_path, workload, cluster, monkeypatch):
    path = tmp_path / "l.sqlite"
    with Ledger(path) as led:
        run = led.open_run(workload, cluster)
        cfg = workload.effective()
        led.record_trial(run.id, cfg, result_for(cfg), fidelity="simulate", wall_ms=2.0, origin="user")
    step = ("ALTER TABLE trials ADD COLUMN comment TEXT NOT NULL DEFAULT ''",)
    monkeypatch.setattr(ledger_schema, "MIGRATIONS", [*ledger_schema.MIGRATIONS, step])
    with Ledger(path) as led:
        assert [t.config_key for t in led.trials(run.id)] == [cfg.key]
        assert led.open_run(workload, cluster).id == run.id
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == len(ledger_schema.MIGRATIONS)
    assert "comment" in [r[1] for r in raw.execute("PRAGMA table_info(trials)")]
    assert dict(raw.execute("SELECT key, value FROM meta"))["schema_version"] == str(len(ledger_schema.MIGRATIONS))
    raw.close()


# ---- runs ----------------------------------------------------------------------------------------
def test_open_run_resumes_the_open_run_of_the_same_inputs(tmp_path, workload, cluster):
    path = tmp_path / "l.sqlite"
    with Ledger(path) as led:
        first = led.open_run(workload, cluster)
        assert first.status == "open" and first.budget == cluster.budget
        assert first.workload_name == workload.name and len(first.workload_sha256) == 64
    with Ledger(path) as led:
        assert led.open_run(workload, cluster) == led.run(first.id) == first
        other_cluster = cluster.model_copy(update={"budget": Budget(max_perf_calls=5)})
        assert led.open_run(workload, other_cluster).id != first.id
        fresh = led.open_run(workload, cluster, resume=False)
        assert fresh.id != first.id
        assert led.open_run(workload, cluster).id == fresh.id  # the latest open one
        led.set_status(fresh.id, "finished")
        reopened = led.open_run(workload, cluster)  # a finished run is continued, and open again
        assert reopened.id == fresh.id and reopened.status == "open"
        led.set_status(fresh.id, "failed")
        led.set_status(first.id, "failed")
        assert led.open_run(workload, cluster).id not in (first.id, fresh.id)
        assert [r.status for r in led.runs()][:3] == ["failed", "open", "failed"]


def test_unknown_run_is_a_clear_error(led, workload):
    cfg = workload.effective()
    with pytest.raises(InputError, match="no run 42"):
        led.record_trial(42, cfg, result_for(cfg), fidelity="simulate", wall_ms=1.0, origin="user")
    with pytest.raises(InputError, match="no run 42"):
        led.budget_status(42)
    with pytest.raises(InputError, match="no run 42"):
        led.budget_line(42, "simulate")


# ---- trials, dedupe, budget -----------------------------------------------------------------------
def test_dedupe_same_fidelity_is_cached_and_free_higher_fidelity_is_new(led, workload, cluster):
    run = led.open_run(workload, cluster.model_copy(update={"budget": Budget(max_perf_calls=5, max_benchmark_calls=1)}))
    cfg = workload.effective(TrialConfig(fp8="hybrid"))
    calls = []

    def evaluate(source):
        def fn():
            calls.append(source)
            return result_for(cfg, source=source)

        return fn

    first, cached = led.evaluate_once(run.id, cfg, "simulate", evaluate("simulate"), origin="seed:fp8")
    assert not cached and first.origin == "seed:fp8" and first.wall_ms >= 0
    # a different spelling of the same layout is the same trial
    same = workload.effective(TrialConfig(fp8="hybrid", vpp=1))
    assert same.key == cfg.key
    again, cached = led.evaluate_once(run.id, same, "simulate", evaluate("simulate"), origin="llm")
    assert cached and again == first
    assert calls == ["simulate"]
    assert led.budget_status(run.id)["simulate"].spent == 1

    mem, cached = led.evaluate_once(run.id, cfg, "memory_only", evaluate("memory_only"), origin="llm")
    bench, cached_b = led.evaluate_once(run.id, cfg, "benchmark", evaluate("benchmark"), origin="llm")
    assert not cached and not cached_b and len({first.id, mem.id, bench.id}) == 3
    assert calls == ["simulate", "memory_only", "benchmark"]
    assert led.lookup(run.id, cfg.key, "benchmark") == bench
    assert led.lookup(run.id, cfg.key, "dry") is None
    status = led.budget_status(run.id)
    assert list(status) == ["dry", "memory_only", "simulate", "benchmark"]
    assert (status["simulate"].spent, status["simulate"].limit, status["simulate"].left) == (1, 5, 4)
    assert (status["benchmark"].spent, status["benchmark"].left) == (1, 0)
    assert (status["memory_only"].spent, status["memory_only"].limit, status["memory_only"].left) == (1, None, None)
    assert all(led.budget_line(run.id, f) == line for f, line in status.items())  # the tools read one line
    stored = led.trials(run.id)
    assert [t.fidelity for t in stored] == ["simulate", "memory_only", "benchmark"]
    assert stored[0].result == result_for(cfg) and stored[0].config == cfg.model_dump()


def test_budget_exhaustion_raises_and_records_nothing(led, workload, cluster):
    run = led.open_run(workload, cluster.model_copy(update={"budget": Budget(max_perf_calls=2)}))
    cfgs = [workload.effective(TrialConfig(mbs=m)) for m in (1, 2, 4)]
    for cfg in cfgs[:2]:
        led.evaluate_once(run.id, cfg, "simulate", lambda cfg=cfg: result_for(cfg), origin="sweep")

    def must_not_run():
        raise AssertionError("evaluated over budget")

    with pytest.raises(BudgetExhausted, match="simulate budget is spent .2 of 2") as err:
        led.evaluate_once(run.id, cfgs[2], "simulate", must_not_run, origin="sweep")
    assert (err.value.spent, err.value.limit) == (2, 2)
    with pytest.raises(BudgetExhausted):  # max_benchmark_calls is 0
        led.evaluate_once(run.id, cfgs[2], "benchmark", must_not_run, origin="sweep")
    assert len(led.trials(run.id)) == 2
    assert led.budget_status(run.id)["simulate"].left == 0
    # a known layout is still answered, and unlimited fidelities still run
    assert led.evaluate_once(run.id, cfgs[0], "simulate", must_not_run, origin="llm")[1] is True
    mem = led.evaluate_once(run.id, cfgs[2], "memory_only", lambda: result_for(cfgs[2], source="memory_only"),
                            origin="llm")
    assert mem[1] is False


def test_failed_evaluation_records_and_spends_nothing(led, workload, cluster):
    run = led.open_run(workload, cluster)
    cfg = workload.effective()

    def boom():
        raise RuntimeError("oracle crashed")

    with pytest.raises(RuntimeError):
        led.evaluate_once(run.id, cfg, "simulate", boom, origin="sweep")
    assert led.trials(run.id) == [] and led.budget_status(run.id)["simulate"].spent == 0


def test_record_trial_checks_fidelity_and_key(led, workload, cluster):
    run = led.open_run(workload, cluster)
    cfg, other = workload.effective(), workload.effective(TrialConfig(mbs=4))
    with pytest.raises(ValueError, match="does not match fidelity"):
        led.record_trial(run.id, cfg, result_for(cfg), fidelity="benchmark", wall_ms=1.0, origin="user")
    with pytest.raises(ValueError, match="not " + other.key):
        led.record_trial(run.id, other, result_for(cfg), fidelity="simulate", wall_ms=1.0, origin="user")
    with pytest.raises(ValueError, match="unknown fidelity"):
        led.record_trial(run.id, cfg, result_for(cfg), fidelity="guess", wall_ms=1.0, origin="user")
    assert led.trials(run.id) == []
    first = led.record_trial(run.id, cfg, result_for(cfg, tps=1.0), fidelity="simulate", wall_ms=1, origin="a")
    again = led.record_trial(run.id, cfg, result_for(cfg, tps=2.0), fidelity="simulate", wall_ms=1.0, origin="b")
    assert again == first and len(led.trials(run.id)) == 1  # the first record of a (config, fidelity) wins
    # the record handed back as written is the one read back, field for field and type for type
    assert [(k, type(v)) for k, v in first] == [(k, type(v)) for k, v in led.trial(run.id, first.id)]


def test_best_is_the_fastest_legal_fitting_trial(led, workload, cluster):
    run = led.open_run(workload, cluster)
    assert led.best(run.id) is None
    cases = [  # (mbs, legal, fits, tokens/s/GPU, fidelity)
        (1, True, True, 3000.0, "simulate"),
        (2, True, False, 9000.0, "simulate"),  # faster but out of memory
        (4, True, True, 4000.0, "simulate"),
        (8, True, True, 8000.0, "benchmark"),
    ]
    for mbs, legal, fits, tps, fidelity in cases:
        cfg = workload.effective(TrialConfig(mbs=mbs))
        led.record_trial(run.id, cfg, result_for(cfg, source=fidelity, legal=legal, fits=fits, tps=tps),
                         fidelity=fidelity, wall_ms=1.0, origin="sweep")
    bad = workload.effective(TrialConfig(tp=3))
    illegal = result_for(bad, legal=False).model_copy(update={"tokens_per_s_per_gpu": 99999.0})
    led.record_trial(run.id, bad, illegal, fidelity="simulate", wall_ms=1.0, origin="llm")
    assert led.best(run.id).tokens_per_s_per_gpu == 8000.0
    best_sim = led.best(run.id, "simulate")
    assert best_sim.tokens_per_s_per_gpu == 4000.0 and best_sim.config["mbs"] == 4
    assert led.best(run.id, "memory_only") is None


# ---- scratchpad, LLM calls, sweep summaries --------------------------------------------------------
def test_notes_llm_calls_and_sweep_summaries_round_trip(led, workload, cluster):
    run = led.open_run(workload, cluster)
    led.add_note(run.id, "TP=8 is memory-bound; try CP=2", author="planner")
    led.add_note(run.id, "FP8 helps")
    assert [(n.author, n.text) for n in led.notes(run.id)] == [
        ("planner", "TP=8 is memory-bound; try CP=2"), ("agent", "FP8 helps")]
    call = led.record_llm_call(run.id, model="openai/gpt-4o", prompt_tokens=1200, completion_tokens=300, cost_usd=0.01)
    assert led.llm_calls(run.id) == [call]
    top = [{"config_key": "abc", "tokens_per_s_per_gpu": 4321.0}]
    summary = led.record_sweep_summary(run.id, space_size=500, legal=120, fits=80, scored=80, top_k=top, wall_s=2.5)
    assert led.sweep_summaries(run.id) == [summary] and summary.top_k == top


def test_api_keys_are_never_stored(led, workload, cluster):
    run = led.open_run(workload, cluster)
    key = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 2
    with pytest.raises(InputError, match="API key") as err:
        led.record_llm_call(run.id, model=key, prompt_tokens=1, completion_tokens=1)
    assert key not in str(err.value)
    with pytest.raises(InputError, match="API key"):
        led.add_note(run.id, f"use OPENAI_API_KEY={key}")
    with pytest.raises(InputError, match="API key"):
        led.record_llm_call(run.id, model="anthropic/claude-x sk-ant-api03-" + "x" * 40, prompt_tokens=1,
                            completion_tokens=1)
    assert led.llm_calls(run.id) == [] and led.notes(run.id) == []
    led.add_note(run.id, "the task-scheduler and risk-free plan are fine")  # words with 'sk-' inside


# ---- history ---------------------------------------------------------------------------------------
def test_history_lines_show_the_knobs_that_differ(led, workload, cluster):
    run = led.open_run(workload, cluster)
    base = workload.effective()
    tuned = workload.effective(TrialConfig(fp8="hybrid", use_turbo_deepep=True, pp_schedule="zb"))
    bad = workload.effective(TrialConfig(tp=3))
    led.record_trial(run.id, base, result_for(base, tps=2000.0, mem=60.25), fidelity="simulate", wall_ms=1.0,
                     origin="seed:baseline")
    led.record_trial(run.id, tuned, result_for(tuned, tps=2500.5, mem=48.0), fidelity="simulate", wall_ms=1.0,
                     origin="seed:fp8")
    violation = Violation(code="tp_divides_heads", message="tp must divide heads")
    led.record_trial(run.id, bad, result_for(bad, legal=False, violations=[violation]), fidelity="simulate",
                     wall_ms=1.0, origin="llm")
    lines = history_lines(led, run.id, base, None)
    assert len(lines) == 3
    assert "baseline" in lines[0] and "60.2 GiB" in lines[0] and "2000.0 tok/s/GPU" in lines[0]
    assert "fp8=hybrid" in lines[1] and "use_turbo_deepep=True" in lines[1] and "pp_schedule=zb" in lines[1]
    assert "seed:fp8" in lines[1] and "legal fits" in lines[1] and "2500.5" in lines[1]
    assert "tp=" not in lines[1] and "mbs=" not in lines[1] and "gbs=" not in lines[1]
    assert "tp=3" in lines[2] and "ILLEGAL tp_divides_heads" in lines[2] and "fp8" not in lines[2]
    assert history_lines(led, run.id, base, 1) == lines[-1:]
    assert history_lines(led, run.id, base, 0) == []
    # against another baseline, the knob that changed back shows as switched off
    assert "fp8=none" in history_lines(led, run.id, tuned, None)[0]


# ---- reliability -------------------------------------------------------------------------------------
def test_two_processes_writing_one_ledger_lose_nothing(tmp_path, workload, cluster):
    path, go = tmp_path / "shared.sqlite", tmp_path / "go"
    procs = [writer(path, 1, 200, go), writer(path, 1001, 200, go)]
    ready = [p.stdout.readline().split() for p in procs]
    go.touch()
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    assert ready[0][0] == "ready" and ready[0][1] == ready[1][1]  # both resumed one run
    written = {line.split()[1] for out, _ in outs for line in out.splitlines()}
    with Ledger(path) as led:
        run = led.open_run(workload, cluster)
        assert str(run.id) == ready[0][1]
        trials = led.trials(run.id)
        assert len(trials) == 400 and {t.config_key for t in trials} == written
        assert led.budget_status(run.id)["memory_only"].spent == 400
        assert len(led.runs()) == 1


def test_writer_killed_mid_run_keeps_every_committed_trial(tmp_path, workload, cluster):
    path = tmp_path / "killed.sqlite"
    proc = writer(path, 1, 100_000)
    assert proc.stdout.readline().startswith("ready")
    committed = []
    deadline = time.monotonic() + 60
    while len(committed) < 30 and time.monotonic() < deadline and (line := proc.stdout.readline()):
        committed.append(line.split()[1])
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL and len(committed) == 30

    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    raw.close()
    with Ledger(path) as led:
        run = led.open_run(workload, cluster)  # resumes the killed run
        assert [r.id for r in led.runs()] == [run.id]
        keys = [t.config_key for t in led.trials(run.id)]
        assert keys[: len(committed)] == committed
        cfg = workload.effective(TrialConfig(gbs=1))
        rec, cached = led.evaluate_once(run.id, cfg, "memory_only", lambda: None, origin="resume")
        assert cached and rec.config_key == committed[0]
        new = workload.effective(TrialConfig(gbs=999_999))
        led.evaluate_once(run.id, new, "memory_only", lambda: result_for(new, source="memory_only"), origin="resume")
        assert len(led.trials(run.id)) == len(keys) + 1


def test_the_schema_accepts_exactly_the_fidelities_the_models_define():
    # a shipped migration is never edited, so the CHECK keeps its literal list: it must stay FIDELITIES
    from paratune.ledger.models import FIDELITIES
    from paratune.ledger.schema import _FIDELITY

    listed = _FIDELITY.split("IN (")[1].rstrip(")").split(", ")
    assert tuple(v.strip("'") for v in listed) == FIDELITIES
