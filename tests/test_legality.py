"""Legality: per-axis legal sets and every violation of `validate`, derived from model and cluster."""

from __future__ import annotations

from paratune.oracle.legality import legal_axes, validate
from paratune.oracle.specs import TrialConfig

from .conftest import example


def codes(workload, cluster, **knobs):
    return {v.code for v in validate(workload.model, workload.effective(TrialConfig(**knobs)), cluster)}


def test_mixtral_tp_set_on_32_gpus_excludes_3_and_6():
    w, c = example("mixtral")
    axes = legal_axes(w.model, c, seq_length=8192, gbs=128)
    # 48 heads, 8 query groups, hidden 6144, ffn 16384, 8 GPUs per node: TP | gcd(...) and TP | 32 and TP <= 8
    assert axes.tp == [1, 2, 4, 8]
    assert 3 not in axes.tp and 6 not in axes.tp
    # 56 layers: PP 1, 2, 4, 8 split evenly; PP 16 and 32 only with a layout string (56 decoders + E + L
    # = 58 units over 16 or 32 stages, Megatron's pipeline_model_parallel_layout), which the search may use.
    assert axes.pp == [1, 2, 4, 8, 16, 32]
    assert axes.ep == [1, 2, 4, 8]
    assert axes.fp8 == ["none", "hybrid", "e4m3"]


def test_shipped_baselines_are_legal(shipped):
    w, c = shipped
    assert validate(w.model, w.effective(), c) == []


def test_every_violation_is_reported_at_once():
    w, c = example("mixtral")
    found = codes(w, c, tp=3, cp=3, ep=3, use_torch_fsdp2=True, use_distributed_optimizer=True, sync_free_stage=4)
    assert {"world_attention", "world_expert", "tp_num_query_groups", "tp_ffn_hidden_size", "cp_seq", "ep_experts",
            "fsdp_distopt", "sync_free_range"} <= found


def test_schedule_rules():
    w, c = example("llama70b")  # PP4 VPP5, 80 layers, 64 GPUs
    assert "zb_recompute" in codes(w, c, pp_schedule="zb", vpp=1, recompute_granularity="selective")
    assert "zbv_vpp" in codes(w, c, pp_schedule="zbv", vpp=5)
    assert codes(w, c, pp_schedule="zbv", vpp=2) == set()
    assert "zb_needs_pp" in codes(w, c, pp_schedule="zb", pp=1, vpp=1, tp=8, cp=1)
    assert "vpp_needs_pp" in codes(w, c, pp=1, vpp=2, tp=8)
    assert "split_vpp" in codes(w, c, vpp=3)  # 80 / PP4 = 20 layers per rank, 20 % 3 != 0
    # GBS 128, DP = 64/(4*4*2) = 2, MBS 1 -> 64 micro-batches; MBS 16 -> 4 micro-batches, 4 % PP=4 == 0 ok;
    # GBS 40 -> 20 micro-batches, 20 % 4 == 0; GBS 24 -> 12 % 4 == 0; GBS 12, MBS 1 -> 6 % 4 != 0
    assert "interleaved_microbatches" in codes(w, c, gbs=12)
    assert "gbs_mbs_dp" in codes(w, c, gbs=12, mbs=4)  # 12 % (4*2) != 0


def test_feature_rules():
    w, c = example("llama70b")
    assert "deepep_moe" in codes(w, c, use_turbo_deepep=True)
    assert "sync_free_moe" in codes(w, c, sync_free_stage=1)
    assert "tp_node" in codes(w, c, tp=16, pp=2, vpp=1, cp=1)
    m, mc = example("mixtral")
    assert "deepep_moe" in codes(m, mc, ep=1, use_turbo_deepep=True)
    assert codes(m, mc, use_turbo_deepep=True, sync_free_stage=2) == set()
    # 56 layers / PP4 = 14 per stage
    assert "recompute_num_layers" in codes(m, mc, recompute_granularity="full", recompute_num_layers=15)
    assert codes(m, mc, recompute_granularity="full", recompute_num_layers=14) == set()


def test_fp8_only_on_gpus_that_have_it(tmp_path):
    from paratune.oracle.inputs import load_cluster

    f = tmp_path / "a100.yaml"
    f.write_text("target_cluster: {num_nodes: 8, gpus_per_node: 8, gpu_arch: a100-80g}\n")
    a100 = load_cluster(f)
    w, _ = example("llama70b")
    assert "fp8_gpu" in codes(w, a100, fp8="hybrid")
    assert legal_axes(w.model, a100, seq_length=8192, gbs=128).fp8 == ["none"]


def test_uneven_pipeline_split_for_61_layers():
    w, c = example("deepseek")  # 61 layers, PP8, decoder_last_pipeline_num_layers 5 (Primus run_dsv3.sh)
    axes = legal_axes(w.model, c, seq_length=4096, gbs=1024)
    assert 8 in axes.pp  # 7 stages of 8 + a last stage of 5
    assert codes(w, c) == set()
    # Without the split flag Megatron refuses: 61 % 8 != 0 (transformer_block.get_num_layers_to_build).
    assert "split_pp" in codes(w, c, pp_last_layers=None, pp_embedding_in_split=False)


def test_legacy_grouped_gemm_rules():
    """megatron-core 0.16.1's legacy GroupedMLP (transformer/moe/experts.py) asserts no bias and refuses
    moe_act recompute under FP8; Primus (rocm_arg_validation.py) refuses it beside Turbo's grouped GEMM,
    which sync-free stages 2-3 need. Without grouped GEMM the flag selects nothing (SequentialMLP)."""
    m, mc = example("mixtral")  # Mixtral 8x22B on 4 x 8 MI355X, Primus
    legacy = m.model_copy(update={"training": m.training.model_copy(
        update={"moe_grouped_gemm": True, "moe_use_legacy_grouped_gemm": True})})
    assert codes(legacy, mc) == set()
    assert "legacy_gg_turbo" in codes(legacy, mc, use_turbo_deepep=True, sync_free_stage=2)
    assert "legacy_gg_turbo" not in codes(legacy, mc, use_turbo_deepep=True, sync_free_stage=1)
    act = dict(recompute_granularity="selective", recompute_modules=["moe_act"])
    assert codes(legacy, mc, **act) == set()
    assert "legacy_gg_moe_act_fp8" in codes(legacy, mc, fp8="hybrid", **act)
    biased = legacy.model_copy(update={"model": legacy.model.model_copy(update={"add_bias_linear": True})})
    assert "legacy_gg_bias" in codes(biased, mc, etp=1)
    sequential = legacy.model_copy(update={"training": legacy.training.model_copy(update={"moe_grouped_gemm": False})})
    assert "legacy_gg_bias" not in codes(sequential.model_copy(update={"model": biased.model}), mc, etp=1)


def test_shared_expert_overlap_rules():
    """Megatron-LM d98e8a6 transformer/transformer_config.py `__post_init__`, on a model with shared experts:
    moe_shared_expert_overlap "only works with alltoall or flex token dispatcher", the shared_experts recompute
    module "cannot work with --moe-shared-expert-overlap", and EP all-to-all overlap asserts "disable
    moe_shared_expert_overlap". Mixtral has no shared expert: megatron-core checks nothing there."""
    w, c = example("deepseek")  # DeepSeek-V3 (one shared expert, 2048 wide), allgather dispatcher, full recompute

    def overlapped(workload):
        return workload.model_copy(update={"training": workload.training.model_copy(
            update={"moe_shared_expert_overlap": True})})

    assert codes(w, c) == set()
    assert codes(overlapped(w), c) == {"shared_overlap_dispatcher"}
    assert codes(overlapped(w), c, moe_token_dispatcher_type="alltoall") == set()
    assert codes(overlapped(w), c, moe_token_dispatcher_type="flex") == set()
    assert "shared_overlap_recompute" in codes(overlapped(w), c, moe_token_dispatcher_type="alltoall",
                                               recompute_granularity="selective", recompute_modules=["shared_experts"])
    assert "shared_overlap_ep_overlap" in codes(overlapped(w), c, overlap_moe_expert_parallel_comm=True)
    assert "shared_overlap_ep_overlap" not in codes(w, c, overlap_moe_expert_parallel_comm=True)
    m, mc = example("mixtral")
    assert codes(overlapped(m), mc, moe_token_dispatcher_type="allgather") == set()
