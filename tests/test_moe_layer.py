"""One DeepSeek-V3 MoE layer's routed-expert terms on an H100, derived by hand from megatron-core's
MoE forward (router -> permute -> all-to-all -> grouped expert MLPs -> all-to-all -> unpermute,
moe-physics.md §1.3) and the published link rates, like the dense layer test derives its terms.

Layout: one node of 8 H100s, TP 1, CP 1, EP 8, MBS 1, seq 4096, BF16, the all-to-all dispatcher with
TE's fused permutation and grouped GEMM. DeepSeek-V3: H 7168, 256 routed experts (32 per rank), top-8,
expert FFN 2048 (SwiGLU), one shared expert of 2048."""

from __future__ import annotations

from math import log, sqrt

import pytest

from paratune.oracle.catalog import gpu, model_card
from paratune.oracle.layout import layout_facts
from paratune.oracle.model_shape import model_shape
from paratune.oracle.performance.calibration import constants
from paratune.oracle.performance.layers import transformer_layer
from paratune.oracle.performance.moe_layer import (
    dispatch_combine,
    host_syncs,
    load_imbalance,
    routed_rows,
    routing_map_gather,
)
from paratune.oracle.performance.pipeline import block_weights, layer_context
from paratune.oracle.performance.work import EP, GEMM, OVH
from paratune.oracle.specs import ClusterSpec, ModelArch, TrainingArgs, Workload

H100 = gpu("h100-sxm")
C = constants(H100)
H, E, K, F, EP_SIZE = 7168, 256, 8, 2048, 8


def _ctx(mbs: int = 1, **training):
    model = ModelArch(**model_card("deepseek-v3"))
    args = dict(seq_length=4096, global_batch_size=64, micro_batch_size=mbs, expert_model_parallel_size=EP_SIZE,
                moe_token_dispatcher_type="alltoall", moe_grouped_gemm=True, moe_permute_fusion=True,
                use_distributed_optimizer=True) | training
    workload = Workload(name="dsv3", model=model, training=TrainingArgs(**args))
    cluster = ClusterSpec(name="h100", num_nodes=1, gpus_per_node=8, gpu=H100, hbm_capacity_gb=80)
    cfg = workload.effective()
    facts = layout_facts(model, cfg, cluster.world_size)
    shape = model_shape(model)
    return layer_context(shape, cfg, cluster, C, facts), shape, cfg


def test_the_model_card_is_the_layer_the_derivation_assumes():
    _, a, _ = _ctx()
    assert (a.h, a.experts, a.topk, a.expert_ffn, a.shared_ffn, a.gated) == (H, E, K, F, F, 2)


def test_load_imbalance_and_routed_rows_by_hand():
    """Force-balanced routing: a rank receives Binomial(EP·T·k, 1/EP) rows; the expected maximum over 8
    ranks is the mean plus sqrt(2 ln 8) standard deviations (RandomSTE, normal approximation)."""
    ctx, _, _ = _ctx()
    t = 4096
    rho = 1 + sqrt(2 * log(8)) * sqrt(7 / (8 * t * K))
    assert load_imbalance(ctx) == pytest.approx(rho, rel=1e-12)
    assert routed_rows(ctx) == pytest.approx(t * K * rho, rel=1e-12)
    assert 1.005 < rho < 1.02  # near-perfect balance at the rank level with 32k assignments per rank


def test_all_to_all_dispatch_by_hand():
    """Each rank sends R rows of a BF16 H-vector plus a 4-byte fp32 prob; 7/8 of them leave the GPU over
    NVLink at NCCL's 370 GB/s busBw (nccl-tests #212); two step latencies (tokens, then probs)."""
    ctx, _, _ = _ctx()
    rows = 4096 * K * load_imbalance(ctx)
    nbytes = rows * (2 * H + 4) * 7 / 8
    expected = nbytes / (370e9 / 1e3) + 2 * C.alpha_intra_us * 1e-3
    assert dispatch_combine(ctx) == pytest.approx(expected, rel=1e-9)


def test_deepep_sends_one_copy_per_destination_rank():
    """DeepEP dedups: a token reaches P(8 experts of 256 touch a rank's 32) = 1 - C(224,8)/C(256,8) of each
    of the 7 other ranks, ~5.3 of 8 ranks counting itself (moe-physics.md §1.4), at DeepEP's rate: its
    20 SMs at 20.3 GB/s each (B200 table) below 97 % of the 450 GB/s line."""
    ctx, _, _ = _ctx(moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="deepep")
    p_rank = 1.0
    for i in range(K):
        p_rank *= (E - 32 - i) / (E - i)
    p_rank = 1 - p_rank
    assert 8 * p_rank == pytest.approx(5.29, abs=0.02)  # the research note's D_rank for E=256, P=8 (self included)
    nbytes = 4096 * 2 * H * 7 * p_rank * load_imbalance(ctx)
    rate = min(450 * 155.5 / 160, 20 * (348 + 302) / 2 / 16) * 1e9 / 1e3
    assert dispatch_combine(ctx) == pytest.approx(nbytes / rate + C.alpha_intra_us * 1e-3, rel=1e-9)


def test_layer_charges_the_exchange_four_times_and_one_host_sync():
    """Dispatch + combine forward, their mirrors backward; one D2H sync per forward (no fitted overhead)."""
    ctx, a, cfg = _ctx()
    layer = transformer_layer(ctx, True, block_weights(a, 1, 1, EP_SIZE, False, 4096)[1])
    assert layer.f[EP] == pytest.approx(2 * dispatch_combine(ctx))
    assert layer.b[EP] == pytest.approx(2 * dispatch_combine(ctx))
    assert host_syncs(ctx) == pytest.approx(C.host_sync_us * 1e-3)
    dense = transformer_layer(ctx, False, block_weights(a, 1, 1, EP_SIZE, False, 4096)[0])
    assert layer.f[OVH] - dense.f[OVH] == pytest.approx(host_syncs(ctx))


def test_sequential_expert_gemms_are_slower_than_grouped_for_many_experts():
    """SequentialMLP runs 32 local experts one GEMM at a time, each with its own wave tail and launch."""
    grouped, a, _ = _ctx()
    sequential, _, _ = _ctx(moe_grouped_gemm=False)
    params = block_weights(a, 1, 1, EP_SIZE, False, 4096)[1]
    assert transformer_layer(sequential, True, params).f[GEMM] > 1.1 * transformer_layer(grouped, True, params).f[GEMM]


def test_te_grouped_expert_gemms_run_four_experts_at_a_time_by_hand():
    """TE's grouped GEMM runs one cuBLAS GEMM per local expert over 4 streams (TransformerEngine d0067d0
    cublaslt_gemm.cu `multi_stream_cublas_gemm`, multi_stream.cpp: 4 compute streams): the 32 local experts'
    fc1 [M, H] x [H, 2F] and fc2 [M, F] x [F, H] at M = R / 32 rows each are 8 rounds of 4 concurrent GEMMs.
    The layer's forward GEMM time with and without grouped GEMM differ by exactly the experts' part: grouped,
    8 rounds of a 4-GEMM batch per linear; sequential (SequentialMLP), 32 single GEMMs per linear."""
    grouped, a, _ = _ctx()
    sequential, _, _ = _ctx(moe_grouped_gemm=False)
    g = grouped.gemm.gemm_ms
    m = round(routed_rows(grouped) / (E // EP_SIZE))
    rounds = 8 * (g(m, 2 * F, H, "bf16", 4) + g(m, H, F, "bf16", 4))
    single = 32 * (g(m, 2 * F, H, "bf16", 1) + g(m, H, F, "bf16", 1))
    params = block_weights(a, 1, 1, EP_SIZE, False, 4096)[1]
    diff = transformer_layer(sequential, True, params).f[GEMM] - transformer_layer(grouped, True, params).f[GEMM]
    assert diff == pytest.approx(single - rounds, rel=1e-9)
    assert rounds >= g(m, 2 * F, H, "bf16", 32) + g(m, H, F, "bf16", 32)  # never faster than one pooled launch


def test_the_legacy_grouped_mlp_runs_its_expert_gemms_in_bf16_under_fp8():
    """megatron-core 0.16.1's legacy GroupedMLP multiplies with the grouped_gemm package's `gmm`, which has no
    FP8 path (transformer/moe/experts.py), while attention, router and shared experts keep TE's FP8 linears:
    under FP8 its layer sits strictly between the TE layer (all FP8) and the BF16 layer; on NVIDIA it is one
    grouped launch, as TE's."""
    te8, a, _ = _ctx(fp8="hybrid")
    legacy8, _, _ = _ctx(fp8="hybrid", moe_use_legacy_grouped_gemm=True)
    bf16, _, _ = _ctx()
    assert (te8.expert_dtype(), legacy8.expert_dtype(), legacy8.linear_dtype()) == ("fp8", "bf16", "fp8")
    assert legacy8.grouped_gemm
    params = block_weights(a, 1, 1, EP_SIZE, False, 4096)[1]
    g = [transformer_layer(c, True, params).f[GEMM] for c in (te8, legacy8, bf16)]
    assert g[0] < g[1] < g[2]


@pytest.mark.parametrize("dispatcher", [{"moe_token_dispatcher_type": "alltoall"},
                                        {"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "deepep"}])
def test_moe_cost_per_token_does_not_fall_with_mbs_except_gemm_efficiency(dispatcher):
    """Per token, every term of the MoE layer but the GEMMs is bytes over a rate: from MBS 1 to 16 only the
    fixed latencies (step latency, the host sync) and the imbalance (ρ falls with more tokens) amortise,
    a few per cent, not the 38 % a per-micro-batch overhead constant took off."""
    per_token = {}
    for mbs in (1, 16):
        ctx, a, _ = _ctx(mbs, global_batch_size=64, **dispatcher)
        weights = block_weights(a, 1, 1, EP_SIZE, False, 4096)
        moe, dense = transformer_layer(ctx, True, weights[1]), transformer_layer(ctx, False, weights[0])
        # the MoE part: the MoE layer less a dense layer of the same attention (whose per-layer launch
        # overhead, a family constant of every layer, is not the MoE's)
        total = sum(moe.f) + sum(moe.b) + sum(moe.w) - sum(dense.f) - sum(dense.b) - sum(dense.w)
        gemm = moe.f[GEMM] + moe.b[GEMM] + moe.w[GEMM] - dense.f[GEMM] - dense.b[GEMM] - dense.w[GEMM]
        per_token[mbs] = ((total - gemm) / (4096 * mbs), total / (4096 * mbs))
    non_gemm_drop = 1 - per_token[16][0] / per_token[1][0]
    assert 0 <= non_gemm_drop < 0.05
    assert per_token[16][1] <= per_token[1][1]


def test_turbo_deepep_share_from_amds_alltoall_breakdown():
    """Primus-Turbo DeepEP's intranode rate, derived by hand from AMD's MI300X EP-8 breakdown of the
    MoE-2T model (Primus examples/moe_package/README.md Figure 11; 448 experts, top-16): DeepEP takes
    (8.9 / 55.8) / (13.2 / 43.8) = 0.529 of RCCL all-to-all's exchange time, for one copy per distinct
    remote rank, 7 x (1 - C(392, 16) / C(448, 16)) = 6.205 per token, against the all-to-all's
    16 x 7/8 = 14: 0.75 (RCCL's share of xGMI) x 0.4432 / 0.529 = 0.628 of the line rate. With it the
    exchange of DeepSeek-V2-Lite at MBS 12 on one MI355X node (Figure 6's all-to-all -> DeepEP pair,
    +13 % end to end) is faster through Turbo DeepEP than through RCCL's all-to-all."""
    from math import comb

    from paratune.oracle.performance.ep_bandwidth import RCCL_AMD, TURBO_DEEPEP_INTRA

    distinct = 7 * (1 - comb(392, 16) / comb(448, 16))
    assert distinct == pytest.approx(6.2053, abs=1e-4)
    share = 0.75 * (distinct / 14) / ((8.9 / 55.8) / (13.2 / 43.8))
    assert RCCL_AMD.intra == 0.75
    assert share == pytest.approx(TURBO_DEEPEP_INTRA, rel=1e-4)
    assert share == pytest.approx(0.628, abs=1e-3)

    model = ModelArch(**model_card("deepseek-v2-lite"))
    mi355x = gpu("mi355x")
    cluster = ClusterSpec(name="mi355x", num_nodes=1, gpus_per_node=8, gpu=mi355x, hbm_capacity_gb=288)
    times = {}
    for name, knobs in (("alltoall", {"moe_token_dispatcher_type": "alltoall"}), ("turbo", {"use_turbo_deepep": True})):
        args = dict(seq_length=4096, global_batch_size=768, micro_batch_size=12, expert_model_parallel_size=8,
                    moe_grouped_gemm=False, use_distributed_optimizer=True) | knobs
        cfg = Workload(name="lite", model=model, training=TrainingArgs(**args)).effective()
        ctx = layer_context(model_shape(model), cfg, cluster, constants(mi355x), layout_facts(model, cfg, 8))
        times[name] = dispatch_combine(ctx)
    assert times["turbo"] < times["alltoall"]


def test_internode_rates_count_only_the_bytes_that_cross_the_nic():
    """DeepEP's and HybridEP's internode tables print bytes counted with the sender's own node included;
    the RDMA bytes are (N-1)/N of them for N nodes. DeepEP's maintainer reads the EP16 (2-node) figure
    of 43 GB/s as 43 x 0.5 = 21.5 GB/s on the wire (deepseek-ai/DeepEP issue #285); EP32 (4 nodes):
    57.5 x 3/4 = 43.125 GB/s; HybridEP on H100, 16 ranks: 57.35 x 1/2 = 28.675 GB/s (README_Hybrid-EP.md
    table, mean of dispatch 57.74 and combine 56.96). Intra-node rates are unchanged."""
    from paratune.oracle.performance.ep_bandwidth import link_rates

    assert link_rates("deepep", H100, 16, 8)[1] == pytest.approx(21.5, rel=1e-9)
    assert link_rates("deepep", H100, 32, 8)[1] == pytest.approx(57.5 * 3 / 4, rel=1e-9)
    assert link_rates("hybridep", H100, 16, 8) == pytest.approx((450 * 533.4 / 900, 57.35 / 2), rel=1e-9)


def test_hybridep_two_node_exchange_by_hand():
    """Qwen3-30B-A3B (H 2048, 128 experts, top-8) at EP 16 over two H100 nodes, flex + HybridEP, MBS 1,
    seq 4096: a token's copy crosses the NIC once if any of its 8 experts sits on the other node's 64,
    P = 1 - C(64,8)/C(128,8), at HybridEP's 16-SM rate (megatron-core 0.16.1's `moe_hybridep_num_sms`
    default) of 16 ranks, (54.47 + 53.35) / 2 x 1/2 GB/s (README_Hybrid-EP.md H100 internode table); inside
    the node one copy per other local rank its experts touch, 7 x (1 - C(120,8)/C(128,8)), at HybridEP's
    533.4/900 of 450 GB/s; the two run in parallel, each with its step latency (moe_layer.dispatch_combine)."""
    from math import comb

    model = ModelArch(**model_card("qwen3-30b-a3b"))
    args = dict(seq_length=4096, global_batch_size=1024, micro_batch_size=1, expert_model_parallel_size=16,
                moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="hybridep", moe_grouped_gemm=True,
                use_distributed_optimizer=True)
    cluster = ClusterSpec(name="h100", num_nodes=2, gpus_per_node=8, gpu=H100, hbm_capacity_gb=80)
    cfg = Workload(name="q30", model=model, training=TrainingArgs(**args)).effective()
    ctx = layer_context(model_shape(model), cfg, cluster, C, layout_facts(model, cfg, cluster.world_size))
    t, vector, rho = 4096, 2048 * 2, load_imbalance(ctx)
    nic = (54.47 + 53.35) / 2 / 2 * 1e6  # bytes per ms
    inter = t * vector * (1 - comb(64, 8) / comb(128, 8)) * rho / nic + C.alpha_inter_us * 1e-3
    intra_rate = 450 * 533.4 / 900 * 1e6  # bytes per ms
    intra = t * vector * 7 * (1 - comb(120, 8) / comb(128, 8)) * rho / intra_rate + C.alpha_intra_us * 1e-3
    assert inter > intra  # the NIC is the bottleneck
    assert dispatch_combine(ctx) == pytest.approx(max(inter, intra), rel=1e-9)


def test_flex_dispatch_rates_follow_the_sms_the_recipe_gives_them():
    """HybridEP across a GB200 NVL72 domain at 16 ranks moves (472.84 + 474.48) / 2 GB/s on 16 SMs and
    (523.48 + 521.55) / 2 on 32 (README_Hybrid-EP.md GB200 table, BF16 dispatch and combine); with no count
    given it runs its own 24 inside one domain (hybrid-ep config.cuh), linear between the two; beyond the
    published counts the nearest one holds. DeepEP's intranode rate is 20.3125 GB/s per SM (B200 table:
    (348 + 302) / 2 over 16 SMs) up to its NVLink share: 24 SMs on a B200 node 487.5 GB/s."""
    from paratune.oracle.performance.ep_bandwidth import link_rates

    gb200, b200 = gpu("gb200"), gpu("b200")
    at16, at32 = (472.84 + 474.48) / 2, (523.48 + 521.55) / 2
    assert link_rates("hybridep", gb200, 16, 72, 16)[0] == pytest.approx(at16, rel=1e-9)
    assert link_rates("hybridep", gb200, 16, 72, 32)[0] == pytest.approx(at32, rel=1e-9)
    assert link_rates("hybridep", gb200, 16, 72, None)[0] == pytest.approx((at16 + at32) / 2, rel=1e-9)
    assert link_rates("hybridep", gb200, 16, 72, 128)[0] == pytest.approx(at32, rel=1e-9)
    assert link_rates("deepep", b200, 8, 8, 24)[0] == pytest.approx(24 * 650 / 32, rel=1e-9)
    assert link_rates("deepep", b200, 8, 8, None)[0] == pytest.approx(20 * 650 / 32, rel=1e-9)


def test_the_recipes_sm_count_reaches_the_exchange():
    """`moe_hybridep_num_sms` of a workload sets its exchange time: Qwen3-30B-A3B at EP 16 in one GB200 NVL72
    domain, every copy over NVLink, so 16 SMs take the 32-SM time x at32 / at16 (less the step latency)."""
    model = ModelArch(**model_card("qwen3-30b-a3b"))
    cluster = ClusterSpec(name="gb200", num_nodes=1, gpus_per_node=72, gpu=gpu("gb200"), hbm_capacity_gb=186)
    times = {}
    for sms in (16, 32):
        args = dict(seq_length=4096, global_batch_size=1024, micro_batch_size=4, expert_model_parallel_size=16,
                    moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="hybridep", moe_grouped_gemm=True,
                    use_distributed_optimizer=True, moe_hybridep_num_sms=sms)
        cfg = Workload(name="q30", model=model, training=TrainingArgs(**args)).effective()
        c = constants(cluster.gpu)
        ctx = layer_context(model_shape(model), cfg, cluster, c, layout_facts(model, cfg, 16))
        times[sms] = dispatch_combine(ctx) - c.alpha_intra_us * 1e-3
    ratio = ((523.48 + 521.55) / 2) / ((472.84 + 474.48) / 2)
    assert times[16] == pytest.approx(times[32] * ratio, rel=1e-9)


def test_hybridep_gathers_the_routing_map_before_each_forward_dispatch():
    """megatron-core's HybridEPDispatch passes no handle, so each forward dispatch all-gathers every rank's bool
    routing map [T, E] (1 B per entry) over the EP group with NCCL (DeepEP hybrid-ep executor.cu
    `allgather_routing_map`): DeepSeek-V3 at EP 8 on one H100 node, T = 4096, E = 256, a ring all-gather of the
    8 x 4096 x 256-byte map, each rank sending 7/8 of it over NVLink at link_eff of the 450 GB/s line, plus 7 step
    latencies. The forward pays it, the backward's combine reuses the handle, and DeepEP has none."""
    ctx, a, _ = _ctx(moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="hybridep")
    nbytes = 8 * 4096 * E
    expected = nbytes * 7 / 8 / (450e9 * C.link_eff / 1e3) + 7 * C.alpha_intra_us * 1e-3
    assert routing_map_gather(ctx) == pytest.approx(expected, rel=1e-9)
    layer = transformer_layer(ctx, True, block_weights(a, 1, 1, EP_SIZE, False, 4096)[1])
    assert layer.f[EP] - layer.b[EP] == pytest.approx(expected, rel=1e-9)
    deepep, _, _ = _ctx(moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="deepep")
    assert routing_map_gather(deepep) == 0.0
