"""The LLM phase against hostile endpoints, through the real `paratune tune` (a subprocess, LiteLLM on
loopback): a provider that never answers ends the phase within its bounds with the seed winner, every
artifact and the timed-out calls in `llm_calls`; a dead endpoint opens the circuit breaker instead of
being retried every round; Ctrl-C, like SIGTERM, closes the run with its artifacts and its phase report and
says how to resume."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import time

import pytest

from paratune.planner.investigator.bounded_lm import BoundedLM, PhaseStop
from paratune.planner.llm.bounds import LLMBounds

from .test_server_common import silent_listener
from .test_tune import args


def _env(listener: socket.socket) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "LLM_MODEL")}
    return env | {"LLM_MODEL": "openai/silent", "OPENAI_API_BASE": f"http://127.0.0.1:{listener.getsockname()[1]}/v1"}


def _llm_calls(out) -> list[str]:
    with sqlite3.connect(out / "ledger.sqlite") as conn:
        return [row[0] for row in conn.execute("SELECT outcome FROM llm_calls")]


def test_a_silent_provider_ends_the_phase_in_bounds_with_the_seed_winner_and_all_artifacts(tmp_path):
    listener, _ = silent_listener()
    try:
        proc = subprocess.run(args("llama8b", tmp_path, "--llm-timeout", "2", "--llm-retries", "0",
                                   "--phase-timeout", "600", "--rounds", "5"),
                              env=_env(listener), capture_output=True, text=True, timeout=300)
    finally:
        listener.close()
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["winner"]["legal"] and summary["winner_origin"].startswith("seed:")
    for name in ("trials.jsonl", "trials.png", "breakdown.png", "launch.sh", "scratchpad.txt"):
        assert (tmp_path / name).is_file(), name
    assert summary["llm_phase"].startswith("failed: openai/silent")
    assert "in a row failed to reach the provider (timeout)" in summary["llm_phase"]  # the breaker, not 5 rounds
    outcomes = _llm_calls(tmp_path)
    # each call ended by its 2 s timeout and the breaker stopped the calls after 3 in a row (+1 for the
    # planner's), well inside the phase's 600 s; the phase clock's own bound: the test below
    assert outcomes and set(outcomes) == {"timeout"} and len(outcomes) <= 4


def test_no_call_starts_once_the_phase_clock_is_spent():
    """The phase's wall clock (`BoundedLM.deadline`, a monotonic time) moved to the past, as 30 s of phase
    would: the next call ends the phase, naming the bound and where it was set, and nothing is sent."""
    lm = BoundedLM("openai/silent", LLMBounds(call_timeout_s=2, max_tokens=64, retries=0, phase_timeout_s=30,
                                              context_window=8192))  # set: no look-up in LiteLLM's table
    lm.deadline -= 30
    with pytest.raises(PhaseStop, match=r"the LLM phase's wall clock \(30 s, agent.llm.phase_timeout_s\) is spent"):
        lm(messages=[{"role": "user", "content": "hi"}])
    assert not lm.failures and not lm.history  # stopped before any request


def test_a_dead_endpoint_opens_the_breaker(tmp_path):
    with socket.socket() as s:  # a port nobody listens on: every call is refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "LLM_MODEL")}
    env |= {"LLM_MODEL": "openai/dead", "OPENAI_API_BASE": f"http://127.0.0.1:{port}/v1"}
    proc = subprocess.run(args("llama8b", tmp_path, "--llm-retries", "0", "--rounds", "6"), env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert "in a row failed to reach the provider (connection)" in summary["llm_phase"]
    assert len(summary["investigation"]["rounds"]) < 6 and set(_llm_calls(tmp_path)) == {"connection"}


def test_ctrl_c_in_the_llm_phase_closes_the_run_with_its_artifacts_like_sigterm(tmp_path):
    # started as a non-interactive shell starts a background job: SIGINT inherited ignored (issue 28: two
    # SIGINTs were ignored); `tune` sets SIGINT, like SIGTERM, to close the run (the same handler)
    listener, held = silent_listener()
    try:
        proc = subprocess.Popen(args("llama8b", tmp_path, "--llm-timeout", "60", "--phase-timeout", "300"),
                                env=_env(listener), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        deadline = time.monotonic() + 180
        while not held and time.monotonic() < deadline:  # until the planner's call is in flight
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        listener.close()
    assert proc.returncode == 0, err
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["llm_phase"].startswith("interrupted") and "--resume" in summary["llm_phase"]
    assert summary["investigation"]["stop_reason"].startswith("interrupted")  # the phase's report is kept
    assert "--resume" in err and summary["winner"]["legal"]
    with sqlite3.connect(tmp_path / "ledger.sqlite") as conn:
        assert conn.execute("SELECT status FROM runs").fetchone()[0] == "finished"
