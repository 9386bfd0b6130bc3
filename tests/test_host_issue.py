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


def _qwen3_30b(gpu_spec=GB200, **training):
    """Qwen3-30B-A3B on 16 GB200 (NVL72 domain of 16), TP1 EP16, MBS 4, seq 4096, MXFP8, HybridEP:
    Megatron-LM's published recipe (examples/moe_recipes/qwen3_30b/gb200); `gpu_spec` swaps the GPU."""
    model = ModelArch(**model_card("qwen3-30b-a3b"))
    args = dict(seq_length=4096, global_batch_size=512, micro_batch_size=4, expert_model_parallel_size=16,
                moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="hybridep", moe_grouped_gemm=True,
                moe_permute_fusion=True, fp8="hybrid", fp8_recipe="mxfp8", bf16=True,
                use_distributed_optimizer=True) | training
    cfg = Workload(name="q30", model=model, training=TrainingArgs(**args)).effective()
    cluster = ClusterSpec(name="gb200", num_nodes=1, gpus_per_node=16, gpu=gpu_spec, hbm_capacity_gb=186)
    shape = model_shape(model)
    ctx = layer_context(shape, cfg, cluster, C, layout_facts(model, cfg, cluster.world_size))
    return ctx, transformer_layer(ctx, True, block_weights(shape, 1, 1, 16, False, 4096)[1])


def test_host_launches_of_an_fp8_moe_layer_by_hand():
    """No graphs: attention 9 + 2 FP8 quantisations, router 8, preprocess 5, experts 7 (dispatch, combine,
    unpermute, bias-dropout-add, grouped fc1, activation, grouped fc2) + 2 quantisations for each of the 8 local
    experts (128 / EP 16), no shared expert: 47 launches at the Grace host's launch time each."""
    ctx, _ = _qwen3_30b()
    assert host_forward_ms(ctx, True) == pytest.approx((11 + 8 + 5 + 7 + 16) * C.grace_launch_us * 1e-3)


def test_graphs_replay_a_scope_with_one_launch_and_a_dispatch_sync_survives_the_preprocess_graph():
    """attn, moe_router and moe_preprocess captured: those scopes cost one launch each (3), the experts
    their 23. HybridEP still syncs inside the dispatch (megatron-core token_dispatcher.py
    `_HybridEPManager.setup_metadata`: without `moe_expert_rank_capacity_factor` it "sizes buffers
    dynamically (CPU sync in dispatch)"); the all-to-all dispatcher's sync sits in the preprocess, which a
    graph cannot hold, so its captured preprocess has none; a graph of the whole MoE (sync-free) has none."""
    partial = dict(cuda_graph_impl="transformer_engine", cuda_graph_scope=("attn", "moe_router", "moe_preprocess"))
    ctx, _ = _qwen3_30b(**partial)
    assert host_forward_ms(ctx, True) == pytest.approx((3 + 23) * C.grace_launch_us * 1e-3)
    assert host_syncs(ctx) == pytest.approx(C.host_sync_us * 1e-3)
    a2a, _ = _qwen3_30b(moe_token_dispatcher_type="alltoall", **partial)
    assert host_syncs(a2a) == 0.0
    full, _ = _qwen3_30b(cuda_graph_impl="local", cuda_graph_scope=("full_iteration",))
    assert host_syncs(full) == 0.0
    eager, _ = _qwen3_30b()
    assert host_syncs(eager) == pytest.approx(C.host_sync_us * 1e-3)


def test_a_dispatch_sync_exposes_a_host_heavy_expert_scope():
    """Hand derivation (host_issue.host_bound): the partial-graph layer issues 23 launches for its experts
    (h_E) and 3 replays for attention, router and preprocess (h_A). Say the attention block's GPU time is
    1 ms and the whole forward's 1 ms + h_E / 2. With the dispatch sync the host starts the experts only
    when the GPU has drained, and the next attention only after issuing them: the forward takes
    h_E + max(1 ms, h_A), so the GPU waits h_E / 2. Without a sync (all-to-all, preprocess captured) the
    host runs ahead: the wait is max(0, h_E + h_A - GPU)."""
    u = C.grace_launch_us * 1e-3
    h_e, h_a = 23 * u, 3 * u
    gpu_f, pre_f = 1.0 + h_e / 2, 1.0
    partial = dict(cuda_graph_impl="transformer_engine", cuda_graph_scope=("attn", "moe_router", "moe_preprocess"))
    ctx, _ = _qwen3_30b(**partial)
    f, b = host_bound(ctx, True, gpu_f, 100.0, pre_f)
    assert f == pytest.approx(h_e + max(pre_f, h_a) - gpu_f) and f == pytest.approx(h_e / 2)
    assert b == 0.0  # the backward has no sync: 2 (h_E + h_A) is far below 100 ms
    a2a, _ = _qwen3_30b(moe_token_dispatcher_type="alltoall", **partial)
    f_a2a, _ = host_bound(a2a, True, gpu_f, 100.0, pre_f)
    assert f_a2a == pytest.approx(max(0.0, h_e + h_a - gpu_f)) and f_a2a < f


def test_the_host_cpu_sets_the_launch_time():
    """GB200 and GB300 NVL72 launch from Grace, B200 and B300 boards from an x86 host (catalog `host_cpu`): the
    same layer's 47 eager launches cost grace_launch_us each on GB200 and launch_us each on B200, the two
    constants the Blackwell rows fit apart (calibration.yaml), and nothing else of the layer changes."""
    assert [gpu(n).host_cpu for n in ("gb200", "gb300", "b200", "b300", "h100-sxm")] == [
        "grace", "grace", "x86", "x86", "x86"]
    grace, _ = _qwen3_30b()
    x86, _ = _qwen3_30b(gpu("b200"))
    assert C.grace_launch_us != C.launch_us
    assert host_forward_ms(grace, True) / host_forward_ms(x86, True) == pytest.approx(C.grace_launch_us / C.launch_us)
    assert host_forward_ms(x86, True) == pytest.approx(47 * C.launch_us * 1e-3)
    # a family with no Grace rows (Hopper: a user's GH200) scales its x86 time by issue #2053's per-op host times,
    # a torch Linear forward 37.08 us on GB200's Grace against 13.48 us on a DGX H100's Xeon 8480C
    hopper = constants(gpu("h100-sxm"))
    assert hopper.grace_launch_us == pytest.approx(hopper.launch_us * 37.08 / 13.48)


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


def _primus_row(row_id: str):
    """A published Primus row (calibration/data/moe_throughput.csv) projected at its recipe's layout."""
    from paratune.calibration.rows import load_rows, project

    projection = project(next(r for r in load_rows() if r.id == row_id))
    assert projection is not None, row_id
    return projection


def test_primus_dsv2_lite_mbs_1_and_2_share_the_host_floor():
    """Primus's DeepSeek-V2-Lite micro-batch scaling on 8 MI355X (examples/moe_package/README.md
    Figure 5, baseline features): 10,734.6 tokens/s/GPU at MBS 1 and 21,028.2 at MBS 2, so a
    micro-batch takes 1 x 4096 / 10,734.6 = 381.6 ms and 2 x 4096 / 21,028.2 = 389.6 ms: twice the
    tokens in 1.02x the time, the pace the host's issue sets, not the GPU's work (28,063.1 at MBS 4:
    583.8 ms, the GPU's). With the fitted cdna4 launch time the projection keeps that floor (a GPU-bound
    projection, as with the former held 20 us, takes 1.7x as long at MBS 2) and the GPU waits on the host."""
    t = {}
    for bar, mbs in ((1, 1), (2, 2)):
        p = _primus_row(f"PRIMUS-DSV2LITE-MI355X-{bar}")
        assert p.cfg.mbs == mbs
        t[mbs] = mbs * p.cfg.seq_length / p.estimate.tokens_per_s_per_gpu
        assert p.estimate.breakdown["overhead"] > 0.2 * p.estimate.iteration_ms  # host-bound
    assert 0.95 < t[2] / t[1] < 1.10  # measured 389.6 / 381.6 = 1.021


def test_primus_legacy_grouped_gemm_issues_one_gemm_pair_per_expert():
    """Primus's legacy grouped GEMM (--moe_use_legacy_grouped_gemm True, the DeepSeek-V2 recipe's
    LEGACY_GG) runs one hipBLASLt GEMM per local expert (Primus docs/04-technical-guides/moe-training.md),
    counted as SequentialMLP's three launches per expert (host_issue._expert_ops): DeepSeek-V2 at EP 8 holds
    160 / 8 = 20 experts, and a MoE layer's forward issues attention 9 + router 8 + preprocess 5 + experts
    (7 - 3 + 20 x 3) + shared experts 4 = 90 launches, at the fitted cdna4 launch time each; the same layout
    on NVIDIA's legacy path (one CUTLASS grouped GEMM) issues the grouped 7: 33."""
    p = _primus_row("PRIMUS-DSV2-MI355X-7")
    assert p.cfg.moe_grouped_gemm and p.cfg.moe_use_legacy_grouped_gemm
    s = p.setup
    facts = layout_facts(s.model, p.cfg, s.cluster.world_size)
    ctx = layer_context(model_shape(s.model), p.cfg, s.cluster, constants(s.cluster.gpu), facts)
    assert not ctx.grouped_gemm
    assert host_forward_ms(ctx, True) == pytest.approx(90 * constants(gpu("mi355x")).launch_us * 1e-3)
    h100 = s.cluster.model_copy(update={"gpu": gpu("h100-sxm")})
    nv = layer_context(model_shape(s.model), p.cfg, h100, constants(h100.gpu), facts)
    assert nv.grouped_gemm
    assert host_forward_ms(nv, True) == pytest.approx(33 * constants(h100.gpu).launch_us * 1e-3)
