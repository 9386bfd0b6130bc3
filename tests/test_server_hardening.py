"""The audit's smaller findings, each checked: over-long and control-character paths and names, the
bearer scheme's case, the token flag's warning, tool titles and hints, the server version, artifact
modes, stale staging folders, a resumed run's sweep, log-level case."""

from __future__ import annotations

import json
import stat
import subprocess

import anyio

from paratune.ledger import Ledger
from paratune.planner.cli import main
from paratune.planner.run.exports import write_overlays
from paratune.server.app import build_server
from paratune.server.transport import BearerGuard

from .test_server_common import PARATUNE, in_process, portal_client, small_inputs
from .test_tune import args


def test_long_and_control_character_paths_and_names_are_one_line_errors(tmp_path):
    with in_process(tmp_path) as (server, _), portal_client(server) as (portal, client):
        def call(tool, **kw):
            return portal.call(client.call_tool, tool, kw)

        long = call("open_run", workload="x" * 300 + ".yaml", cluster="c.yaml")
        assert long.is_error and "internal error" not in long.content[0].text and len(long.content[0].text) < 1000
        for bad in ("a\x00b.yaml", "evil\u202eyaml.txt"):
            result = call("open_run", workload=bad, cluster="c.yaml")
            assert result.is_error and "use plain text" in result.content[0].text
        note = call("note_to_scratchpad", text="fine", author="agent\u202e")
        assert note.is_error and "U+202E" in note.content[0].text
        assert not call("evaluate_memory_only").is_error
        out = call("export_best", out_dir="out\x07dir")
        assert out.is_error and "U+0007" in out.content[0].text


def test_the_bearer_scheme_is_case_insensitive_and_the_token_exact():
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["path"])

    async def call(header: bytes) -> int:
        codes = []

        async def send(message):
            if message["type"] == "http.response.start":
                codes.append(message["status"])

        async def receive():
            return {"type": "http.request", "body": b""}

        await BearerGuard(app, "T0k3n")({"type": "http", "path": "/mcp", "headers": [(b"authorization", header)]},
                                         receive, send)
        return codes[0] if codes else 200

    codes = [anyio.run(call, h) for h in (b"bearer T0k3n", b"BEARER T0k3n", b"Bearer t0k3n", b"Basic T0k3n", b"T0k3n")]
    assert codes == [200, 200, 401, 401, 401] and len(seen) == 2


def test_the_token_flag_warns_and_log_levels_take_any_case(capsys):
    # the CLI's main in this process (the console script is `sys.exit(main())`): refused before serving
    code = main(["serve", "--token", "T", "--log-level", "debug", "--workload", "w.yaml"])
    err = capsys.readouterr().err
    assert code == 2 and "PARATUNE_MCP_TOKEN" in err and "give both --workload" in err


def test_tools_carry_titles_and_hints_and_the_server_its_version(tmp_path):
    with in_process(tmp_path) as (server, session), portal_client(server) as (portal, client):
        tools = {t.name: t for t in portal.call(client.list_tools).tools}
    assert all(t.title and t.annotations and t.annotations.title for t in tools.values())
    assert tools["get_history"].annotations.read_only_hint and not tools["evaluate_simulate"].annotations.read_only_hint
    assert tools["export_best"].annotations.destructive_hint and tools["query_llm"].annotations.open_world_hint
    assert build_server(session).version not in ("", None)


def test_artifacts_are_readable_and_launch_executable_and_stale_staging_is_swept(tmp_path):
    proc = subprocess.run(args("llama8b", tmp_path, "--seed-only"), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE((tmp_path / "launch.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "summary.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "trials").stat().st_mode) == 0o755
    stale = tmp_path / ".trials.killed123"
    stale.mkdir()
    (stale / "1.yaml").write_text("half")
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        from paratune.oracle.inputs import load_workload

        from .conftest import EXAMPLES
        write_overlays(tmp_path / "trials", load_workload(EXAMPLES / "workloads" / "llama3-8b-mi300x.yaml"),
                       ledger.trials(1))
    assert not stale.exists() and not list(tmp_path.glob(".trials.*"))


def test_a_resumed_run_keeps_its_finished_sweep(tmp_path):
    workload, cluster = small_inputs(tmp_path / "inputs")
    base = [PARATUNE, "tune", "--workload", str(workload), "--target-cluster", str(cluster), "--out-dir",
            str(tmp_path / "run"), "--sweep", "--jobs", "1"]
    subprocess.run(base, capture_output=True, text=True, timeout=300, check=True)
    again = subprocess.run([*base, "--resume"], capture_output=True, text=True, timeout=300, check=True)
    assert "already holds a finished sweep" in again.stderr
    with Ledger(tmp_path / "run" / "ledger.sqlite") as ledger:
        assert len(ledger.sweep_summaries(1)) == 1
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["sweep_best"] and summary["space_size"]


def test_a_megabyte_value_comes_back_cut(tmp_path):
    """Every tool's string or config argument given 1 MB: the error names it in at most 1 KB."""
    big = "y" * 1_000_000
    with in_process(tmp_path) as (server, session), portal_client(server) as (portal, client):
        tools = portal.call(client.list_tools).tools
        sent = 0
        for tool in tools:
            for name, schema in tool.input_schema.get("properties", {}).items():
                if name == "note" or tool.name == "query_llm":
                    continue  # a long note/prompt is refused by length or sent on; both cut (checked below)
                if schema.get("type") == "string" or name in ("config", "from_config", "to_config"):
                    value = {"pp": big} if "config" in name else big
                    result = portal.call(client.call_tool, tool.name, {name: value})
                    assert result.is_error and len(result.content[0].text) <= 1000, (tool.name, name)
                    sent += 1
        assert sent >= 10
        trials = len(session.ledger.trials(session.active.run.id))
        prompt = portal.call(client.call_tool, "query_llm", {"prompt": big})
        assert prompt.is_error and len(prompt.content[0].text) <= 1000
        assert len(session.ledger.trials(session.active.run.id)) == trials


def test_a_json_encoded_config_is_read_as_the_object_it_encodes(tmp_path):
    with in_process(tmp_path) as (server, _), portal_client(server) as (portal, client):
        as_object = portal.call(client.call_tool, "evaluate_memory_only", {"config": {"mbs": 2}}).structured_content
        as_string = portal.call(client.call_tool, "evaluate_memory_only", {"config": '{"mbs": 2}'})
        assert not as_string.is_error and as_string.structured_content["trial_id"] == as_object["trial_id"]
        broken = portal.call(client.call_tool, "evaluate_memory_only", {"config": '{"mbs": 2'})
        assert broken.is_error and "JSON object" in broken.content[0].text and len(broken.content[0].text) < 1000
