"""Host issue time of one layer: Megatron runs eagerly, so the CPU launches every kernel of a layer
through PyTorch and Transformer Engine's Python; where a layer's kernels finish faster than the host
issues them, the GPU waits. An MoE dispatcher's device-to-host sync drains the queue every layer
(token_dispatcher.py `_maybe_dtoh_and_synchronize`), so the host cannot run ahead: a layer's pass
takes max(GPU time, host time). CUDA graphs (megatron-core transformer_config.py `cuda_graph_impl`,
`cuda_graph_scope`; cuda_graphs.py) replay a captured scope with one launch. This is why NVIDIA's
small-expert MoE recipes capture graphs: Megatron-LM's Qwen3-30B-A3B recipes on GB200 run 28,114
tokens/s/GPU with full-iteration graphs and 22,342 with attention/router graphs only
(examples/moe_recipes/README.md, calibration/data/moe_throughput.csv).
"""

from __future__ import annotations

from .context import Ctx
from .ep_bandwidth import DEDUP_BACKENDS
from .gemm import FP8_DTYPES

# Kernel launches per forward of each scope of a layer (TE modules, fused norms, rotary and
# bias-dropout-add; backward launches twice as many: dgrad and wgrad), counted from megatron-core
# 0.16.1's forward code: attention (transformer_layer.py, attention.py: norm + QKV, rotary, core
# attention, projection, bias-dropout-add), dense MLP (mlp.py: norm + fc1, activation, fc2,
# bias-dropout-add), router (router.py: norm, gating GEMM, top-k/score function, aux loss),
# preprocess (token_dispatcher.py: token counts, their copy to the host, permutation indices), the
# routed experts (dispatch, fc1, activation, fc2, combine, unpermute, bias-dropout-add; one GEMM pair
# and activation per local expert without grouped GEMM, experts.py SequentialMLP), shared experts
# (shared_experts.py). FP8 adds one quantisation launch per GEMM input, and per local expert for the
# grouped expert GEMMs (TE GroupedLinear quantises each expert's split with its own quantizer).
ATTN_OPS = 9
MLP_OPS = 5
ROUTER_OPS = 8
PREPROCESS_OPS = 5
# dispatch, combine, unpermute, bias-dropout-add and the grouped fc1, activation, fc2 (experts.py TEGroupedMLP:
# linear_fc1, bias_act_func, linear_fc2)
EXPERT_OPS = 7
PER_EXPERT_OPS = 3  # fc1, activation, fc2 of one expert (SequentialMLP)
SHARED_OPS = 4
# megatron-core's unfused rotary (constants.ROPE_UNFUSED_MOVES) is 12 launches per call (cos, * mscale, cast,
# sin, * mscale, cast, then t * cos, the negated half, its cat, * sin, the sum, the final cat; rope_utils.py
# `_apply_rotary_pos_emb_bshd`), one call for Q and one for K, where the fused kernel is one launch each
ROPE_UNFUSED_EXTRA_OPS = 2 * 12 - 2
# `TEGroupedMLP._apply_bias` (constants.EXPERT_BIAS_BYTES): b * p and the sum per local expert, then one cat
BIAS_OPS_PER_EXPERT = 2
GRAPHABLE = ("attn", "mlp", "moe_router", "moe_preprocess", "moe")


def captured(impl: str, scope: tuple[str, ...] | None) -> frozenset[str]:
    """The layer scopes a CUDA-graph setting replays (megatron-core 0.16.1 transformer_config.py
    `cuda_graph_scope` and its __post_init__): none without graphs, every scope for `full_iteration` or
    for a layer graph with no scope named (the whole layer), else the named ones; `moe` takes the router
    and preprocess with it, and the local implementation captures router and preprocess together."""
    if impl == "none":
        return frozenset()
    named = set(scope or ())
    if not named or "full_iteration" in named:
        return frozenset(GRAPHABLE)
    if "moe" in named or (impl == "local" and named & {"moe_router", "moe_preprocess"}):
        named |= {"moe_router", "moe_preprocess"}
    return frozenset(named & set(GRAPHABLE))


def _scope_ops(ctx: Ctx, moe: bool) -> dict[str, float]:
    """Forward launches of each scope of one layer (FP8: one more per GEMM)."""
    q = 1 if ctx.fp8 else 0
    a = ctx.shape
    attn = ATTN_OPS + 2 * q + (ROPE_UNFUSED_EXTRA_OPS if a.rotary and not a.rope_fused and not a.mla else 0)
    if not moe:
        return {"attn": attn, "mlp": MLP_OPS + 2 * q}
    local = max(1, ctx.shape.experts // ctx.ep)
    experts = _expert_ops(ctx, local)
    shared = SHARED_OPS + 2 * q if ctx.shape.shared_ffn else 0
    return {"attn": attn, "moe_router": ROUTER_OPS, "moe_preprocess": PREPROCESS_OPS,
            "moe": experts + shared}


def _expert_ops(ctx: Ctx, local: int) -> int:
    """Forward launches of the routed experts: the grouped fc1, activation and fc2, or three per local expert
    (SequentialMLP's fc1, activation and fc2; FP8 quantises each expert's input of each GEMM, which the legacy
    GroupedMLP, BF16, does not). TE's grouped fc1 and fc2 are one Python call each whose C++ loop issues one
    cuBLAS GEMM per local expert (TransformerEngine d0067d0 common/gemm/cublaslt_gemm.cu
    `multi_stream_cublas_gemm`; their GPU time is `gemm.multi_stream_ms`'s); those launches carry no Python
    of their own and are not counted at `launch_us`, a per-launch cost that includes it: counted so, the NVIDIA
    MoE rows fit worse (moe/nvidia in-sample 11.3 % against 10.4 %, held-out 19.6 % against 16.3 %). The
    legacy GroupedMLP's ROCm path runs one activation over all rows (experts.py GroupedMLP) but its per-expert
    GEMMs on 4 streams (Primus docs/04-technical-guides/moe-training.md); it is counted as three per expert
    too, a count no source gives per launch: with one activation instead, the AMD MoE rows fit worse (moe/amd
    in-sample 7.0 % against 4.9 %)."""
    q = 1 if ctx.expert_dtype() in FP8_DTYPES else 0
    if ctx.grouped_gemm:
        bias = BIAS_OPS_PER_EXPERT * local + 1 if ctx.unfused_expert_bias else 0
        return EXPERT_OPS + 2 * q * local + bias
    return EXPERT_OPS - 3 + local * (PER_EXPERT_OPS + 2 * q)


def host_forward_ms(ctx: Ctx, moe: bool) -> float:
    """ms the host takes to issue one layer's forward: `Ctx.launch_us` (fitted) per launch outside the
    captured scopes, one launch per captured scope's replay."""
    return sum(_scope_launches(ctx, moe).values()) * ctx.launch_us * 1e-3


def _scope_launches(ctx: Ctx, moe: bool) -> dict[str, float]:
    """Launches the host issues for each scope of one layer's forward (a captured scope: its one replay)."""
    return {s: 1 if s in ctx.graphed else n for s, n in _scope_ops(ctx, moe).items()}


def dispatch_syncs(ctx: Ctx) -> bool:
    """Whether an MoE forward stops the host at a device-to-host sync before its experts. The all-to-all
    and allgather dispatchers copy the token counts to the host in the dispatch preprocess, which a
    preprocess graph cannot hold (megatron-core transformer_config.py: "moe_preprocess cuda graph is not
    supported when there are DtoH copies"); the flex dispatcher's DeepEP and HybridEP size their output on
    the host inside the dispatch itself (token_dispatcher.py `_HybridEPManager.setup_metadata`: without
    `moe_expert_rank_capacity_factor`, "HybridEP sizes buffers dynamically (CPU sync in dispatch)"), which
    only the sync-free path removes, the one a graph of the whole MoE (`moe` scope, `full_iteration`)
    requires (docs/user-guide/features/paged_stash.md). Primus's sync-free stages remove them too
    (moe-training.md `turbo_sync_free_moe_stage`)."""
    if (ctx.ep <= 1 and ctx.etp <= 1) or ctx.sync_free:
        return False
    captured_by = "moe" if ctx.dispatch in DEDUP_BACKENDS else "moe_preprocess"
    return captured_by not in ctx.graphed


def host_bound(ctx: Ctx, moe: bool, gpu_f: float, gpu_b: float, pre_f: float) -> tuple[float, float]:
    """(forward, backward) ms the GPU waits on the host: what the host's issue time (backward: twice
    the forward's launches) exceeds the layer's GPU time by.

    A forward with a dispatch sync (`dispatch_syncs`) drains the launch queue once per layer, so the host
    cannot run ahead across it: from one sync to the next it issues the experts' scope (h_E, GPU g_E), then
    the next layer's attention, router and preprocess (h_A, GPU g_A = `pre_f`, the attention block's GPU
    time), and the GPU ends at max over launches j of (host time to j + GPU time from j on) =
    max(g_E + g_A, h_E + max(g_A, h_A)): the GPU idles while the host issues a host-heavy expert scope,
    and the next attention cannot start before it is issued. Without a sync the host runs ahead and the
    layer takes max(GPU, host). The backward has no sync (the combine's sizes are the forward's)."""
    host = host_forward_ms(ctx, moe)
    forward = max(gpu_f, host)
    if moe and dispatch_syncs(ctx):
        h_e = _scope_launches(ctx, moe)["moe"] * ctx.launch_us * 1e-3
        forward = max(gpu_f, h_e + max(pre_f, host - h_e))
    return forward - gpu_f, max(0.0, 2 * host - gpu_b)
