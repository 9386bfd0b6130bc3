"""`explain`: the single-knob path from the README's Mixtral recipe to a winner, its telescoping sum, the
term diff that partitions the iteration and the memory, and the same data from the CLI and over a real
stdio MCP server."""

from __future__ import annotations

import json
import subprocess

import anyio
import pytest
from mcp import Client, StdioServerParameters
from rich.console import Console

from paratune.oracle.evaluate import evaluate_simulate
from paratune.oracle.inputs import load_cluster, load_workload
from paratune.oracle.memory.estimate import NON_GIB_KEYS
from paratune.oracle.specs import EvalResult, TrialConfig
from paratune.planner.search.explanation import (
    MEMORY_GROUPS,
    TIME_TERMS,
    Explanation,
    Step,
    explain,
    knob_changes,
    short_text,
)

from .conftest import EXAMPLES
from .test_server_common import PARATUNE

WORKLOAD = EXAMPLES / "workloads" / "mixtral-8x22b-mi355x-recipe.yaml"
CLUSTER = EXAMPLES / "clusters" / "mi355x-4n.yaml"
# The main job's sweep optimum: PP2 with 29 virtual stages (embedding and loss in the split), Primus-Turbo
# DeepEP with EP overlap, no recompute.
WINNER = TrialConfig(pp=2, vpp=29, pp_embedding_in_split=True, pp_loss_in_split=True, recompute_granularity="none",
                     use_turbo_deepep=True, moe_token_dispatcher_type="flex", overlap_moe_expert_parallel_comm=True)


@pytest.fixture(scope="module")
def mixtral():
    w, c = load_workload(WORKLOAD), load_cluster(CLUSTER)
    return w, c, explain(w, c, TrialConfig(), WINNER)


def test_the_steps_sum_to_the_total_and_end_at_the_winner(mixtral):
    w, c, x = mixtral
    direct = evaluate_simulate(w, c, WINNER)
    assert x.winner.config_key == direct.config_key and x.winner.tokens_per_s_per_gpu == direct.tokens_per_s_per_gpu
    assert x.baseline.config_key == evaluate_simulate(w, c).config_key
    gains = [s.delta_tokens_per_s_per_gpu for s in x.steps if s.delta_tokens_per_s_per_gpu is not None]
    assert sum(gains) == pytest.approx(x.delta_tokens_per_s_per_gpu, abs=1e-6)
    assert x.delta_tokens_per_s_per_gpu == pytest.approx(direct.tokens_per_s_per_gpu - x.baseline.tokens_per_s_per_gpu)
    # every differing knob is changed exactly once, to the winner's value
    changed = [k for s in x.steps for k in s.knobs]
    assert sorted(changed) == sorted(knob_changes(w, TrialConfig(), WINNER))
    assert all(s.legal for s in x.steps if s.tokens_per_s_per_gpu is not None)


def test_term_diffs_partition_the_iteration_and_the_memory(mixtral):
    _, _, x = mixtral
    assert [t.term for t in x.time_terms_ms] == list(TIME_TERMS)
    for r, side in ((x.baseline, "baseline"), (x.winner, "winner")):
        assert sum(getattr(t, side) for t in x.time_terms_ms) == pytest.approx(r.iteration_ms, rel=1e-9)
        assert sum(getattr(t, side) for t in x.memory_terms_gb) == pytest.approx(r.memory_per_gpu_gb, rel=1e-9)
    assert sum(t.delta for t in x.time_terms_ms) == pytest.approx(x.winner.iteration_ms - x.baseline.iteration_ms)
    # no GiB term of the memory breakdown is left out of the groups (NON_GIB_KEYS are counts)
    grouped = {k for keys in MEMORY_GROUPS.values() for k in keys}
    assert {k for k in x.winner.breakdown if k.startswith("mem_") and k not in NON_GIB_KEYS} == grouped


def test_the_same_change_alone_and_on_the_path_can_differ(mixtral):
    _, _, x = mixtral
    pp = next(s for s in x.steps if "pp" in s.knobs)
    # pp 4 -> 2 after recompute is off gains less than on the recipe itself: the order is stated
    assert pp.alone_delta_tokens_per_s_per_gpu is not None and pp.delta_tokens_per_s_per_gpu is not None
    assert pp.alone_delta_tokens_per_s_per_gpu != pytest.approx(pp.delta_tokens_per_s_per_gpu)
    assert "order" in x.order and "alone" in x.order


def test_cli_prints_the_path_and_the_json_is_the_explanation(mixtral):
    _, _, x = mixtral
    to = json.dumps(WINNER.model_dump(exclude_none=True))
    base = [PARATUNE, "explain", "--workload", str(WORKLOAD), "--target-cluster", str(CLUSTER), "--to", to]
    text = subprocess.run(base, capture_output=True, text=True, timeout=120, check=True).stdout
    assert f"in {len(x.steps)} step(s)" in text and "vpp: 2 -> 29" in text and "time terms" in text
    data = json.loads(subprocess.run([*base, "--json"], capture_output=True, text=True, timeout=120, check=True).stdout)
    assert data["delta_tokens_per_s_per_gpu"] == pytest.approx(x.delta_tokens_per_s_per_gpu)
    missing = subprocess.run(base[:-2], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "--to" in missing.stderr and "Traceback" not in missing.stderr


def test_mcp_explain_over_stdio_returns_the_same_structured_data(mixtral, tmp_path):
    _, _, x = mixtral
    params = StdioServerParameters(command=PARATUNE, args=["serve", "--workload", str(WORKLOAD), "--target-cluster",
                                                           str(CLUSTER), "--ledger", str(tmp_path / "l.sqlite")])

    async def session():
        async with Client(params) as client:
            got = await client.call_tool("explain", {"to_config": WINNER.model_dump(exclude_none=True)})
            empty = await client.call_tool("explain", {})  # no trial yet: the run has no best
            return got, empty

    got, empty = anyio.run(session)
    assert not got.is_error
    assert got.structured_content["steps"] == json.loads(x.model_dump_json())["steps"]
    assert got.structured_content["time_terms_ms"] == json.loads(x.model_dump_json())["time_terms_ms"]
    assert empty.is_error and "no legal trial" in empty.content[0].text


def test_explain_of_a_run_goes_to_its_pick(tmp_path):
    base = ["--workload", str(WORKLOAD), "--target-cluster", str(CLUSTER)]
    subprocess.run([PARATUNE, "tune", *base, "--out-dir", str(tmp_path), "--seed-only"], capture_output=True,
                   text=True, timeout=300, check=True)
    summary = json.loads((tmp_path / "summary.json").read_text())
    out = subprocess.run([PARATUNE, "explain", *base, "--out-dir", str(tmp_path), "--json"], capture_output=True,
                         text=True, timeout=120, check=True)
    x = json.loads(out.stdout)
    assert (x["winner"]["config_key"] == summary["winner"]["config_key"]
            == summary["attribution"]["winner"]["config_key"])
    assert x["steps"] == summary["attribution"]["steps"]


def _result(tps: float, memory: float, fits: bool = True) -> EvalResult:
    return EvalResult(legal=True, fits=fits, tokens_per_s_per_gpu=tps, memory_per_gpu_gb=memory, memory_cap_gb=76.0,
                      source="simulate")


def _step(knobs: dict, was: dict, tps: float, memory: float, delta: float, freed: float, **flags) -> Step:
    return Step(knobs=knobs, was=was, legal=True, fits=memory <= 76.0, tokens_per_s_per_gpu=tps,
                memory_per_gpu_gb=memory, delta_tokens_per_s_per_gpu=delta, delta_memory_gb=freed,
                alone_delta_tokens_per_s_per_gpu=delta, **flags)


def test_every_steps_verdict_is_plain_text_and_negligible_steps_leave_the_path():
    """The issue's path: "ep 16->1: +42.6 %" was scored on a 176.5 GiB layout and printed without its verdict
    (rich read " [does not fit]" as markup); "etp 1->2 +0.0" was listed as a step."""
    x = Explanation(baseline=_result(1000.0, 60.0), winner=_result(1430.0, 70.0), delta_tokens_per_s_per_gpu=430.0,
                    delta_memory_gb=10.0, time_terms_ms=[], memory_terms_gb=[], steps=[
                        _step({"ep": 1}, {"ep": 16}, 1426.0, 176.5, 426.0, 116.5),
                        _step({"etp": 2}, {"etp": 1}, 1426.0, 176.5, 0.0, 0.0, negligible=True),
                        _step({"tp": 8}, {"tp": 4}, 1430.0, 70.0, 4.0, -106.5, pinned=True)])
    console = Console(markup=False, highlight=False, record=True, width=400)  # as `tune` prints
    console.print("\n".join(short_text(x)))
    text = console.export_text()
    assert "ep: 16 -> 1: +426.0 (+42.6%), memory +116.5 GiB, does not fit: 176.5 GiB per GPU" in text
    assert "tp: 4 -> 8 (pinned): +4.0 (+0.4%)" in text and ", fits;" in text
    assert "  etp: 1 -> 2:" not in text
    assert "also changed, each under 0.5% with no memory freed: etp: 1 -> 2" in text

