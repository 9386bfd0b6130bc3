"""Stack-aware search and the user's constraints: a knob the cluster's stack lacks never appears;
precision stays the workload's unless allowed; --fix / --allow / --exclude, the cluster YAML's
`search:` block and the MCP tools all honour the same rules and name the one that refused."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from paratune.oracle.constraints import pinned, rule_violations, search_axes, search_rules
from paratune.oracle.errors import InputError
from paratune.oracle.evaluate import evaluate_memory_only
from paratune.oracle.inputs import load_cluster, load_workload
from paratune.oracle.legality import validate
from paratune.oracle.specs import TrialConfig
from paratune.oracle.specs.search import SearchConstraints
from paratune.planner.search import sweep as sweep_module
from paratune.planner.search.seed_plan import seed_plan
from paratune.planner.search.space import (
    enumerate_layouts,
    enumerate_space,
    knob_points,
    layout_knobs,
    menu,
)
from paratune.planner.search.sweep import sweep

from .conftest import EXAMPLES, example
from .test_server_common import PARATUNE, in_process, portal_client

MIXTRAL = EXAMPLES / "workloads" / "mixtral-8x22b-mi355x-recipe.yaml"
ROCM_ONLY = ("use_turbo_deepep", "sync_free_stage")


def _rocm_only(t: TrialConfig) -> list[str]:
    """The ROCm/Primus-only settings a trial turns on (the knobs, or a zero-bubble schedule)."""
    out = [k for k in ROCM_ONLY if getattr(t, k)]
    return out + (["pp_schedule"] if t.pp_schedule in ("zb", "zbv") else [])


def _nvidia_only(t: TrialConfig) -> list[str]:
    """NVIDIA-only settings: Megatron's flex dispatcher backends without Primus-Turbo, HybridEP, CUDA graphs."""
    out = ["flex"] if t.moe_token_dispatcher_type == "flex" and not t.use_turbo_deepep else []
    out += ["hybridep"] if t.moe_flex_dispatcher_backend == "hybridep" else []
    return out + (["cuda_graph_impl"] if t.cuda_graph_impl not in (None, "none") else [])


def _mixtral_on(cluster_file: str):
    return load_workload(MIXTRAL), load_cluster(EXAMPLES / "clusters" / cluster_file)


def _slice(w, c, tp=1):
    """A slice of the Mixtral space holding every schedule and dispatcher (TP 1, PP 4, CP 1, MBS 1)."""
    return [x for x in enumerate_layouts(w, c) if x["tp"] == tp and x["pp"] == 4 and x["cp"] == 1 and x["mbs"] == 1]


def _points(w, c, tp=1):
    """Every point of the Mixtral slice (`_slice`): the space's points on those layouts (`enumerate_space`
    yields `knob_points` of each layout), built without the rest of the space."""
    m = menu(w, c)
    return [t for x in _slice(w, c, tp) for t in knob_points(*layout_knobs(w, x, m))]


def test_an_h100_cluster_offers_no_rocm_only_knob(monkeypatch):
    w, c = _mixtral_on("h100-8n.yaml")  # the Primus Mixtral recipe on 64 H100: Megatron-LM by default
    assert (c.stack, c.stack_is_default) == ("megatron-lm", True)
    axes = search_axes(w, c)
    assert axes.use_turbo_deepep == [False] and axes.sync_free_stage == [0]
    assert set(axes.pp_schedule) == {"1f1b", "interleaved"} and "flex" in axes.moe_token_dispatcher_type
    assert not [t for _, t in seed_plan(w, c, budget=300) if _rocm_only(t)]
    layouts = _slice(w, c)
    points = _points(w, c)
    assert points and not [t for t in points if _rocm_only(t)]
    assert any(t.moe_token_dispatcher_type == "flex" for t in points)  # NVIDIA's DeepEP path is searched
    monkeypatch.setattr(sweep_module, "candidate_layouts", lambda *_: iter(layouts))
    winner = TrialConfig(**{k: v for k, v in sweep(w, c, top_k=1, jobs=1).top[0].config.items()
                            if k in TrialConfig.model_fields})
    assert not _rocm_only(winner)
    result = evaluate_memory_only(w, c, TrialConfig(use_turbo_deepep=True, sync_free_stage=1))
    assert {"stack_knob"} <= {v.code for v in result.violations} and not result.legal


def test_an_mi355x_primus_cluster_offers_no_nvidia_only_knob(monkeypatch):
    w, c = _mixtral_on("mi355x-4n.yaml")
    assert c.stack == "primus"
    axes = search_axes(w, c)
    assert axes.moe_flex_dispatcher_backend == ["deepep"] and True in axes.use_turbo_deepep
    seeds = [t for _, t in seed_plan(w, c, budget=300)]
    assert not [t for t in seeds if _nvidia_only(t)] and any(t.use_turbo_deepep for t in seeds)
    layouts = _slice(w, c)
    points = _points(w, c)
    assert points and not [t for t in points if _nvidia_only(t)]
    monkeypatch.setattr(sweep_module, "candidate_layouts", lambda *_: iter(layouts))
    cfg = sweep(w, c, top_k=1, jobs=1).top[0].config
    assert not _nvidia_only(TrialConfig(**{k: v for k, v in cfg.items() if k in TrialConfig.model_fields}))
    flex = evaluate_memory_only(w, c, TrialConfig(moe_token_dispatcher_type="flex"))
    assert "flex_rocm" in {v.code for v in flex.violations}
    hybrid = evaluate_memory_only(w, c, TrialConfig(moe_token_dispatcher_type="flex",
                                                    moe_flex_dispatcher_backend="hybridep"))
    assert {"stack_knob", "flex_rocm"} <= {v.code for v in hybrid.violations}


@pytest.mark.parametrize("cluster_file", ["h100-8n.yaml", "mi355x-4n.yaml"])
def test_every_point_is_legal_with_fp8_allowed(cluster_file):
    """The knob loop builds only legal combinations, also where FP8 meets the overlaps (on ROCm, Primus's
    TP overlap excludes FP8) and the dispatchers."""
    w, c = _mixtral_on(cluster_file)
    c = c.model_copy(update={"search": SearchConstraints(allow={"fp8": ("none", "hybrid")})})
    points = _points(w, c, tp=2)
    assert len(points) > 100
    assert any(t.fp8 == "hybrid" and t.tp_comm_overlap for t in points) == (c.gpu.vendor == "nvidia")
    rules = search_rules(w, c)
    bad = [t for t in points if validate(w.model, w.effective(t), c) or rule_violations(rules, w.effective(t))]
    assert bad == []


def test_a_bf16_workload_keeps_bf16_unless_fp8_is_allowed():
    w, c = example("llama8b")  # BF16 on MI300X (FP8-capable)
    assert w.effective().fp8 is None and c.gpu.has_fp8
    assert search_axes(w, c).fp8 == ["none"]
    assert all(t.fp8 in (None, "none") for t in enumerate_space(w, c))
    assert sweep(w, c, top_k=3, jobs=1).top[0].config["fp8"] is None
    refused = evaluate_memory_only(w, c, TrialConfig(fp8="hybrid"))
    assert [v.code for v in refused.violations] == ["constraint_precision"]
    allowed = c.model_copy(update={"search": SearchConstraints(allow={"fp8": ("none", "hybrid")})})
    assert "hybrid" in search_axes(w, allowed).fp8
    assert any(t.fp8 == "hybrid" for t in enumerate_space(w, allowed))
    assert evaluate_memory_only(w, allowed, TrialConfig(fp8="hybrid")).legal


def test_fix_allow_and_exclude_bind_the_space_the_seeds_and_every_evaluation():
    w, c = example("llama8b")
    rules = SearchConstraints(fix={"tp": 2}, allow={"mbs": (1, 2)}, exclude=("recompute_granularity",))
    cc = c.model_copy(update={"search": rules})
    points = list(enumerate_space(w, cc))
    assert points and {t.tp for t in points} == {2} and {t.mbs for t in points} <= {1, 2}
    assert {w.effective(t).recompute_granularity for t in points} == {w.effective().recompute_granularity}
    rules_ = search_rules(w, cc)
    assert all(not rule_violations(rules_, w.effective(t)) for _, t in seed_plan(w, cc, budget=200))
    refused = evaluate_memory_only(w, cc, TrialConfig(tp=4, mbs=4, recompute_granularity="full"))
    codes = {v.code for v in refused.violations}
    assert {"constraint_fix", "constraint_allow", "constraint_exclude"} <= codes


def test_a_constraint_naming_an_unknown_knob_or_bad_value_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="unknown knob 'tpp'"):
        SearchConstraints(fix={"tpp": 2})
    cluster = yaml.safe_load((EXAMPLES / "clusters" / "h100-8n.yaml").read_text())
    cluster["search"] = {"allow": {"mbs": ["two"]}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cluster))
    with pytest.raises(InputError) as err:
        load_cluster(path)
    assert str(path) in str(err.value) and "search" in str(err.value)
    proc = subprocess.run([PARATUNE, "project", "memory", "--workload",
                           str(EXAMPLES / "workloads" / "llama3-70b-h100.yaml"), "--target-cluster",
                           str(EXAMPLES / "clusters" / "h100-8n.yaml"), "--fix", "tp=x"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "tp" in proc.stderr and "Traceback" not in proc.stderr


def test_the_cli_fix_flag_pins_the_knob_and_names_the_constraint():
    args = [PARATUNE, "project", "memory", "--json", "--workload",
            str(EXAMPLES / "workloads" / "llama3-70b-h100.yaml"), "--target-cluster",
            str(EXAMPLES / "clusters" / "h100-8n.yaml"), "--fix", "tp=8"]
    pinned = json.loads(subprocess.run(args, capture_output=True, text=True, timeout=120, check=True).stdout)
    assert pinned["config"]["tp"] == 8  # an absent knob takes the pinned value
    other = json.loads(subprocess.run([*args, "--set", "tp=4"], capture_output=True, text=True, timeout=120,
                                      check=True).stdout)
    assert not other["legal"] and [v["code"] for v in other["violations"]] == ["constraint_fix"]


def test_mcp_tools_honour_the_cluster_files_search_block(tmp_path):
    with in_process(tmp_path, search={"fix": {"tp": 2}}) as (server, _), portal_client(server) as (portal, client):
        def call(name, **args):
            return portal.call(client.call_tool, name, args)

        axes = call("get_legal_axes").structured_content
        assert axes["tp"] == [2] and axes["moe_flex_dispatcher_backend"] == ["deepep"]
        refused = call("evaluate_memory_only", config={"tp": 1}).structured_content["result"]
        assert not refused["legal"] and refused["violations"][0]["code"] == "constraint_fix"
        check = call("validate_config",
                     config={"cuda_graph_impl": "transformer_engine"}).structured_content  # NVIDIA-only
        assert "stack_knob" in {v["code"] for v in check["violations"]}


def test_off_spellings_pins_on_unsearched_knobs_and_stale_primus_settings_keep_the_space_legal():
    w, c = _mixtral_on("mi355x-4n.yaml")
    # Megatron's own "none" for CUDA graphs is the baseline, not a different (graphed) layout
    assert w.effective(TrialConfig(cuda_graph_impl="none")).key == w.effective().key
    assert evaluate_memory_only(w, c, TrialConfig(cuda_graph_impl="none")).legal
    # the slice's own layout knobs pinned too: the same points (`_points`), without checking the whole space's
    pins = SearchConstraints(fix={"cross_entropy_loss_fusion": False, "recompute_method": "block",
                                  "recompute_num_layers": 1, "cuda_graph_impl": "none",
                                  "tp": 1, "pp": 4, "cp": 1, "mbs": 1})
    pinned_c = c.model_copy(update={"search": pins})
    pinned_w = pinned(w, pinned_c)
    points = _points(pinned_w, pinned_c)
    cfgs = [pinned_w.effective(t) for t in points]
    assert cfgs and not any(c_.cross_entropy_loss_fusion for c_ in cfgs)
    full = {(c_.recompute_method, c_.recompute_num_layers) for c_ in cfgs if c_.recompute_granularity == "full"}
    assert full == {("block", 1)}
    rules = search_rules(pinned_w, pinned_c)
    assert not [x for x in cfgs if validate(w.model, x, pinned_c) or rule_violations(rules, x)]
    # a workload that sets Primus-Turbo DeepEP and sync-free stage 2: without EP both are off, with EP
    # the stage is not searched, and no two points are the same layout
    turbo = w.model_copy(update={"training": w.training.model_copy(update={"use_turbo_deepep": True,
                                                                           "turbo_sync_free_moe_stage": 2})})
    slice_ = _points(turbo, c)
    keys = [turbo.effective(t).key for t in slice_]
    assert len(keys) == len(set(keys)) and {t.sync_free_stage for t in slice_} == {0}
    assert not [t for t in slice_ if validate(w.model, turbo.effective(t), c)]


def test_sync_free_stages_are_validated_as_primus_does_but_not_searched():
    w, c = _mixtral_on("mi355x-4n.yaml")
    assert search_axes(w, c).sync_free_stage == [0, 1, 2, 3]  # legal on Primus, so a user may set it
    # the recipe's legacy grouped GEMM excludes stages 2-3 (Primus rocm_arg_validation.py); without it, legal
    stage2 = TrialConfig(use_turbo_deepep=True, sync_free_stage=2, etp=1)
    assert "legacy_gg_turbo" in {v.code for v in evaluate_memory_only(w, c, stage2).violations}
    w = w.model_copy(update={"training": w.training.model_copy(update={"moe_use_legacy_grouped_gemm": False})})
    assert evaluate_memory_only(w, c, stage2).legal
    assert "sync_free_etp" in {v.code for v in evaluate_memory_only(
        w, c, TrialConfig(use_turbo_deepep=True, sync_free_stage=2, etp=2)).violations}
    assert not any(t.sync_free_stage for t in _points(w, c))


def test_a_proposal_a_constraint_refuses_spends_no_budget(tmp_path):
    with in_process(tmp_path) as (server, _), portal_client(server) as (portal, client):
        def call(name, **args):
            return portal.call(client.call_tool, name, args).structured_content

        before = call("get_budget_status")["fidelities"]["simulate"]["spent"]
        refused = call("evaluate_simulate", config={"fp8": "hybrid"})  # the workload is BF16
        assert refused["result"]["violations"][0]["code"] == "constraint_precision"
        assert call("get_budget_status")["fidelities"]["simulate"]["spent"] == before
