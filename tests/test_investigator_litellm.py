"""The real LiteLLM path: LLM configuration precedence, and the client against a loopback
OpenAI-compatible endpoint with scripted chat responses (end to end through `tune`, and a 500)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from paratune.oracle.inputs import load_cluster, load_workload
from paratune.planner.cli.tune_run import TuneOptions, tune
from paratune.planner.investigator.bounded_lm import build_lm
from paratune.planner.investigator.phase_types import InvestigatorOptions
from paratune.planner.llm.bounds import LLMBounds
from paratune.planner.llm.selection import (
    LLMConfig,
    LLMNotConfigured,
    resolve_llm,
)

from .test_investigator_common import (
    FITS,
    inputs,
    investigate_with,
    plan_answer,
    served,
    step,
    summary,
)

KEY = "sk-loopback-" + "0123456789abcdef" * 2  # key-shaped, so a leak into any artifact is easy to find
LLM_VARIABLES = ("LLM_MODEL", "OPENAI_API_KEY", "OPENAI_API_BASE", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY")


def chat_text(fields: dict[str, Any] | str, request: dict[str, Any]) -> str:
    """An answer as the request asks for it: a JSON object when it sends a response_format (the schema's
    fields), else DSPy's ChatAdapter markers; a str is sent as it is (an answer that does not parse)."""
    if isinstance(fields, str):
        return fields
    if request.get("response_format"):
        return json.dumps(fields)
    body = "".join(f"[[ ## {k} ## ]]\n{v if isinstance(v, str) else json.dumps(v)}\n\n" for k, v in fields.items())
    return body + "[[ ## completed ## ]]"


@contextmanager
def loopback(script: list[dict[str, Any] | int | str]) -> Iterator[list[dict[str, Any]]]:
    """/v1/chat/completions on 127.0.0.1 answering `script` in order (an int is an HTTP error status, a str
    the answer's text as it is; an answer's `_finish` key its finish_reason, default stop, its `_delay` the
    seconds before it is sent);
    sets OPENAI_API_BASE to it; yields the requests it received."""
    requests: list[dict[str, Any]] = []
    answers = iter(script)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
            answer = next(answers)
            finish = answer.pop("_finish", "stop") if isinstance(answer, dict) else "stop"
            time.sleep(answer.pop("_delay", 0) if isinstance(answer, dict) else 0)
            if isinstance(answer, int):
                status, data = answer, {"error": {"message": "scripted failure", "type": "server_error"}}
            else:
                status, data = 200, {
                    "id": f"chatcmpl-{len(requests)}", "object": "chat.completion", "created": 0,
                    "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": finish,
                                 "message": {"role": "assistant", "content": chat_text(answer, body)}}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}
            raw = json.dumps(data).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up on this call and closed it
                pass

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OPENAI_API_BASE", f"http://127.0.0.1:{server.server_port}/v1")
        try:
            yield requests
        finally:
            server.shutdown()
            server.server_close()


@pytest.fixture
def clean_llm_env(monkeypatch):
    for name in LLM_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_one_precedence_environment_first_and_credentials_decide(clean_llm_env):
    env = clean_llm_env
    # nothing named: the documented default, which still needs its key
    with pytest.raises(LLMNotConfigured, match="openai/gpt-4o \\(from default\\) needs OPENAI_API_KEY"):
        resolve_llm(None)
    with pytest.raises(LLMNotConfigured, match="openai/gpt-4o .*needs OPENAI_API_KEY"):
        resolve_llm("openai/gpt-4o")
    # those two answer without importing LiteLLM: the same keys as LiteLLM's own check
    import litellm

    assert litellm.validate_environment("openai/gpt-4o")["missing_keys"] == ["OPENAI_API_KEY"]
    env.setenv("OPENAI_API_KEY", KEY)
    assert resolve_llm("openai/gpt-4o") == LLMConfig(model="openai/gpt-4o", source="cluster agent.llm.model",
                                                     credentials="OPENAI_API_KEY (environment)")
    env.setenv("LLM_MODEL", "anthropic/claude-sonnet-4-5")
    with pytest.raises(LLMNotConfigured, match="from env LLM_MODEL.*needs ANTHROPIC_API_KEY"):
        resolve_llm("openai/gpt-4o")
    env.setenv("LLM_MODEL", "openai/local-model")
    env.delenv("OPENAI_API_KEY")
    env.setenv("OPENAI_API_BASE", "http://127.0.0.1:9/v1")
    assert resolve_llm("openai/gpt-4o").api_base == "http://127.0.0.1:9/v1"


def test_a_dot_env_file_sits_below_the_environment_and_above_the_cluster(clean_llm_env, tmp_path):
    from paratune.planner.llm import env_file

    env = clean_llm_env
    env.setattr(env_file, "supplied", set())
    env.setattr("paratune.planner.llm.selection.supplied", env_file.supplied)
    dotenv = tmp_path / "llm.env"
    dotenv.write_text(f"# LLM settings\nexport LLM_MODEL=openai/from-dotenv\nOPENAI_API_KEY='{KEY}'\n"
                      "OPENAI_API_BASE=http://127.0.0.1:9/v1\n")
    env.setenv("OPENAI_API_BASE", "http://127.0.0.1:7/v1")  # already set: the environment wins
    assert env_file.load_env_file(dotenv) == dotenv
    config = resolve_llm("openai/cluster-model")
    assert (config.model, config.source, config.api_base) == ("openai/from-dotenv", ".env LLM_MODEL",
                                                             "http://127.0.0.1:7/v1")
    assert config.credentials == "OPENAI_API_BASE (environment), OPENAI_API_KEY (.env file)" and KEY not in str(config)
    (tmp_path / "bad.env").write_text("LLM_MODEL openai/x\n")
    with pytest.raises(env_file.EnvFileError, match="line 1 is not NAME=value"):
        env_file.load_env_file(tmp_path / "bad.env")


def test_tune_runs_the_llm_phase_through_litellm_against_a_loopback_endpoint(tmp_path, clean_llm_env):
    workload, cluster = inputs(tmp_path / "inputs", rounds=1, llm="openai/not-this-one")
    script = [plan_answer(FITS[:2]), step("evaluate_simulate", {"config": FITS[2]}), step("finish"),
              summary("tp=2 mbs=2 is close", "try cp=2")]
    clean_llm_env.setenv("LLM_MODEL", "openai/loopback-model")
    clean_llm_env.setenv("OPENAI_API_KEY", KEY)
    out = tmp_path / "out"
    with loopback(script) as requests:
        outcome = tune(load_workload(workload), load_cluster(cluster), out,
                       TuneOptions(investigator=InvestigatorOptions(calls_per_round=3)), workload_file=str(workload),
                       cluster_file=str(cluster), note=lambda line: None)
    assert outcome.llm_phase.startswith("done: openai/loopback-model (env LLM_MODEL; credentials: OPENAI_API_BASE "
                                        "(environment), OPENAI_API_KEY (environment)), react; plan: 2 candidate(s); "
                                        "1 round(s) ok, 0 failed; 3 LLM trial(s) simulated; 4 LLM call(s) answered")
    assert [r["path"] for r in requests] == ["/v1/chat/completions"] * 4
    assert {r["body"]["model"] for r in requests} == {"loopback-model"}
    assert {r["auth"] for r in requests} == {f"Bearer {KEY}"}
    summary_json = json.loads((out / "summary.json").read_text())
    assert summary_json["hypotheses"] == ["fp8 and a wider TP should pay", "try cp=2"]
    assert summary_json["investigation"]["rounds"][0]["simulate_calls"] == 1
    assert "plan: fp8 and a wider TP should pay" in (out / "scratchpad.txt").read_text()
    from paratune.ledger import Ledger

    with Ledger(out / "ledger.sqlite") as ledger:
        calls = ledger.llm_calls(outcome.run_id)
    assert [(c.model, c.prompt_tokens, c.completion_tokens) for c in calls] == [("openai/loopback-model", 100, 20)] * 4
    for path in out.rglob("*"):
        assert not path.is_file() or KEY.encode() not in path.read_bytes(), path


def test_a_provider_error_fails_that_round_and_the_next_goes_on(tmp_path, clean_llm_env):
    clean_llm_env.setenv("LLM_MODEL", "openai/loopback-model")
    script = [plan_answer(FITS[:1]), 500, step("evaluate_simulate", {"config": FITS[1]}), step("finish"),
              summary("tp=2 with fp8 is slower", "done")]
    with loopback(script) as requests, served(tmp_path, rounds=2) as (server, ledger, run_id):
        lm = build_lm(resolve_llm(None), LLMBounds(call_timeout_s=30, max_tokens=512, retries=0, phase_timeout_s=600))
        report = investigate_with(server, ledger, run_id, lm, calls_per_round=3)
        notes = [n.text for n in ledger.notes(run_id)]
        calls = ledger.llm_calls(run_id)
    assert len(requests) == len(script)
    assert [r.status for r in report.rounds] == ["failed", "ok"]
    assert "InternalServerError" in report.rounds[0].error and any(n.startswith("round 1 failed") for n in notes)
    assert report.rounds[1].simulate_calls == 1 and report.llm_calls == 4 and report.failed_calls == 1
    assert sorted(c.outcome for c in calls) == ["ok"] * 4 + ["server_error"]  # the failed call is recorded too


def test_an_answer_cut_at_max_tokens_is_recorded_as_truncated(tmp_path, clean_llm_env):
    clean_llm_env.setenv("LLM_MODEL", "openai/loopback-model")
    script = [{**plan_answer(FITS[:1]), "_finish": "length"}, step("finish"), summary("nothing new", "done")]
    with loopback(script), served(tmp_path, rounds=1) as (server, ledger, run_id):
        lm = build_lm(resolve_llm(None), LLMBounds(call_timeout_s=30, max_tokens=512, retries=0, phase_timeout_s=600))
        report = investigate_with(server, ledger, run_id, lm, calls_per_round=2)
        outcomes = [c.outcome for c in ledger.llm_calls(run_id)]
    assert outcomes == ["truncated", "ok", "ok"] and report.truncated_calls == 1
    assert "1 cut at max_tokens: raise --llm-max-tokens" in report.headline


def test_answers_that_do_not_parse_fail_the_phase_each_call_unparsed_and_the_schema_is_sent(tmp_path, clean_llm_env):
    clean_llm_env.setenv("LLM_MODEL", "openai/loopback-model")
    # what a small model writes without a grammar (issue 28): its input copied back, prose, nothing
    script = ['{"architecture": "llama3 8B", "cluster": "8 x H200"}', "Use tp=2 and fp8.", "ok", ""]
    with loopback(script) as requests, served(tmp_path, rounds=1) as (server, ledger, run_id):
        lm = build_lm(resolve_llm(None), LLMBounds(call_timeout_s=30, max_tokens=512, phase_timeout_s=600))
        report = investigate_with(server, ledger, run_id, lm, calls_per_round=1)
        outcomes = [c.outcome for c in ledger.llm_calls(run_id)]
        legal = server.call("get_legal_axes")
    assert len(requests) == len(script)  # a loopback endpoint: no retries by default
    assert outcomes == ["unparsed"] * 4 and report.failed and report.llm_calls == 0
    assert "0 LLM call(s) answered and parsed, 4 failed (4 unparsed)" in report.headline
    assert "first change: the model's answers did not parse: set agent.llm.structured" in report.headline
    # every request carried its JSON schema, typed from this run: the planner's candidates have the legal axes'
    # values as enums and no other keys; a ReAct step names one tool (a constant) with that tool's arguments
    plan_format = requests[0]["body"]["response_format"]
    assert plan_format["type"] == "json_schema"
    candidate = plan_format["json_schema"]["schema"]["properties"]["candidates"]["items"]
    assert candidate["properties"]["tp"]["enum"] == legal["tp"] and candidate["additionalProperties"] is False
    assert set(candidate["properties"]) <= set(legal)
    steps = requests[1]["body"]["response_format"]["json_schema"]["schema"]["anyOf"]
    by_tool = {o["properties"]["next_tool_name"]["const"]: o["properties"]["next_tool_args"] for o in steps}
    assert {"evaluate_simulate", "get_history", "finish"} <= set(by_tool)
    assert by_tool["evaluate_simulate"]["properties"]["config"] == candidate
    assert by_tool["note_to_scratchpad"]["required"] == ["text"] and "author" not in by_tool["note_to_scratchpad"][
        "properties"]  # the tool's own required argument; the gate sets the author
    assert by_tool["get_history"]["properties"]["k"]["maximum"] == 1000  # the tool's own schema (k <= 1000)
    # a string's bound at most TEXT_CHARS (160), below the tools' own (note 8,000 characters, query_llm's prompt
    # 50,000: server/tools_info.py), whose grammar llama-cpp-python's server failed to parse and died on
    assert by_tool["note_to_scratchpad"]["properties"]["text"] == {"type": "string", "minLength": 1, "maxLength": 160}
    assert by_tool["query_llm"]["properties"]["prompt"]["maxLength"] == 160
    assert all("response_format" in r["body"] for r in requests)


def test_a_timed_out_attempt_is_a_row_even_when_the_retry_answers(clean_llm_env):
    clean_llm_env.setenv("LLM_MODEL", "openai/loopback-model")
    with loopback([{"_delay": 3, "answer": "late"}, {"answer": "on time"}]) as requests:
        lm = build_lm(resolve_llm(None), LLMBounds(call_timeout_s=1, max_tokens=64, retries=1, phase_timeout_s=60))
        lm(messages=[{"role": "user", "content": "hi"}])
    assert len(requests) == 2 and [f.outcome for f in lm.failures] == ["timeout"] and len(lm.history) == 1
