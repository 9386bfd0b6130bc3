"""Host issue time and CUDA graphs (oracle/performance/host_issue.py): the scopes a graph setting
captures follow megatron-core's own enum and rules, and a small-expert MoE layer that the host cannot
feed fast enough waits on it, until a graph replays the layer with one launch. Expected values are
derived by hand in each test from the module's stated counts."""

from __future__ import annotations

import pytest

from paratune.oracle.catalog import gpu, model_card
from paratune.oracle.layout import layout_facts
from paratune.oracle.model_shape import model_shape
from paratune.oracle.performance.calibration import constants
from paratune.oracle.performance.host_issue import GRAPHABLE, captured, host_bound, host_forward_ms
from paratune.oracle.performance.layers import transformer_layer
from paratune.oracle.performance.moe_layer import host_syncs
from paratune.oracle.performance.pipeline import block_weights, layer_context
from paratune.oracle.performance.work import OVH
from paratune.oracle.specs import ClusterSpec, ModelArch, TrainingArgs, Workload

GB200 = gpu("gb200")
C = constants(GB200)


def test_graphable_scopes_are_megatron_core_scopes():
    """Every scope the model replays, and `full_iteration`, is a member of megatron-core's CudaGraphScope."""
    from megatron.core.transformer.enums import CudaGraphScope  # imported here: megatron-core loads torch (seconds)

    assert set(GRAPHABLE) | {"full_iteration"} <= set(CudaGraphScope.__members__)


def test_captured_scopes_follow_megatron_core_rules():
    """transformer_config.py: an empty scope is the whole layer; `full_iteration` everything; the local
    implementation captures router and preprocess together; no graphs without an implementation."""
    assert captured("none", ("attn",)) == frozenset()
    assert captured("transformer_engine", None) == frozenset(GRAPHABLE)
    assert captured("local", ("full_iteration",)) == frozenset(GRAPHABLE)
    assert captured("transformer_engine", ("attn", "moe_router")) == {"attn", "moe_router"}
    assert captured("local", ("attn", "moe_router")) == {"attn", "moe_router", "moe_preprocess"}


def _qwen3_30b(**training):
    """Qwen3-30B-A3B on 16 GB200 (NVL72 domain of 16), TP1 EP16, MBS 4, seq 4096, MXFP8, HybridEP:
    Megatron-LM's published recipe (examples/moe_recipes/qwen3_30b/gb200)."""
    model = ModelArch(**model_card("qwen3-30b-a3b"))
    args = dict(seq_length=4096, global_batch_size=512, micro_batch_size=4, expert_model_parallel_size=16,
                moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="hybridep", moe_grouped_gemm=True,
                moe_permute_fusion=True, fp8="hybrid", fp8_recipe="mxfp8", bf16=True,
                use_distributed_optimizer=True) | training
    cfg = Workload(name="q30", model=model, training=TrainingArgs(**args)).effective()
    cluster = ClusterSpec(name="gb200", num_nodes=1, gpus_per_node=16, gpu=GB200, hbm_capacity_gb=186)
    shape = model_shape(model)
    ctx = layer_context(shape, cfg, cluster, C, layout_facts(model, cfg, cluster.world_size))
    return ctx, transformer_layer(ctx, True, block_weights(shape, 1, 1, 16, False, 4096)[1])


def test_host_launches_of_an_fp8_moe_layer_by_hand():
    """No graphs: attention 9 + 2 FP8 quantisations, router 8, preprocess 5, experts 6 + 2 quantisations
    for each of the 8 local experts (128 / EP 16), no shared expert: 44 launches at launch_us each."""
    ctx, _ = _qwen3_30b()
    assert host_forward_ms(ctx, True) == pytest.approx((11 + 8 + 5 + 6 + 16) * C.launch_us * 1e-3)


def test_graphs_replay_a_scope_with_one_launch_and_a_dispatch_sync_survives_the_preprocess_graph():
    """attn, moe_router and moe_preprocess captured: those scopes cost one launch each (3), the experts
    their 22. HybridEP still syncs inside the dispatch (megatron-core token_dispatcher.py
    `_HybridEPManager.setup_metadata`: without `moe_expert_rank_capacity_factor` it "sizes buffers
    dynamically (CPU sync in dispatch)"); the all-to-all dispatcher's sync sits in the preprocess, which a
    graph cannot hold, so its captured preprocess has none; a graph of the whole MoE (sync-free) has none."""
    partial = dict(cuda_graph_impl="transformer_engine", cuda_graph_scope=("attn", "moe_router", "moe_preprocess"))
    ctx, _ = _qwen3_30b(**partial)
    assert host_forward_ms(ctx, True) == pytest.approx((3 + 22) * C.launch_us * 1e-3)
    assert host_syncs(ctx) == pytest.approx(C.host_sync_us * 1e-3)
    a2a, _ = _qwen3_30b(moe_token_dispatcher_type="alltoall", **partial)
    assert host_syncs(a2a) == 0.0
    full, _ = _qwen3_30b(cuda_graph_impl="local", cuda_graph_scope=("full_iteration",))
    assert host_syncs(full) == 0.0
    eager, _ = _qwen3_30b()
    assert host_syncs(eager) == pytest.approx(C.host_sync_us * 1e-3)


def test_a_dispatch_sync_exposes_a_host_heavy_expert_scope():
    """Hand derivation (host_issue.host_bound): the partial-graph layer issues 22 launches for its experts
    (h_E) and 3 replays for attention, router and preprocess (h_A). Say the attention block's GPU time is
    1 ms and the whole forward's 1 ms + h_E / 2. With the dispatch sync the host starts the experts only
    when the GPU has drained, and the next attention only after issuing them: the forward takes
    h_E + max(1 ms, h_A), so the GPU waits h_E / 2. Without a sync (all-to-all, preprocess captured) the
    host runs ahead: the wait is max(0, h_E + h_A - GPU)."""
    u = C.launch_us * 1e-3
    h_e, h_a = 22 * u, 3 * u
    gpu_f, pre_f = 1.0 + h_e / 2, 1.0
    partial = dict(cuda_graph_impl="transformer_engine", cuda_graph_scope=("attn", "moe_router", "moe_preprocess"))
    ctx, _ = _qwen3_30b(**partial)
    f, b = host_bound(ctx, True, gpu_f, 100.0, pre_f)
    assert f == pytest.approx(h_e + max(pre_f, h_a) - gpu_f) and f == pytest.approx(h_e / 2)
    assert b == 0.0  # the backward has no sync: 2 (h_E + h_A) is far below 100 ms
    a2a, _ = _qwen3_30b(moe_token_dispatcher_type="alltoall", **partial)
    f_a2a, _ = host_bound(a2a, True, gpu_f, 100.0, pre_f)
    assert f_a2a == pytest.approx(max(0.0, h_e + h_a - gpu_f)) and f_a2a < f


def test_the_gpu_waits_on_the_host_only_beyond_its_own_time():
    """OVH of the layer = its host syncs + max(0, host - GPU time) each pass (backward: twice the launches),
    and a full-iteration graph takes the wait away."""
    ctx, layer = _qwen3_30b()
    host = host_forward_ms(ctx, True)
    sync = host_syncs(ctx)
    gpu_f = sum(layer.f) - layer.f[OVH] + sync
    gpu_b = sum(layer.b) + sum(layer.w) - layer.b[OVH]
    assert layer.f[OVH] == pytest.approx(sync + max(0.0, host - gpu_f), abs=1e-12)
    assert layer.b[OVH] == pytest.approx(max(0.0, 2 * host - gpu_b), abs=1e-12)
    _, graphed = _qwen3_30b(cuda_graph_impl="local", cuda_graph_scope=("full_iteration",))
    assert layer.f[OVH] > sync  # eager, this layer is host-bound on GB200
    assert graphed.f[OVH] == graphed.b[OVH] == 0.0
