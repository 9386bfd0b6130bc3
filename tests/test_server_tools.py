"""Every MCP tool, resource and the prompt through the SDK's in-memory client, error results included."""

from __future__ import annotations

import json
import sys
import time
import types

import anyio
import pytest
import yaml
from mcp.shared.exceptions import MCPError

from paratune.oracle.errors import InputError
from paratune.oracle.performance.uncertainty import uncertainty
from paratune.oracle.specs import TrialConfig
from paratune.server.paths import AllowedRoots

from .test_server_common import (
    LLAMA8B,
    MI300X_1N,
    in_process,
    portal_client,
    small_inputs,
)

TOOLS = {"evaluate_memory_only", "evaluate_simulate", "evaluate_with_benchmark", "validate_config", "get_legal_axes",
         "get_history", "get_best", "get_architecture", "get_cluster", "get_budget_status", "note_to_scratchpad",
         "read_scratchpad", "query_llm", "run_seed_plan", "sweep", "open_run", "export_best", "explain",
         "record_measurement"}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One server and client for the module; each test opens its own run in the shared ledger."""
    root = tmp_path_factory.mktemp("served")
    with in_process(root, open_run=False) as (server, session), portal_client(server) as (portal, client):
        yield session, portal, client


@pytest.fixture
def call(served, tmp_path):
    """call(tool, arguments or **kw) -> CallToolResult, on a fresh small run whose files are in `tmp_path`."""
    session, portal, client = served
    session.roots = AllowedRoots([tmp_path])
    session.open_run(*small_inputs(tmp_path / "inputs"), resume=False)

    def call(tool, arguments=None, **kw):
        return portal.call(lambda: client.call_tool(tool, arguments if arguments is not None else kw))

    call.session, call.portal, call.client = session, portal, client
    return call


def ok(result) -> dict:
    assert not result.is_error, result.content[0].text
    return result.structured_content


def error(result) -> str:
    assert result.is_error, result.structured_content
    text = result.content[0].text
    assert "\n" not in text and "Traceback" not in text
    return text


def test_tool_list_is_typed_and_described(call):
    listed = call.portal.call(call.client.list_tools).tools
    assert {t.name for t in listed} == TOOLS
    for tool in listed:
        assert len(tool.description) > 60, tool.name
        assert tool.output_schema and tool.input_schema["additionalProperties"] is False, tool.name
    schema = next(t for t in listed if t.name == "evaluate_memory_only").input_schema
    config = schema["$defs"][schema["properties"]["config"]["$ref"].split("/")[-1]]
    assert config["type"] == "object" and config["additionalProperties"] is False
    assert set(config["properties"]) == set(TrialConfig.model_fields)  # every knob, stated here
    # PositiveInt, absent = omitted, with its line from the knob registry
    assert config["properties"]["tp"] == {"type": "integer", "minimum": 1, "description": "tensor-parallel size"}
    # the other layout arguments name that statement instead of repeating the 35 knobs
    stated = [t.name for t in listed if "$defs" in t.input_schema]
    assert stated == ["evaluate_memory_only"], stated
    for tool, argument in (("evaluate_simulate", "config"), ("validate_config", "config"), ("explain", "to_config")):
        schema = next(t for t in listed if t.name == tool).input_schema["properties"][argument]
        assert schema["type"] == "object" and "as evaluate_memory_only's config" in schema["description"]


def test_simulate_spends_budget_once_and_dedupes(call):
    first = ok(call("evaluate_simulate", config={"mbs": 2}))
    assert first["result"]["source"] == "simulate" and first["result"]["tokens_per_s_per_gpu"] > 0
    assert not first["cached"] and first["budget"] == {"spent": 1, "limit": 40, "left": 39}
    again = ok(call("evaluate_simulate", config={"mbs": 2, "vpp": None}, origin="llm:r1"))
    assert again["cached"] and again["trial_id"] == first["trial_id"] and again["budget"]["spent"] == 1
    memory = ok(call("evaluate_memory_only", config={"mbs": 2}))
    assert memory["result"]["source"] == "memory_only" and memory["result"]["tokens_per_s_per_gpu"] is None
    assert memory["result"]["fits"] is True and memory["budget"]["limit"] is None
    assert len(call.session.ledger.trials(call.session.active.run.id)) == 2


def test_illegal_config_is_a_result_not_an_error_and_spends_nothing(call):
    out = ok(call("evaluate_simulate", config={"tp": 2, "pp": 2, "cp": 2}))
    assert out["result"]["legal"] is False and out["result"]["violations"]
    assert {v["code"] for v in out["result"]["violations"]} and out["budget"]["spent"] == 0
    trials = call.session.ledger.trials(call.session.active.run.id)
    assert [t.id for t in trials] == [out["trial_id"]] and not trials[0].legal


def test_spent_budget_is_an_error_that_says_what_is_spent(call, tmp_path):
    call.session.open_run(*small_inputs(tmp_path / "tight", max_perf_calls=2), resume=False)
    for mbs in (1, 2):
        ok(call("evaluate_simulate", config={"mbs": mbs}))
    text = error(call("evaluate_simulate", config={"mbs": 4}))
    assert "simulate budget is spent (2 of 2 calls)" in text and text.startswith("evaluate_simulate:")
    assert ok(call("evaluate_simulate", config={"mbs": 1}))["cached"]
    assert ok(call("get_budget_status"))["fidelities"]["simulate"] == {"spent": 2, "limit": 2, "left": 0}


def test_benchmark_says_why_it_cannot_run(call, tmp_path):
    assert "no GPU: the cluster says has_gpu false" in error(call("evaluate_with_benchmark", config={}))
    workload, cluster = small_inputs(tmp_path / "gpu", has_gpu=True)
    ok(call("open_run", workload=str(workload), cluster=str(cluster)))
    # the cluster says it has a GPU, but this machine's torch sees none: the gate says so, nothing recorded
    before = ok(call("get_history"))
    assert "sees no GPU" in error(call("evaluate_with_benchmark"))
    assert ok(call("get_history")) == before


def test_validate_config_and_legal_axes_record_nothing(call):
    good = ok(call("validate_config", config={"tp": 2}))
    assert good["legal"] and good["config"]["tp"] == 2 and good["derived_dp"] == 1
    bad = ok(call("validate_config", config={"tp": 2, "mbs": 3}))
    assert not bad["legal"] and bad["violations"]
    axes = ok(call("get_legal_axes"))
    assert axes["world_size"] == 2 and axes["tp"] == [1, 2]
    assert call.session.ledger.trials(call.session.active.run.id) == []


def test_history_best_and_run_information(call):
    assert ok(call("get_best"))["found"] is False
    for mbs in (1, 2):
        ok(call("evaluate_simulate", config={"mbs": mbs, "recompute_granularity": "full"}))
    history = ok(call("get_history", k=1))
    assert history["total_trials"] == 2 and len(history["lines"]) == 1 and "mbs=2" in history["lines"][0]
    best = ok(call("get_best", fidelity="simulate"))
    assert best["found"] and best["result"]["tokens_per_s_per_gpu"] > 0
    assert best["stack"].startswith("primus") and "run_pretrain.sh" in best["launch"]["command"]  # MI300X: Primus
    overlay = yaml.safe_load(best["launch"]["files"]["winner.primus.yaml"])
    assert overlay["modules"]["pre_trainer"]["overrides"]["micro_batch_size"] == best["result"]["config"]["mbs"]
    arch = ok(call("get_architecture"))
    assert arch["model"]["num_layers"] == 32 and arch["baseline"]["gbs"] == 8 and arch["is_moe"] is False
    cluster = ok(call("get_cluster"))
    assert cluster["world_size"] == 2 and cluster["memory_cap_gb"] == pytest.approx(172.8)
    assert cluster["cluster"]["gpu"]["name"] == "mi300x"
    assert "k: input should be greater than or equal to 1 (got 0)" in error(call("get_history", k=0))


def test_scratchpad_keeps_notes_and_refuses_keys(call):
    note = ok(call("note_to_scratchpad", text="TP=2 halves memory but loses 30%", author="tester"))
    assert note["author"] == "tester"
    assert [n["text"] for n in ok(call("read_scratchpad"))["notes"]] == ["TP=2 halves memory but loses 30%"]
    text = error(call("note_to_scratchpad", text="key sk-abcdefghijklmnopqrstuvwxyz123456"))
    assert "notes.text" in text and "sk-abc" not in text


def test_query_llm_without_model_or_litellm_is_a_clear_error(call, monkeypatch):
    monkeypatch.delenv("LLM_MODEL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    assert "no LLM is configured" in error(call("query_llm", prompt="hi"))
    monkeypatch.setenv("LLM_MODEL", "openai/gpt-4o-mini")
    monkeypatch.setitem(sys.modules, "litellm", None)
    # an openai/... model without its key is answered without LiteLLM (planner/llm/selection.py); with it,
    # resolving the model needs LiteLLM
    assert "needs OPENAI_API_KEY" in error(call("query_llm", prompt="hi"))
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    assert "LiteLLM is not installed" in error(call("query_llm", prompt="hi"))


def test_query_llm_records_usage_never_keys(call, monkeypatch):
    monkeypatch.setenv("LLM_MODEL", "openai/gpt-4o-mini")
    fake = types.ModuleType("litellm")
    seen = {}

    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "unused")  # present: the fake LiteLLM below is asked (validate_environment)

    def completion(model, messages, max_tokens, timeout, num_retries):
        seen.update(model=model, messages=messages, timeout=timeout, num_retries=num_retries)
        if messages[-1]["content"] == "fail":
            raise RuntimeError("401 bad key sk-abcdefghijklmnopqrstuvwxyz123456")
        message = types.SimpleNamespace(content="try TP=2")
        return types.SimpleNamespace(choices=[types.SimpleNamespace(message=message)],
                                     usage=types.SimpleNamespace(prompt_tokens=12, completion_tokens=3))

    fake.completion = completion
    fake.validate_environment = lambda model: {"missing_keys": []}
    fake.completion_cost = lambda completion_response: 0.0004
    monkeypatch.setitem(sys.modules, "litellm", fake)
    answer = ok(call("query_llm", prompt="what next?", system="be brief", max_tokens=50))
    assert answer == {"model": "openai/gpt-4o-mini", "text": "try TP=2", "prompt_tokens": 12,
                      "completion_tokens": 3, "cost_usd": 0.0004}
    assert seen["messages"][0] == {"role": "system", "content": "be brief"}
    assert (seen["timeout"], seen["num_retries"]) == (120.0, 0)  # the cluster's agent.llm.timeout_s default
    [row] = call.session.ledger.llm_calls(call.session.active.run.id)
    assert (row.model, row.prompt_tokens, row.completion_tokens) == ("openai/gpt-4o-mini", 12, 3)
    text = error(call("query_llm", prompt="fail"))
    assert "RuntimeError" in text and "sk-" not in text
    calls = call.session.ledger.llm_calls(call.session.active.run.id)
    assert [c.outcome for c in calls] == ["ok", "error:RuntimeError"]


def test_run_seed_plan_reports_progress_and_respects_budget(call):
    progress = []

    async def on_progress(done, total, message):
        progress.append((done, total))

    report = ok(call.portal.call(lambda: call.client.call_tool("run_seed_plan", {"budget": 5},
                                                               progress_callback=on_progress)))
    assert report["candidates"] > 5 and report["simulate_budget"]["spent"] == 5 and report["best_trial_id"]
    assert progress and progress[-1][0] <= progress[-1][1] == report["candidates"]
    again = ok(call("run_seed_plan", budget=5))
    assert again["new_trials"] == 0 and again["simulate_budget"]["spent"] == 5


def test_sweep_records_its_top_k_with_progress(call):
    progress = []

    async def on_progress(done, total, message):
        progress.append(message)

    report = ok(call.portal.call(lambda: call.client.call_tool("sweep", {"top_k": 3},
                                                               progress_callback=on_progress)))
    assert report["space_size"] >= report["fits"] > 0 and report["jobs"] == 1 and len(report["top"]) == 3
    tps = [r["tokens_per_s_per_gpu"] for r in report["top"]]
    assert tps == sorted(tps, reverse=True)
    assert progress and progress[-1].startswith("sweep: ")
    run_id = call.session.active.run.id
    assert {t.origin for t in call.session.ledger.trials(run_id)} == {"sweep"}
    assert call.session.ledger.sweep_summaries(run_id)[0].space_size == report["space_size"]
    assert "jobs: input should be less than or equal to" in error(call("sweep", jobs=10_000))


def test_sweep_keeps_the_layouts_within_the_error_for_the_robust_pick_as_tune_does(call):
    """Issue 25 item 2 over MCP: the robust pick weighs more than the top-k cut. With top_k 1 the sweep records,
    as `paratune tune` does, the layouts within the oracle's stated error of the best (planner/search/sweep.py KEEP),
    and export_best's robust pick counts them."""
    report = ok(call("sweep", top_k=1))
    a = call.session.active
    mape = uncertainty(a.workload.model, a.cluster.gpu).mape
    trials = call.session.ledger.trials(a.run.id)
    best = max(t.tokens_per_s_per_gpu for t in trials)
    assert len(report["top"]) == 1 and report["recorded"] == len(trials) > 1
    assert all(t.tokens_per_s_per_gpu >= (1 - mape) * best for t in trials)
    pick = ok(call("export_best", out_dir="out"))["pick"]
    assert pick["within_error"] >= len(trials) - 1  # and the user's own layout, which export_best adds


def test_server_answers_while_a_sweep_runs(call):
    call.session.open_run(LLAMA8B, MI300X_1N, resume=False, confined=False)  # a space of seconds, not milliseconds

    async def both():
        done = {}

        async def sweep():
            await call.client.call_tool("sweep", {"top_k": 1})
            done["sweep"] = time.perf_counter()

        async with anyio.create_task_group() as tg:
            tg.start_soon(sweep)
            await anyio.sleep(0.05)
            status = await call.client.call_tool("get_budget_status", {})
            done["status"] = time.perf_counter()
        return status, done

    status, done = call.portal.call(both)
    assert not status.is_error and done["status"] < done["sweep"]


def test_export_best_writes_artifacts_under_the_roots(call, tmp_path):
    assert "has no trials yet" in error(call("export_best", out_dir="out"))
    ok(call("run_seed_plan", budget=3))
    out = ok(call("export_best", out_dir="out"))
    assert out["out_dir"] == str(tmp_path / "out") and out["winner"]["fits"]
    for name in ("trials.jsonl", "summary.json", "trials.png", "launch.sh", "winner.primus.yaml"):
        assert (tmp_path / "out" / name).is_file(), name
    assert list((tmp_path / "out" / "trials").glob("*.yaml"))
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["launch"] == out["launch"]
    launch_sh = (tmp_path / "out" / "launch.sh").read_text()  # runs the overlay beside it, from a Primus checkout
    assert 'EXP="$HERE/winner.primus.yaml"' in launch_sh and f"bash {tmp_path / 'out' / 'launch.sh'}" in launch_sh
    assert "outside the allowed roots" in error(call("export_best", out_dir="/tmp/elsewhere"))
    assert "'..' is not allowed" in error(call("export_best", out_dir="out/../../x"))
    assert "exists and is not a directory" in error(call("export_best", out_dir="out/summary.json"))


def test_open_run_checks_paths_against_the_roots(call, tmp_path):
    workload, cluster = small_inputs(tmp_path / "other", max_perf_calls=7)
    run = ok(call("open_run", workload="other/workload.yaml", cluster=str(cluster)))
    assert run["budget"]["max_perf_calls"] == 7 and run["world_size"] == 2 and run["trials"] == 0
    assert ok(call("get_budget_status"))["run_id"] == run["run_id"]
    resumed = ok(call("open_run", workload=str(workload), cluster=str(cluster)))
    assert resumed["run_id"] == run["run_id"]
    assert ok(call("open_run", workload=str(workload), cluster=str(cluster), resume=False))["run_id"] > run["run_id"]
    outside = tmp_path.parent / f"{tmp_path.name}-outside.yaml"
    outside.write_text("extends: llama3-8b\n")
    (tmp_path / "link.yaml").symlink_to(outside)
    cases = {
        "missing.yaml": "workload: 'missing.yaml': file not found",
        "inputs": "workload: 'inputs': not a regular file",
        "inputs/../inputs/workload.yaml": "'..' is not allowed",
        "link.yaml": "outside the allowed roots",
        str(outside): "outside the allowed roots",
    }
    for path, message in cases.items():
        assert message in error(call("open_run", workload=path, cluster=str(cluster))), path
    (tmp_path / "broken.yaml").write_text("target_cluster: {num_nodes: 1, gpu_arch: nosuch}\n")
    text = error(call("open_run", workload=str(workload), cluster="broken.yaml"))
    assert "broken.yaml" in text and "target_cluster.gpu_arch" in text and "unknown GPU 'nosuch'" in text


def test_bad_arguments_and_unknown_tools_are_one_line_errors(call):
    cases = [
        ("evaluate_simulate", {"config": {"tp": -1}}, "config.tp: input should be greater than 0 (got -1)"),
        ("evaluate_simulate", {"config": {"mbss": 2}}, "config.mbss: unknown key; did you mean 'mbs'?"),
        ("evaluate_simulate", {"config": {}, "confg": 1}, "confg: unknown key; did you mean 'config'?"),
        ("evaluate_simulate", {"config": "tp=2"}, "config: input should be a valid dictionary"),
        ("evaluate_memory_only", {"config": {"pp_schedule": "gpipe"}}, "config.pp_schedule: input should be"),
        ("evaluate_simulate", {"origin": "has spaces"}, "origin: string should match pattern"),
        ("open_run", {"workload": "w.yaml"}, "cluster: required key is missing"),
        ("note_to_scratchpad", {"text": ""}, "text: string should have at least 1 character"),
    ]
    for tool, arguments, message in cases:
        text = error(call(tool, arguments))
        assert text.startswith(f"{tool}: ") and message in text, text
    assert error(call("tune_everything")).startswith("unknown tool 'tune_everything'; the tools are: ")


def test_no_open_run_is_an_error_for_run_tools(tmp_path):
    with in_process(tmp_path, open_run=False) as (server, _), portal_client(server) as (portal, client):
        for tool in ("evaluate_simulate", "get_history", "get_best", "run_seed_plan", "read_scratchpad"):
            assert "no run is open: call open_run" in error(portal.call(client.call_tool, tool, {}))


def test_resources_and_prompt(call):
    ok(call("note_to_scratchpad", text="first"))
    ok(call("evaluate_memory_only"))

    def read(uri):
        return json.loads(call.portal.call(call.client.read_resource, uri).contents[0].text)

    run_id = call.session.active.run.id
    assert read("paratune://runs")[-1]["id"] == run_id
    first = read(f"paratune://runs/{run_id}/trials")
    assert [t["fidelity"] for t in first["trials"]] == ["memory_only"]
    assert (first["page"], first["pages"], first["trials_total"], first["next"]) == (1, 1, 1, None)
    assert read(f"paratune://runs/{run_id}/trials/page/1") == first
    assert [n["text"] for n in read(f"paratune://runs/{run_id}/scratchpad")] == ["first"]
    assert "llama3-8b" in read("paratune://catalog/models") and "mi355x" in read("paratune://catalog/gpus")
    with pytest.raises(MCPError, match="no run 99"):
        read("paratune://runs/99/trials")
    with pytest.raises(MCPError, match="is not a number"):
        read("paratune://runs/abc/trials")
    with pytest.raises(MCPError, match="has 1 page"):
        read(f"paratune://runs/{run_id}/trials/page/2")
    templates = call.portal.call(call.client.list_resource_templates).resource_templates
    assert {t.uri_template for t in templates} == {"paratune://runs/{run_id}/trials",
                                                   "paratune://runs/{run_id}/trials/page/{page}",
                                                   "paratune://runs/{run_id}/scratchpad"}
    [prompt] = call.portal.call(call.client.list_prompts).prompts
    assert prompt.name == "tune_workload"
    text = call.portal.call(call.client.get_prompt, "tune_workload",
                            {"workload": "w.yaml", "cluster": "c.yaml"}).messages[0].content.text
    assert 'open_run with workload "w.yaml"' in text
    for step in ("get_legal_axes", "run_seed_plan", "evaluate_simulate", "export_best"):
        assert step in text


def test_an_allowed_root_must_be_a_directory(tmp_path):
    with pytest.raises(InputError, match="--allow-root: allowed root is not a directory"):
        AllowedRoots([tmp_path / "nope"])
