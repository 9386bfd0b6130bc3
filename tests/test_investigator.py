"""The DSPy client against a real `paratune serve` (stdio, and HTTP by URL) with DummyLM: a full run,
budget exhaustion, a stalled incumbent, malformed output, illegal proposals, RLM rounds through the
local interpreter, RLM refused without a sandbox, and no oracle import."""

from __future__ import annotations

import json
import subprocess
import sys

from dspy.utils import DummyLM

from paratune.ledger import Ledger
from paratune.planner.investigator.mcp_client import ServerConnection

from .conftest import PARATUNE
from .test_investigator_common import (
    FITS,
    RecordingLM,
    inputs,
    investigate_with,
    origins,
    plan_answer,
    served,
    step,
    summary,
)
from .test_server_transports import http_server


def test_full_run_records_plan_rounds_notes_and_the_winner(tmp_path):
    answers = [
        plan_answer(FITS[:4] + [{"tp": 3}]),
        step("read_scratchpad"), step("evaluate_simulate", {"config": FITS[4]}),
        step("note_to_scratchpad", {"text": "pp=2 costs a pipeline bubble"}), step("finish"),
        summary("pp=2 is slower", "try cp=2 with fp8"),
        step("evaluate_memory_only", {"config": {"cp": 2, "fp8": "hybrid"}}),
        step("evaluate_simulate", {"config": {"cp": 2, "fp8": "hybrid"}}), step("finish"),
        summary("cp=2 with fp8 fits", "nothing left to try"),
    ]
    with served(tmp_path, rounds=2, extras="prefer fp8") as (server, ledger, run_id):
        report = investigate_with(server, ledger, run_id, DummyLM(answers), calls_per_round=4)
        by_origin = origins(ledger, run_id)
        notes = [n.text for n in ledger.notes(run_id)]
        best = server.call("get_best")
        fastest = ledger.best(run_id)
        calls = ledger.llm_calls(run_id)

    assert [c.status for c in report.plan.candidates] == ["simulated"] * 4 + ["rejected"]
    assert {t.config_key for t in by_origin["llm:plan"] if t.fidelity == "simulate"} == \
        {t.config_key for t in by_origin["llm:plan"] if t.fidelity == "memory_only" and t.fits}
    assert len([t for t in by_origin["llm:plan"] if t.fidelity == "simulate"]) == 4
    assert [t.fidelity for t in by_origin["llm:round1"]] == ["simulate"]
    assert sorted(t.fidelity for t in by_origin["llm:round2"]) == ["memory_only", "simulate"]
    assert [(r.status, r.tool_calls) for r in report.rounds] == [("ok", 3), ("ok", 2)]
    assert "pp=2 costs a pipeline bubble" in notes
    assert notes[0].startswith("plan: fp8 and a wider TP should pay") and "round 2: cp=2 with fp8 fits" in notes[-1]
    assert report.hypotheses == ["fp8 and a wider TP should pay", "try cp=2 with fp8", "nothing left to try"]
    # the investigator reports the fastest simulated layout (the ledger's best), not the robust pick get_best states
    assert report.best_tokens_per_s_per_gpu == fastest.result.tokens_per_s_per_gpu
    assert best["found"] and best["result"]["tokens_per_s_per_gpu"] <= fastest.result.tokens_per_s_per_gpu
    assert best["origin"].startswith("llm:") and report.stop_reason == "2 round(s) done"
    assert len(calls) == report.llm_calls == len(answers) and {c.model for c in calls} == {"dummy"}


def test_an_exhausted_budget_ends_the_phase_cleanly(tmp_path):
    with served(tmp_path, budget=2) as (server, ledger, run_id):
        report = investigate_with(server, ledger, run_id, DummyLM([plan_answer(FITS[:4])]))
        spent = server.call("get_budget_status")["fidelities"]["simulate"]
        simulated = [t for t in ledger.trials(run_id) if t.fidelity == "simulate"]
    assert [c.status for c in report.plan.candidates] == ["simulated", "simulated", "skipped", "skipped"]
    assert "the simulate budget is spent" in report.plan.candidates[2].reasons[0]
    assert report.rounds == [] and report.stop_reason == "the simulate budget is spent"
    assert spent["spent"] == spent["limit"] == len(simulated) == 2 and report.llm_calls == 1


def test_the_phase_stops_when_the_incumbent_stalls(tmp_path):
    stalls = [FITS[0], FITS[3], FITS[4], FITS[5]]  # fp8 first; cp=2, pp=2 and full recompute are all slower
    with served(tmp_path, rounds=3) as (server, ledger, run_id):
        report = investigate_with(server, ledger, run_id, DummyLM([plan_answer(stalls)]), patience=2)
    assert [c.status for c in report.plan.candidates] == ["simulated", "simulated", "simulated", "skipped"]
    assert report.rounds == [] and report.stop_reason == "no better layout in the last 2 simulate calls"
    assert report.best_tokens_per_s_per_gpu == report.plan.candidates[0].tokens_per_s_per_gpu


def test_an_unreadable_step_is_an_observation_and_the_round_goes_on(tmp_path):
    answers = [
        plan_answer("}{ not json"),  # candidates is list[Any]: the junk is one rejected candidate, not a lost plan
        step("read_scratchpad"), {"next_thought": "x", "next_tool_name": "get_best", "next_tool_args": "[1, 2"},
        {"answer": "nor this"},  # ChatAdapter, then its JSON fallback: the step cannot be read
        step("Evaluate-Simulate", {"config": FITS[0]}),  # a miscased tool name still reaches its tool
        step("no_such_tool"), step("finish"), summary("fp8 helps", "more fp8"),
    ]
    lm = RecordingLM(answers)
    with served(tmp_path, rounds=1) as (server, ledger, run_id):
        report = investigate_with(server, ledger, run_id, lm, calls_per_round=5)
        notes = [n.text for n in ledger.notes(run_id)]
        by_origin = origins(ledger, run_id)
    assert report.plan.error is None and [c.status for c in report.plan.candidates] == ["rejected"]
    assert report.plan.candidates[0].reasons == ["not a TrialConfig object"]
    [done] = report.rounds
    assert (done.status, done.findings, done.simulate_calls) == ("ok", "fp8 helps", 1)
    assert [t.config.get("fp8") for t in by_origin["llm:round1"] if t.fidelity == "simulate"] == ["hybrid"]
    assert notes[0].startswith("plan: fp8") and notes[1].startswith("round 1: fp8 helps")
    prompts = " ".join(str(m.get("content")) for prompt in lm.prompts for m in prompt)
    assert "your last step could not be read" in prompts and "unknown tool 'no_such_tool'; the tools are" in prompts


def test_illegal_proposals_are_rejected_with_their_reasons_and_the_loop_goes_on(tmp_path):
    answers = [
        plan_answer([{"tp": 3}, {"tensor_parallel": 2}, {"mbs": 4}, FITS[0]]),
        step("evaluate_simulate", {"config": {"tp": 3}}), step("evaluate_simulate", {"config": FITS[1]}),
        step("finish"), summary("tp=3 is illegal on 2 GPUs", "stay at tp<=2"),
    ]
    with served(tmp_path, rounds=1) as (server, ledger, run_id):
        report = investigate_with(server, ledger, run_id, DummyLM(answers))
        by_origin = origins(ledger, run_id)
        budget = server.call("get_budget_status")["fidelities"]["simulate"]
    illegal, unknown, too_big, fine = report.plan.candidates
    # bounded before any work (oracle/knob_bounds.py): TP cannot exceed the 2 GPUs
    assert illegal.status == "rejected" and any("config.tp: 3 is more than 2, the world size" in r
                                                for r in illegal.reasons)
    assert unknown.status == "rejected" and "config.tensor_parallel: unknown key" in unknown.reasons[0]
    assert too_big.status == "rejected" and too_big.reasons[0].startswith("needs 174.5 GiB per GPU")
    assert fine.status == "simulated"
    # a knob out of bounds is refused at the boundary, before any work: no trial is recorded for it
    assert [t for t in by_origin["llm:plan"] if not t.legal] == []
    round_trials = by_origin["llm:round1"]
    assert [t.legal for t in round_trials] == [True] and report.rounds[0].status == "ok"
    assert budget["spent"] == 2  # the plan's fitting candidate and the round's legal one; illegal ones are free


def test_rlm_rounds_through_the_local_interpreter_and_a_dead_or_spinning_worker_fails_only_its_round(tmp_path):
    code = ("```python\nr = evaluate_simulate(config={'tp': 2, 'fp8': 'hybrid'})\n"
            "print(r['result']['legal'], r['cached'])\n```")
    answers = [
        plan_answer(FITS[:1]),
        {"reasoning": "probe tp=2 with fp8", "code": code},
        {"reasoning": "noted", "code": "note_to_scratchpad(text='rlm: tp=2 fp8 probed')\n"
                                        "SUBMIT(findings='tp=2 with fp8 is legal', next_hypothesis='cp=2')"},
        {"reasoning": "the worker dies", "code": "import os\nos._exit(3)"},  # round 2: the worker exits
        {"reasoning": "spin", "code": "while True:\n    pass"},  # round 3: a loop that never ends
    ]
    notes: list[str] = []
    with served(tmp_path, rounds=3) as (server, ledger, run_id):
        report = investigate_with(server, ledger, run_id, DummyLM(answers), notes, agent_loop="rlm",
                                  allow_local_interpreter=True, calls_per_round=4, call_timeout_s=3)
        by_origin = origins(ledger, run_id)
        scratchpad = [n.text for n in ledger.notes(run_id)]
    assert notes[0].startswith("WARNING: --allow-local-interpreter")
    first, dead, spinning = report.rounds
    assert (first.status, first.findings, first.next_hypothesis) == ("ok", "tp=2 with fp8 is legal", "cp=2")
    assert [t.config["tp"] for t in by_origin["llm:round1"]] == [2] and first.simulate_calls == 1
    assert "rlm: tp=2 fp8 probed" in scratchpad
    assert dead.status == spinning.status == "failed" and "CodeInterpreterError" in dead.error
    assert "exceeded execution timeout of 3 seconds" in spinning.error  # the call's bound, applied to the code
    workers = subprocess.run(["pgrep", "-f", "local_interpreter_worker.py"], capture_output=True, text=True)
    assert workers.stdout.strip() == ""  # no worker outlives its round


def test_the_client_never_imports_the_oracle():
    probe = ("import importlib, pkgutil, sys, paratune.planner.investigator as p\n"
             "[importlib.import_module('paratune.planner.investigator.' + m.name)\n"
             " for m in pkgutil.iter_modules(p.__path__)]\n"
             "ours = {m.split('.')[1] for m in sys.modules if m.startswith('paratune.')}\n"
             "print(sorted(ours & {'oracle', 'ledger', 'server'}))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_rlm_without_a_sandbox_is_refused_before_any_work(tmp_path):
    workload, cluster = inputs(tmp_path / "inputs")
    proc = subprocess.run([PARATUNE, "tune", "--workload", str(workload), "--target-cluster", str(cluster),
                           "--out-dir", str(tmp_path / "out"), "--dry-run", "--agent-loop", "rlm"],
                          capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2 and "deno is not on PATH" in proc.stderr and "--allow-local-interpreter" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_the_client_reaches_a_server_by_url_with_a_bearer_token(tmp_path):
    token = "investigator-token-0123456789"
    with http_server(tmp_path, "--token", token) as url, ServerConnection(url, token=token) as server, \
            Ledger(tmp_path / "paratune-ledger.sqlite") as ledger:
        run_id = server.call("get_budget_status")["run_id"]
        report = investigate_with(server, ledger, run_id, DummyLM([plan_answer([{"tp": 3}])]), rounds=0)
        notes = [n.text for n in ledger.notes(run_id)]
    assert len(server.tools) == 19 and report.plan.candidates[0].status == "rejected"
    assert notes[0].startswith("plan: ") and report.llm_calls == 1


def test_a_json_encoded_candidate_is_decoded_and_junk_beside_it_is_rejected_alone(tmp_path):
    junk = "use tp 8 please " * 40  # a long sentence where an object belongs
    answers = [plan_answer([json.dumps(FITS[0]), junk, FITS[1]]), step("finish"), summary("ok", "done")]
    with served(tmp_path, rounds=1) as (server, ledger, run_id):
        report = investigate_with(server, ledger, run_id, DummyLM(answers), calls_per_round=2)
        notes = [n.text for n in ledger.notes(run_id)]
    statuses = [c.status for c in report.plan.candidates]
    assert statuses == ["simulated", "rejected", "simulated"]
    assert report.plan.candidates[0].config == FITS[0]  # decoded from its JSON string
    assert len(str(report.plan.candidates[1].config)) < 100 and len(notes[0]) < 1000  # junk kept cut, not verbatim
