"""The routed-expert part of an MoE layer, term by term, for one micro-batch on one rank.

megatron-core's MoE forward (transformer/moe/moe_layer.py) is: router -> permute -> dispatch -> expert
MLPs -> combine -> unpermute; autograd mirrors it in the backward, so every byte and FLOP below is paid
once per pass (fused_a2a.py: dispatch's backward is a combine and the reverse). Symbols: T tokens enter
on this rank (SP-sharded: MBS·seq/(CP·TP)), k routed copies per token (`routed_mean`: top-k, fewer when a
capacity factor below 1 drops), H hidden, E experts, E/EP of them local, each split ETP ways, R = T·k·ETP·ρ
routed rows on the most loaded rank (ρ: `load_imbalance`). Sources: megatron-core
token_dispatcher.py, moe_utils.py, experts.py, fused_a2a.py; link rates: `ep_bandwidth.py`. Not modelled: a real
(not force-balanced) router's skew, FP8 on the wire (megatron-core's fused DeepEP path sends BF16),
DeepEP's SM budget taken from the GEMMs, HybridEP's fused permute.
"""

from __future__ import annotations

from math import log, prod, sqrt

from .constants import E_BYTES, EXPERT_BIAS_BYTES, FP32_BYTES, ROUTER_PASSES, TOKEN_INDEX_BYTES
from .context import HALF, Ctx
from .ep_bandwidth import ALLGATHER, ALLTOALL, DEDUP_BACKENDS, HYBRIDEP, link_rates
from .host_issue import dispatch_syncs
from .work import ELEM, EP, OVH, TP, Builder


def load_imbalance(ctx: Ctx) -> float:
    """ρ = rows of the most loaded rank / mean rows. Force-balanced routing (megatron-core moe_utils.py
    RandomSTE: i.i.d. logits, top-k) makes each of the EP ranks' T·k assignments a uniform draw over the EP
    destinations, so a rank receives Binomial(EP·T·k, 1/EP) rows; the expected maximum over EP ranks is
    ≈ mean + sqrt(2 ln EP)·sd (normal approximation): ρ = 1 + sqrt(2 ln EP)·sqrt((EP-1)/(EP·T·k)). A real
    router's skew is not modelled (the published runs calibrated here force the balance)."""
    n = ctx.sp_tokens * ctx.shape.routed_mean
    if ctx.ep <= 1 or n <= 0:
        return 1.0
    return 1.0 + sqrt(2.0 * log(ctx.ep)) * sqrt((ctx.ep - 1) / (ctx.ep * n))


def routed_rows(ctx: Ctx) -> float:
    """R: (token, expert) rows the most loaded rank's experts process (after the ETP all-gather)."""
    return ctx.sp_tokens * ctx.shape.routed_mean * ctx.etp * load_imbalance(ctx)


def router(ctx: Ctx, w: Builder, linear) -> None:
    """Gating GEMM [T, H] x [H, E] (RouterGatingLinearFunction: 2·T·H·E FLOPs forward, dgrad and wgrad
    backward) and the fp32 score passes over [T, E] (softmax/sigmoid, top-k, aux loss: ROUTER_PASSES)."""
    a, T = ctx.shape, ctx.sp_tokens
    linear(ctx, w, T, a.experts, a.h, HALF)
    scores = T * a.experts * ROUTER_PASSES * FP32_BYTES
    w.add(ELEM, scores / ctx.hbm, scores / ctx.hbm)


def permutation(ctx: Ctx, w: Builder, rows: float) -> None:
    """Permute and unpermute, each read + write of the token vectors per pass (megatron-core moe_utils.py
    `permute` / `unpermute`; TE's fused kernels with `moe_permute_fusion`):
      all-to-all: [T, H] -> [T·k, H] and back, plus the chunk sort by local expert when E/EP > 1
      (`sort_chunks_by_idxs`, 2·R·H each way);
      allgather: the R rows selected from the gathered tokens, and their scatter back;
      DeepEP / HybridEP: the received per-rank copies expanded to the R expert-major rows and back.
    Without the fusion, the unfused path also reads the [E, T] routing mask and writes and reads int64
    row indices (masked_select + index_select) in each direction."""
    a, T, b = ctx.shape, ctx.sp_tokens, E_BYTES
    copies = T * a.routed_mean
    if ctx.dispatch == ALLTOALL:
        moved = 2 * (T + copies) * a.h * b + (4 * rows * a.h * b if a.experts > ctx.ep else 0.0)
    else:
        moved = 4 * rows * a.h * b
    if not ctx.permute_fusion:
        moved += 2 * (T * a.experts + 2 * copies * TOKEN_INDEX_BYTES)
    w.add(ELEM, moved / ctx.hbm, moved / ctx.hbm)


def expert_mlps(ctx: Ctx, w: Builder, rows: float, grouped, activation) -> None:
    """fc1 [R, H] x [H, g·F/ETP] and fc2 [R, F/ETP] x [F/ETP, H] over the E/EP local experts at M = R/(E/EP)
    rows each: with `moe_grouped_gemm`, TE GroupedLinear's one cuBLAS GEMM per expert over four streams
    (`layers._grouped`, `gemm.multi_stream_ms`) or the legacy GroupedMLP's one CUTLASS grouped launch whose
    tiles share the waves; without it one GEMM per expert (SequentialMLP, a Python loop: each expert's GEMMs
    pay their own wave tail and launch; also Primus's legacy GroupedMLP on ROCm); then the gated activation
    × probs over R rows. The legacy GroupedMLP's GEMMs run BF16 (`Ctx.expert_dtype`)."""
    a, dtype = ctx.shape, ctx.expert_dtype()
    local = max(1, a.experts // ctx.ep)
    m, ffn = rows / local, a.expert_ffn / ctx.etp
    if ctx.grouped_gemm:
        grouped(ctx, w, m, a.gated * ffn, a.h, local, dtype)
        grouped(ctx, w, m, a.h, ffn, local, dtype)
    else:
        for _ in range(local):
            grouped(ctx, w, m, a.gated * ffn, a.h, 1, dtype)
            grouped(ctx, w, m, a.h, ffn, 1, dtype)
    start = w.forward_ms()
    activation(ctx, w, rows, ffn)
    w.tag("moe_act", w.forward_ms() - start)
    if ctx.unfused_expert_bias:
        fwd, bwd = EXPERT_BIAS_BYTES
        w.add(ELEM, fwd * rows * a.h / ctx.hbm, bwd * rows * a.h / ctx.hbm)


def _distinct(experts: int, topk: float, share: float) -> float:
    """Probability that a token's top-k (uniform over `experts`) touches a given set holding `share` of
    them: 1 - C(E - share·E, k) / C(E, k) (derived from uniform top-k routing)."""
    k = max(1, round(topk))
    outside = experts - share * experts
    if outside < k:
        return 1.0
    return 1.0 - prod((outside - i) / (experts - i) for i in range(k))


def dispatch_combine(ctx: Ctx) -> float:
    """ms of one token exchange (dispatch, or combine: the same bytes back) over the EP group.

    The EP group has EP ranks ETP apart (megatron-core parallel_state.py expert grid), `per` of them in
    this rank's scale-up domain (`Net.span`). Bytes leaving a rank:
      all-to-all: one H-vector per selected expert, T·k·ρ of them; (per-1)/EP stay in the domain, the
        rest cross the NIC, and a second exchange carries the fp32 probs (token_dispatcher.py);
      allgather: every rank gathers the T tokens of all ETP·EP ranks (a ring all-gather; the combine a
        reduce-scatter of the same bytes);
      DeepEP / HybridEP / Primus-Turbo DeepEP: one copy per distinct destination rank inside the domain
        and one per distinct remote domain over RDMA, forwarded inside it (fused_a2a.py, DeepEP README).
    At the backend's published achieved rates (`ep_bandwidth.link_rates`), intra-domain and RDMA traffic
    in parallel, plus one step latency (and, for NCCL, one message per remote peer)."""
    a, T, net = ctx.shape, ctx.sp_tokens, ctx.net
    if ctx.ep <= 1 or T <= 0:
        return 0.0
    per, domains = net.span(ctx.ep, ctx.etp)
    intra_rate, inter_rate = (r * 1e6 for r in link_rates(ctx.dispatch, ctx.gpu, ctx.ep, ctx.gpus_per_node,
                                                                  ctx.dispatch_sms))
    vector = a.h * E_BYTES
    if ctx.dispatch == ALLGATHER:
        group = ctx.ep * ctx.etp
        return net.ring(T * group * (vector + a.experts * (FP32_BYTES + 1)), group, 1, intra_rate, inter_rate)
    rho = load_imbalance(ctx)
    if ctx.dispatch in DEDUP_BACKENDS:
        rank_share = 1.0 / ctx.ep
        intra = T * vector * ctx.etp * (per - 1) * _distinct(a.experts, a.routed_mean, rank_share) * rho
        inter = T * vector * ctx.etp * (domains - 1) * _distinct(a.experts, a.routed_mean, per * rank_share) * rho
        t = intra / intra_rate + net.alpha_intra
        return max(t, inter / inter_rate + net.alpha_inter) if domains > 1 else t
    copies = T * a.routed_mean * ctx.etp * rho
    send = copies * (vector + FP32_BYTES)
    t = send * (per - 1) / ctx.ep / intra_rate + 2 * net.alpha_intra
    if domains > 1:
        remote = ctx.ep - per
        t = max(t, send * remote / ctx.ep / inter_rate + remote * net.a2a_peer + 2 * net.alpha_inter)
    return t


def routing_map_gather(ctx: Ctx) -> float:
    """ms of HybridEP's metadata preprocessing before each forward dispatch: megatron-core's HybridEPDispatch
    passes no handle (fused_a2a.py @ d48bd6be0a), so `dispatch_with_permute` all-gathers every rank's bool
    routing map [T, E], one byte per entry, over the dispatch group with NCCL (DeepEP hybrid-ep
    executor.cu `allgather_routing_map`; its custom all-gather is off by default, DeepEP #682). The backward's
    combine reuses the handle. DeepEP computes its dispatch layout locally (only counts are exchanged): no such
    term."""
    if ctx.dispatch != HYBRIDEP or ctx.ep <= 1:
        return 0.0
    group = ctx.ep * ctx.etp
    return ctx.net.all_gather(group * ctx.sp_tokens * ctx.shape.experts, group, 1)


def expert_tp(ctx: Ctx) -> float:
    """ms of the ETP all-gather of the dispatched rows (and its reduce-scatter at combine), each way: the
    all-to-all and allgather dispatchers gather over the expert-TP group (token_dispatcher.py
    dispatch_postprocess / combine_preprocess); exposed, nothing runs beside it."""
    if ctx.etp <= 1 or ctx.dispatch in DEDUP_BACKENDS:
        return 0.0
    return 2 * ctx.net.reduce_scatter(routed_rows(ctx) * ctx.shape.h * E_BYTES, ctx.etp, 1)


def host_syncs(ctx: Ctx) -> float:
    """ms of the device-to-host sync per MoE forward where there is one (`host_issue.dispatch_syncs`):
    the GPU finishes its queue and the CPU waits on it before relaunching: `host_sync_us` (a prior)."""
    return ctx.c.host_sync_us * 1e-3 if dispatch_syncs(ctx) else 0.0


def routed_experts(ctx: Ctx, w: Builder, linear, grouped, activation) -> None:
    """Router, permutation, the expert MLPs, dispatch and combine (with HybridEP's routing-map gather), and the
    host syncs of one MoE layer
    (`linear`, `grouped`, `activation`: the layer builders of `layers.py`)."""
    rows = routed_rows(ctx)
    router(ctx, w, linear)
    permutation(ctx, w, rows)
    expert_mlps(ctx, w, rows, grouped, activation)
    etp = expert_tp(ctx)
    w.add(TP, etp, etp)
    exchange = 2 * dispatch_combine(ctx)  # dispatch + combine, and their mirrors in the backward
    w.add(EP, exchange + routing_map_gather(ctx), exchange)
    w.add(OVH, host_syncs(ctx))
