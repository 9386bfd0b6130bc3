"""No request stalls the server: the audit's reproducers over a real stdio transport (PP = 2^64+1 then another
request, a 1 MB path, a FIFO named config.json), and the parts that make them hold: knob bounds, exact
integers and booleans, regular-file reads, per-call deadlines that stop their work, a message per failure
class, no ledger path in an answer."""

from __future__ import annotations

import errno
import functools
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
import tracemalloc

import anyio
import pytest
from mcp.server.mcpserver.exceptions import ToolError

from paratune.oracle.cancel import Cancelled, checkpoint, stoppable
from paratune.oracle.errors import InputError
from paratune.oracle.inputs.read_guard import read_text, usable
from paratune.oracle.knob_bounds import check_knob_bounds
from paratune.oracle.performance.schedule import _program as rank_orders_program
from paratune.oracle.pipeline_split import SplitError, parse_layout
from paratune.oracle.specs import TrialConfig
from paratune.planner.search.sweep import sweep
from paratune.server.exact_args import exact_arguments
from paratune.server.failures import describe
from paratune.server.offload import off_loop

from .conftest import example
from .test_server_common import LLAMA8B, MI300X_1N, PARATUNE, in_process, portal_client, stdio_server


def test_the_audits_reproducers_are_answered_over_stdio_and_the_server_goes_on(tmp_path):
    """Each is refused before any work (their timings: `benchmarks/mcp_refusals.py`); a request that stalled the
    server would leave the next one unanswered (`receive` waits 30 s for a hang, not for a speed)."""
    os.mkfifo(tmp_path / "config.json")
    (tmp_path / "fifo.yaml").write_text("extends: config.json\nglobal_batch_size: 8\n")
    with stdio_server(tmp_path) as wire:
        def call(rid: int, tool: str, arguments: dict) -> dict:
            wire.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                                  "params": {"name": tool, "arguments": arguments}}).encode())
            answer = wire.receive(timeout=30)
            assert answer["id"] == rid
            return answer["result"]

        huge = call(1, "evaluate_simulate", {"config": {"pp": 2**64 + 1}})
        after = call(2, "get_budget_status", {})
        path = call(3, "open_run", {"workload": "a/" * 500_000, "cluster": "inputs/cluster.yaml"})
        out = call(4, "export_best", {"out_dir": "a/" * 500_000})
        fifo = call(5, "open_run", {"workload": "fifo.yaml", "cluster": "inputs/cluster.yaml"})
        last = call(6, "get_budget_status", {})
    assert huge["isError"] and "config.pp" in huge["content"][0]["text"] and not after["isError"]
    assert json.loads(after["content"][0]["text"]) == json.loads(last["content"][0]["text"])  # nothing was spent
    assert path["isError"] and "over the system's limit" in path["content"][0]["text"]
    assert out["isError"]
    assert fifo["isError"] and "not a regular file" in fifo["content"][0]["text"] and not last["isError"]


@pytest.mark.parametrize(("knobs", "key", "words"), [
    ({"pp": 2**64 + 1}, "pp", "the most pipeline stages"),
    ({"tp": 65}, "tp", "world size"),
    ({"ep": 10**6}, "ep", "world size"),
    ({"pp": 2, "vpp": 10**6}, "vpp", "virtual stages a pipeline rank can hold"),
    ({"mbs": 1025}, "mbs", "global batch"),
    ({"gbs": 2**40}, "gbs", "sequences per iteration"),
    ({"recompute_num_layers": 81}, "recompute_num_layers", "80 layers"),
    ({"sync_free_stage": 4}, "sync_free_stage", "sync-free"),
    ({"pp_layout": "E" + "t" * 5000 + "L"}, "pp_layout", "characters"),
])
def test_knobs_no_layout_can_have_are_refused_naming_the_key(knobs, key, words):
    workload, cluster = example("llama70b")  # 80 layers, 64 GPUs, GBS 128
    with pytest.raises(InputError, match=words) as caught:
        check_knob_bounds(workload, cluster.world_size, TrialConfig(**knobs))
    assert caught.value.key == key and len(str(caught.value)) < 300


def test_the_cli_refuses_the_same_knobs_before_any_work():
    proc = subprocess.run([PARATUNE, "project", "memory", "--workload", str(LLAMA8B), "--target-cluster",
                           str(MI300X_1N), "--config", json.dumps({"pp": 2**64 + 1})],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--config: pp: a 65-bit number is more than 8" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_knobs_a_legal_layout_has_pass_the_bounds():
    workload, cluster = example("llama70b")
    check_knob_bounds(workload, cluster.world_size, TrialConfig(tp=8, pp=8, vpp=10, mbs=128, gbs=128,
                                                                recompute_num_layers=80))


def test_a_layout_that_would_expand_to_gigabytes_is_refused_before_it_is_expanded():
    """Refused from the pattern's counts, before anything is built: the parse allocates kilobytes, not the
    ~200 GB the expansion would take (tracemalloc counts every Python allocation, deterministic)."""
    tracemalloc.start()
    try:
        with pytest.raises(SplitError, match="expands past"):
            parse_layout("E|(t|)*99999999999L")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


@pytest.mark.parametrize(("value", "decoded"), [(2, 2), ("2", 2), ("-3", -3)])
def test_exact_integers_pass_and_digit_strings_decode(value, decoded):
    schema = {"properties": {"k": {"type": "integer"}}}
    assert exact_arguments({"k": value}, schema) == {"k": decoded}


@pytest.mark.parametrize("value", [" 2 ", True, 2.0, "2.0", "0x2", 2**63, "9" * 400])
def test_inexact_integers_are_refused_naming_the_key(value):
    knob = {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    schema = {"properties": {"config": {"$ref": "#/$defs/C"}},
              "$defs": {"C": {"type": "object", "properties": {"tp": knob}}}}
    with pytest.raises(InputError) as caught:
        exact_arguments({"config": {"tp": value}}, schema)
    assert caught.value.key == "config.tp"


def test_the_compact_schema_forms_are_read_the_same():
    """A type list and an enum of values (server/schemas.py writes optional knobs so) say integer or boolean too."""
    schema = {"properties": {"n": {"type": ["integer", "null"]}, "k": {"enum": [1, 2, None]},
                             "b": {"type": ["boolean", "null"]}, "xs": {"type": ["array", "null"], "items": {
                                 "type": "integer"}}}}
    assert exact_arguments({"n": "3", "k": "2", "b": "true", "xs": ["4"]}, schema) == \
        {"n": 3, "k": 2, "b": True, "xs": [4]}
    for key, value in (("n", True), ("k", 2.0), ("b", 1), ("xs", [True])):
        with pytest.raises(InputError) as caught:
            exact_arguments({key: value}, schema)
        assert caught.value.key == (f"{key}[0]" if key == "xs" else key)


def test_booleans_are_true_false_or_exactly_their_words():
    schema = {"properties": {"resume": {"type": "boolean"}}}
    assert exact_arguments({"resume": "false"}, schema) == {"resume": False}
    for value in ("1", 1, "yes", "True", 0.0):
        with pytest.raises(InputError, match="expected true or false"):
            exact_arguments({"resume": value}, schema)


@functools.cache
def _opened_without_blocking() -> set[str]:
    """Paths that must be opened with O_NONBLOCK, where a FIFO's open would wait for a writer that never comes:
    an audit hook (installed once per process, a no-op for any other path) fails a blocking open of one
    there and then."""
    watched: set[str] = set()

    def hook(event: str, args: tuple) -> None:
        if event == "open" and isinstance(args[0], str) and args[0] in watched and not (
                isinstance(args[2], int) and args[2] & os.O_NONBLOCK):
            raise AssertionError(f"{args[0]} was opened blocking (flags {args[2]!r})")

    sys.addaudithook(hook)
    return watched


def test_reads_refuse_fifos_nul_bytes_and_over_long_paths_without_waiting(tmp_path):
    fifo = str(tmp_path / "config.json")
    os.mkfifo(fifo)
    watched = _opened_without_blocking()
    watched.add(fifo)
    try:
        with pytest.raises(InputError, match="not a regular file"):
            read_text(fifo)
    finally:
        watched.discard(fifo)
    with pytest.raises(InputError, match="U\\+0000"):
        usable("a\x00b", key="extends")
    with pytest.raises(InputError, match="over the system's limit"):
        read_text("a/" * 500_000)


def test_each_failure_class_has_its_own_sentence():
    assert "disk is full" in describe(OSError(errno.ENOSPC, "No space left on device"))
    assert "ledger's disk is full" in describe(sqlite3.OperationalError("database or disk is full"))
    assert "locked" in describe(sqlite3.OperationalError("database is locked"))
    assert "too large" in describe(OverflowError("Python int too large to convert to SQLite INTEGER"))
    assert "nested too deeply" in describe(RecursionError())
    assert describe(KeyError("x")) is None  # a bug stays an internal error, its details in the log


def test_a_call_past_its_deadline_answers_and_its_work_stops():
    """The answer comes at the deadline, not when the work ends: work that would run 10,000 steps (~100 s)
    unless stopped is answered with the deadline's message and then stops at its next step."""
    stopped = threading.Event()

    def spin() -> None:
        try:
            for _ in range(10_000):
                checkpoint()
                time.sleep(0.01)
        except Cancelled:
            stopped.set()

    async def main() -> str:
        try:
            await off_loop(spin, what="the spin", deadline_s=0.3)
        except ToolError as exc:
            return str(exc)
        return "the work ran to its end"

    message = anyio.run(main)
    assert "the spin did not finish within 0.3 s and was stopped" in message
    assert stopped.wait(60)  # a hang guard only: the flag is set before the answer, the next step sees it


def test_a_stopped_sweep_ends_between_layouts():
    workload, cluster = example("llama8b")
    flag = threading.Event()
    flag.set()
    with stoppable(flag), pytest.raises(Cancelled):
        sweep(workload, cluster, top_k=1, jobs=1)


def test_a_stopped_caller_stops_the_pipeline_timeline():
    """The timeline checks the stop flag once per pass over the ranks: a set flag ends it at once (called
    past its cache, which could otherwise answer without building)."""
    flag = threading.Event()
    flag.set()
    with stoppable(flag), pytest.raises(Cancelled):
        rank_orders_program.__wrapped__("1f1b", 7, 1, 13)


def test_answers_never_show_the_ledger_path_and_name_the_right_key(tmp_path):
    with in_process(tmp_path) as (server, session), portal_client(server) as (portal, client):
        missing = portal.call(client.call_tool, "record_measurement", {"trial_id": 999, "tokens_per_s_per_gpu": 1.0})
        unknown = portal.call(client.call_tool, "explain", {"to_config": {"bogus": 1}})
    assert missing.is_error and str(session.ledger.path) not in missing.content[0].text
    assert "the ledger" in missing.content[0].text
    assert unknown.is_error and "to_config.bogus: unknown key" in unknown.content[0].text
