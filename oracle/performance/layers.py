"""Per-block work of one micro-batch on one rank: transformer layers (dense, MoE; GQA or MLA),
the embedding, and the output head with its loss.

Linear GEMMs run at their TP-sharded shapes on all T = MBS·seq/CP tokens of the rank (sequence
parallelism all-gathers before and reduce-scatters after each TP region); each linear costs a
forward GEMM, a data-grad GEMM (the `b` pass) and a weight-grad GEMM (the `w` pass). Attention
core is flash attention (causal: half the s² work, or the keys a sliding window or chunk leaves each
query, `flops.attended_keys`; per CP rank 1/CP of it; backward 2.5x forward; window layers and FP8 attention
at cuDNN's measured rates where published, `attention_rates`) or, for runs without flash
attention, the two batched GEMMs with the s² softmax/dropout traffic (a window is a mask there: the
whole square is still computed).
Norms, residuals, rotary, activation, routing, permutation, FP8 casts and the loss are HBM traffic.
An MoE layer's routed experts are `moe_layer.py`'s terms.
"""

from __future__ import annotations

from functools import lru_cache

from ..model_shape import padded_vocab
from .attention_rates import WINDOW_KEYS
from .calibration import Constants
from .constants import (
    ATTN_DROPOUT_BYTES,
    BF16_BYTES,
    E_BYTES,
    EMBEDDING_GRAD_BYTES,
    FA_BWD,
    LOSS_BYTES,
    ROPE_FUSED_MOVES,
    ROPE_UNFUSED_MOVES,
    SOFTMAX_BWD_BYTES,
    SOFTMAX_FWD_BYTES,
)
from .context import HALF, Ctx
from .flops import attended_keys, span_keys
from .gemm import FP8_DTYPES, multi_stream_ms
from .host_issue import host_bound
from .moe_layer import routed_experts
from .work import ATTN, CP, ELEM, EP, FSDP, GEMM, OVH, TP, Builder, Work


def _linear(ctx: Ctx, w: Builder, m: float, n: float, k: float, dtype: str) -> None:
    """One linear layer [m, k] x [k, n]: forward, data-grad and weight-grad GEMMs (+ FP8 casts)."""
    g = ctx.gemm.gemm_ms
    m, n, k = int(m), int(n), int(k)
    w.add(GEMM, g(m, n, k, dtype), g(m, k, n, dtype), g(k, n, m, dtype))
    if dtype in FP8_DTYPES:
        _fp8_casts(ctx, w, m, n, k, 1)


def _fp8_casts(ctx: Ctx, w: Builder, m: float, n: float, k: float, groups: int) -> None:
    """Transformer Engine's FP8 quantization of `groups` linears [m, k] x [k, n]: the input and the output grad
    are each read once (2 B) and written twice, a row-wise copy for their own GEMM and a column-wise
    (transposed) one for the weight-grad GEMM (TE cast_transpose; MXFP8's row- and column-wise block scaling):
    4 B per element; the weight is read and written once (3 B)."""
    w.add(ELEM, groups * (4.0 * m * k + 3.0 * k * n) / ctx.hbm, groups * 4.0 * m * n / ctx.hbm)


def _grouped(ctx: Ctx, w: Builder, m: float, n: float, k: float, groups: int, dtype: str) -> None:
    """A grouped GEMM over `groups` local experts of `m` tokens each: TE's GroupedLinear runs one cuBLAS GEMM
    per expert over its compute streams (`gemm.multi_stream_ms`); the legacy GroupedMLP's CUTLASS grouped
    kernel (the grouped_gemm package's `gmm`) is one launch whose tiles share the waves."""
    def g(m: int, n: int, k: int, dtype: str, groups: int) -> float:
        if ctx.legacy_grouped or groups == 1:
            return ctx.gemm.gemm_ms(m, n, k, dtype, groups)
        return multi_stream_ms(ctx.gemm, m, n, k, dtype, groups)

    m, n, k = max(1, round(m)), int(n), int(k)
    w.add(GEMM, g(m, n, k, dtype, groups), g(m, k, n, dtype, groups), g(k, n, m, dtype, groups))
    if dtype in FP8_DTYPES:
        _fp8_casts(ctx, w, m, n, k, groups)


def _tp_raw(ctx: Ctx) -> float:
    """ms of one TP all-gather (or reduce-scatter) of the rank's activations; 0 without TP."""
    if ctx.tp == 1:
        return 0.0
    return ctx.net.reduce_scatter(ctx.tokens * ctx.shape.h * E_BYTES, ctx.tp, 1)


def _tp_one(ctx: Ctx) -> float:
    """Exposed ms of one TP collective outside userbuffer overlap: `tp_exposed` of it (fitted)."""
    return _tp_raw(ctx) * ctx.c.tp_exposed


def _hidden_behind(comm: float, busy: float, c: Constants) -> float:
    """Exposed ms of `comm` overlapped with `busy` ms of compute on other SMs/CUs: what the compute
    cannot cover, plus `overlap_cost` of the covered part (the SMs and HBM the transfer takes)."""
    return max(0.0, comm - busy) + c.overlap_cost * min(comm, busy)


def _tp_collectives(ctx: Ctx, w: Builder, regions: int, gemm: tuple[float, float]) -> None:
    """`regions` TP regions, each AG + RS per pass under SP (one all-reduce, same bytes, without).

    With tp_comm_overlap, Transformer Engine's userbuffers split each collective into TP chunks and
    pipeline them with the GEMM they feed or drain (TE `module/base.py` `initialize_ub`, ring-exchange
    and pipelined overlap), so the collectives of a pass hide behind that pass's TP-region GEMMs
    (`gemm`: forward, backward ms); otherwise `tp_exposed` of them is exposed."""
    if ctx.tp_overlap:
        raw = 2 * regions * _tp_raw(ctx)
        w.add(TP, _hidden_behind(raw, gemm[0], ctx.c), _hidden_behind(raw, gemm[1], ctx.c))
        return
    t = 2 * regions * _tp_one(ctx)
    w.add(TP, t, t)


def _attention(ctx: Ctx, w: Builder, moe: bool) -> None:
    """Q/K/V (GQA, or MLA's low-rank) projections, rotary (and a Q/K norm), attention core, output projection."""
    a, T, tp = ctx.shape, ctx.tokens, ctx.tp
    dtype = ctx.linear_dtype()
    heads = a.heads / tp
    if a.mla:
        q_in = a.h
        if a.q_lora_rank:
            _linear(ctx, w, T, a.q_lora_rank, a.h, dtype)  # q down-projection, replicated over TP
            q_in = a.q_lora_rank
        _linear(ctx, w, T, a.kv_lora_rank + a.qk_pos_dim, a.h, dtype)  # kv down-projection, replicated
        before = w.forward_ms()
        _linear(ctx, w, T, heads * a.qk_dim, q_in, dtype)  # q up-projection
        _linear(ctx, w, T, heads * (a.qk_dim - a.qk_pos_dim + a.v_head_dim), a.kv_lora_rank, dtype)  # kv up-projection
        rotary = T * (heads + 1) * a.qk_pos_dim
        w.tag("mla_up_proj", w.forward_ms() - before + 2 * rotary * E_BYTES / ctx.hbm)
    else:
        _linear(ctx, w, T, (a.heads + 2 * a.groups) * a.qk_dim / tp, a.h, dtype)
        rotary = T * (a.heads + 2 * a.groups) / tp * a.qk_dim if a.rotary else 0.0
        if a.qk_norm:  # read and write Q and K once more, like the rotary pass
            rotary += T * (a.heads + a.groups) / tp * a.qk_dim
        if a.rotary and not a.rope_fused:
            _unfused_rotary(ctx, w, T * (a.heads + a.groups) / tp * a.qk_dim)
    _linear(ctx, w, T, a.h, heads * a.v_head_dim, dtype)
    fused_f, fused_b = ROPE_FUSED_MOVES
    w.add(ELEM, fused_f * rotary * E_BYTES / ctx.hbm, fused_b * rotary * E_BYTES / ctx.hbm)
    core_f, core_b = _core_attention(ctx, heads, a.spans_moe if moe else a.spans_dense)
    w.add(ATTN, core_f, core_b)
    w.tag("core_attn", core_f)
    _cp_ring(ctx, w, heads, core_f, core_b)


def _unfused_rotary(ctx: Ctx, w: Builder, elements: float) -> None:
    """What megatron-core's unfused rotary (YaRN, mRoPE: `constants.ROPE_UNFUSED_MOVES`) moves beyond the fused
    pass `_attention` costs for every rotary model, over the `elements` of Q and K."""
    (uf, ub), (ff, fb) = ROPE_UNFUSED_MOVES, ROPE_FUSED_MOVES
    w.add(ELEM, (uf - ff) * elements * E_BYTES / ctx.hbm, (ub - fb) * elements * E_BYTES / ctx.hbm)


def _core_attention(ctx: Ctx, heads: float, spans: tuple[tuple[int, int], ...]) -> tuple[float, float]:
    """(forward, backward) ms of the attention core on one rank, its layers' `spans` (`ModelShape.spans_dense`)."""
    a, s, cp, b = ctx.shape, ctx.seq, ctx.cp, ctx.mbs
    if ctx.flash:
        rows = b * heads * s / cp  # query rows of the rank
        per_key = 2 * rows * (a.qk_dim + a.v_head_dim)  # QK^T and PV FLOPs per attended key
        lat = ctx.c.gemm_latency_us * 1e-3
        windows = tuple(x for x in spans if 0 < x[0] <= WINDOW_KEYS and x[0] < s)
        rates = ctx.window_rates if windows else None
        share = win_f = win_b = 0.0
        if rates is not None:  # short windows at cuDNN's measured time (their exponentials inside it)
            share = sum(n for _, n in windows) / sum(n for _, n in spans)
            win = share * per_key * span_keys(WINDOW_KEYS, s)
            win_f, win_b = win / rates[0], FA_BWD * win / rates[1]
            spans = tuple(x for x in spans if x not in windows)
        keys = (1 - share) * attended_keys(spans, s)  # the other layers' keys, over all the layers
        exps = rows * keys * ctx.exp_ms  # one exponential per score each way (`constants.FLOPS_PER_EXP`)
        rf, rb = ctx.attn_rates
        return keys * per_key / rf + exps + win_f + lat, FA_BWD * keys * per_key / rb + exps + win_b + 2 * lat
    g = ctx.gemm.gemm_ms
    sq, batch = s // cp, max(1, int(b * heads))
    fwd = g(sq, s, a.qk_dim, HALF, batch) + g(sq, a.v_head_dim, s, HALF, batch)
    bwd = (g(sq, a.qk_dim, s, HALF, batch) + g(s, a.qk_dim, sq, HALF, batch)
           + g(s, a.v_head_dim, sq, HALF, batch) + g(sq, s, a.v_head_dim, HALF, batch))
    scores = b * heads * sq * s  # the full s x s matrix is materialised (masked, not skipped)
    drop = ATTN_DROPOUT_BYTES if a.dropout else 0.0
    return fwd + (SOFTMAX_FWD_BYTES + drop) * scores / ctx.hbm, bwd + (SOFTMAX_BWD_BYTES + drop) * scores / ctx.hbm


def _cp_ring(ctx: Ctx, w: Builder, heads: float, core_f: float, core_b: float) -> None:
    """K/V ring exchange over CP, overlapped with the attention core it feeds."""
    if ctx.cp == 1:
        return
    a = ctx.shape
    width = heads * (a.qk_dim + a.v_head_dim) if a.mla else 2 * max(1.0, a.groups / ctx.tp) * a.qk_dim
    chunk = ctx.tokens * width * E_BYTES
    inter = ctx.tp * ctx.cp > ctx.gpus_per_node
    step = ctx.net.p2p(chunk, inter)
    fwd, bwd = (ctx.cp - 1) * step, 2 * (ctx.cp - 1) * step  # backward also returns dK, dV
    w.add(CP, max(0.0, fwd - core_f), max(0.0, bwd - core_b))


def _norms_residuals(ctx: Ctx, w: Builder) -> None:
    """Two norms and two residual adds (GPT-style: fused bias-dropout-add with a 1-byte mask)."""
    n = ctx.sp_tokens * ctx.shape.h
    norms = 2 * (2 * E_BYTES)  # read input, write output, per norm
    per = norms + 2 * (3 * E_BYTES + (1 if ctx.shape.dropout else 0))
    w.add(ELEM, per * n / ctx.hbm, 2 * per * n / ctx.hbm)
    w.tag("layernorm", norms * n / ctx.hbm)


def _activation(ctx: Ctx, w: Builder, tokens: float, width: float) -> None:
    """SwiGLU (read gate + up, write) or GeLU (read, write) over `tokens` x `width`."""
    bytes_ = (3 if ctx.shape.gated == 2 else 2) * E_BYTES * tokens * width
    w.add(ELEM, bytes_ / ctx.hbm, 2 * bytes_ / ctx.hbm)


def _mlp(ctx: Ctx, w: Builder, ffn: int) -> None:
    """A TP-sharded MLP on all T tokens (dense MLP or shared experts)."""
    a, T, dtype = ctx.shape, ctx.tokens, ctx.linear_dtype()
    _linear(ctx, w, T, a.gated * ffn / ctx.tp, a.h, dtype)
    _linear(ctx, w, T, a.h, ffn / ctx.tp, dtype)
    _activation(ctx, w, T, ffn / ctx.tp)


def _experts(ctx: Ctx, w: Builder) -> None:
    """The routed experts (`moe_layer.routed_experts`: router, permutation, expert MLPs, dispatch and
    combine, host syncs), tagged as the `moe` recompute module: recomputing it re-runs all of that."""
    start = w.forward_ms()
    routed_experts(ctx, w, _linear, _grouped, _activation)
    w.tag("moe", w.forward_ms() - start)


def _shared_experts(ctx: Ctx, w: Builder, gemm: tuple[float, float]) -> tuple[float, float]:
    """The shared-expert MLP on all T tokens; with `moe_shared_expert_overlap` (all-to-all dispatcher)
    it runs on its own stream beside the dispatch and combine (megatron-core shared_experts.py), which
    then hide behind it (`_hidden_behind`). Returns the TP-region GEMM ms with its GEMMs added."""
    start, before = w.forward_ms(), w.gemm()
    _mlp(ctx, w, ctx.shape.shared_ffn)
    shared_f = w.forward_ms() - start
    w.tag("shared_experts", shared_f)
    w.tag("moe", shared_f)
    if ctx.shared_overlap:
        w.f[EP] = _hidden_behind(w.f[EP], shared_f, ctx.c)
        w.b[EP] = _hidden_behind(w.b[EP], 2 * shared_f, ctx.c)
    return _plus_since(gemm, w.gemm(), before)


def _overhead(ctx: Ctx, w: Builder, moe: bool, pre_f: float) -> None:
    """The GPU's wait on the host where the layer's kernels run faster than the host issues them
    (`host_issue.host_bound`; `pre_f`: forward GPU ms of the attention block, before the dispatch)."""
    f, b = host_bound(ctx, moe, sum(w.f), sum(w.b) + sum(w.w), pre_f)
    w.add(OVH, f, b)


def _fsdp(ctx: Ctx, w: Builder, params: tuple[float, float]) -> None:
    """FSDP: gather the layer's BF16 weights before forward and backward, reduce-scatter its grads,
    each over the group that shards it: dense weights over DP·CP (ranks TP apart), expert weights over
    expert-DP (ranks ETP·EP apart; megatron-core parallel_state.py expert grid), so a spanning group's
    inter-node bytes are its own. Prefetch hides each behind the layer's compute (`_hidden_behind`)."""
    if ctx.fsdp <= 1 and ctx.fsdp_expert <= 1:
        return
    dense, expert = params
    net, g = ctx.net, ctx.grad_bytes
    gather = (net.all_gather(dense * BF16_BYTES, ctx.fsdp, ctx.tp)
              + net.all_gather(expert * BF16_BYTES, ctx.fsdp_expert, ctx.etp * ctx.ep))
    scatter = (net.reduce_scatter(dense * g, ctx.fsdp, ctx.tp)
               + net.reduce_scatter(expert * g, ctx.fsdp_expert, ctx.etp * ctx.ep))
    busy_f, busy_b = sum(w.f), sum(w.b) + sum(w.w)
    w.add(FSDP, _hidden_behind(gather, busy_f, ctx.c), _hidden_behind(gather + scatter, busy_b, ctx.c))


# Layer pairs run through `_pair_period`'s two-stream timeline before its per-pair period is read off: the
# first pairs fill the streams, later ones repeat.
PAIRS_SIMULATED = 8


def _pair_period(attn: tuple[float, float, float], mlp: tuple[float, float, float], comm: float) -> float:
    """ms per layer pair of megatron-core's combined 1F1B in steady state (models/common/
    model_chunk_schedule_plan.py `TransformerLayerSchedulePlan.run` @ d98e8a64dd). Each pair launches, in
    this order, on the compute stream attention forward, MoE MLP backward, its wgrad, MoE MLP forward,
    attention backward and its wgrad, and on the communication stream the backward's combine, the
    forward's dispatch, the backward's dispatch and the forward's combine, `comm` ms each. A stream runs its
    work in launch order; each micro-batch's nodes share one CUDA event that every node waits on and then
    records (pipeline_parallel/utils.py `ScheduleNode.stream_acquire_context`), so a micro-batch's nodes run
    one after another across both streams: forward attention -> dispatch -> MLP -> combine -> next layer's
    attention, backward combine -> MLP -> dispatch -> attention -> next layer's combine. The wgrad nodes
    (`backward_dw`) neither wait on nor record the event. `attn`, `mlp`: (forward, data-grad, wgrad) ms."""
    af, ab, aw = attn
    mf, mb, mw = mlp
    comp = link = f_done = b_done = 0.0
    ends = []
    for _ in range(PAIRS_SIMULATED):
        link = comb_b = max(link, b_done) + comm
        comp = attn_f = max(comp, f_done) + af
        comp = mlp_b = max(comp, comb_b) + mb
        link = disp_f = max(link, attn_f) + comm
        comp += mw
        link = disp_b = max(link, mlp_b) + comm
        comp = mlp_f = max(comp, disp_f) + mf
        link = f_done = max(link, mlp_f) + comm
        comp = b_done = max(comp, disp_b) + ab
        comp += aw
        ends.append(max(comp, link))
    half = PAIRS_SIMULATED // 2
    return (ends[-1] - ends[half - 1]) / (PAIRS_SIMULATED - half)


def _ep_overlap(ctx: Ctx, w: Builder, pre: tuple[float, float, float]) -> None:
    """overlap_moe_expert_parallel_comm: Megatron's combined 1F1B runs one micro-batch's forward beside
    another's backward, layer by layer (`_pair_period`): what the pair's period exceeds its compute by is
    exposed, the rest of the exchange is covered at `overlap_cost` (`_hidden_behind`), split between the
    passes like their exchanges. `pre`: the attention block's (forward, data-grad, wgrad) ms; the rest of
    the layer's compute is the MoE MLP's. Dispatch and combine move the same bytes
    (`moe_layer.dispatch_combine`), half of each pass's exchange each. This is a paired pass; the warm-up and
    cool-down passes, which have no partner, run the layer as without the overlap (`pipeline.blocks`' solo
    work, timed in `schedule.py`)."""
    comm_f, comm_b = w.f[EP], w.b[EP]
    if comm_f + comm_b <= 0:
        return
    mlp = (sum(w.f) - comm_f - pre[0], sum(w.b) - comm_b - pre[1], sum(w.w) - pre[2])
    compute = sum(pre) + sum(mlp)
    exposed = _pair_period(pre, mlp, (comm_f + comm_b) / 4) - compute
    total = exposed + ctx.c.overlap_cost * (comm_f + comm_b - exposed)
    w.f[EP] = total * comm_f / (comm_f + comm_b)
    w.b[EP] = total * comm_b / (comm_f + comm_b)


@lru_cache(maxsize=8192)
def _attention_block(ctx: Ctx, moe: bool) -> tuple[Work, tuple[float, float]]:
    """A layer's attention block with its norms and residual adds, and its TP regions' (forward, backward) GEMM
    ms; taken in the dense view (it reads no MoE knob), so a MoE layer's dispatch and EP-overlap settings share
    it."""
    w = Builder()
    _attention(ctx, w, moe)
    gemm = w.gemm()
    _norms_residuals(ctx, w)
    return w.build(), gemm


@lru_cache(maxsize=8192)
def _moe_body(ctx: Ctx) -> tuple[Work, tuple[float, float]]:
    """A MoE layer's attention block, routed and shared experts, and its TP regions' (forward, backward) GEMM ms:
    all but its TP collectives and the EP overlap, taken without the overlaps (it reads neither), so their
    settings share it."""
    attention, gemm = _attention_block(ctx.dense_view, True)
    w = Builder.of(attention)
    _experts(ctx, w)
    if ctx.shape.shared_ffn:
        gemm = _shared_experts(ctx, w, gemm)
    return w.build(), gemm


def _plus_since(gemm: tuple[float, float], now: tuple[float, float], before: tuple[float, float]
                ) -> tuple[float, float]:
    """`gemm` plus the (forward, backward) GEMM ms added between `before` and `now`."""
    return gemm[0] + now[0] - before[0], gemm[1] + now[1] - before[1]


def transformer_layer(ctx: Ctx, moe: bool, params: tuple[float, float]) -> Work:
    """One dense or MoE transformer layer (`params`: its (dense, expert) weights on this rank, for FSDP); a dense
    one in the context's `dense_view` (it reads no MoE knob)."""
    return _layer(ctx if moe else ctx.dense_view, moe, params)


@lru_cache(maxsize=8192)
def _layer(ctx: Ctx, moe: bool, params: tuple[float, float]) -> Work:
    attention, gemm = _attention_block(ctx.dense_view, moe)  # then the dense MLP or the shared experts' TP GEMMs
    pre_f = sum(attention.f)
    pre = (pre_f, sum(attention.b), sum(attention.w))
    if moe:
        body, gemm = _moe_body(ctx.overlap_free)
        w = Builder.of(body)
        _tp_collectives(ctx, w, 1 + (1 if ctx.shape.shared_ffn else 0), gemm)
        if ctx.ep_overlap:
            _ep_overlap(ctx, w, pre)
    else:
        w = Builder.of(attention)
        start, before = w.forward_ms(), w.gemm()
        _mlp(ctx, w, ctx.shape.ffn)
        gemm = _plus_since(gemm, w.gemm(), before)
        w.tag("mlp", w.forward_ms() - start)
        _tp_collectives(ctx, w, 2, gemm)
    _overhead(ctx, w, moe, pre_f)
    _fsdp(ctx, w, params)
    return w.build()


def embedding(ctx: Ctx) -> Work:
    """Vocab-parallel lookup (+ its TP reduction) and the gradient scatter-add, in the context's `dense_view`."""
    return _embedding(ctx.dense_view)


@lru_cache(maxsize=4096)
def _embedding(ctx: Ctx) -> Work:
    w = Builder()
    n = ctx.tokens * ctx.shape.h
    w.add(ELEM, 2 * n * E_BYTES / ctx.hbm, n * EMBEDDING_GRAD_BYTES / ctx.hbm)
    one = _tp_one(ctx)  # SP: reduce-scatter forward, all-gather backward; else all-reduce forward
    if ctx.sp:
        w.add(TP, one, one)
    else:
        w.add(TP, 2 * one)
    return w.build()


def output_head(ctx: Ctx) -> Work:
    """Final norm, vocab-parallel logits GEMM (BF16 also under FP8) and the cross-entropy loss, in the context's
    `dense_view`."""
    return _output_head(ctx.dense_view)


@lru_cache(maxsize=4096)
def _output_head(ctx: Ctx) -> Work:
    a, T = ctx.shape, ctx.tokens
    w = Builder()
    n = ctx.sp_tokens * a.h
    w.add(ELEM, 2 * E_BYTES * n / ctx.hbm, 4 * E_BYTES * n / ctx.hbm)
    one = _tp_one(ctx)  # SP: all-gather forward, reduce-scatter backward; else all-reduce backward
    if ctx.sp:
        w.add(TP, one, one)
    else:
        w.add(TP, 0.0, 2 * one)
    vocab = padded_vocab(a.vocab, ctx.tp) / ctx.tp  # the output layer runs over the padded vocabulary
    _linear(ctx, w, T, vocab, a.h, HALF)
    fwd, bwd = LOSS_BYTES[ctx.ce_fusion]
    w.add(ELEM, fwd * T * vocab / ctx.hbm, bwd * T * vocab / ctx.hbm)
    return w.build()


@lru_cache(maxsize=4096)
def mtp_module(ctx: Ctx, moe: bool, params: tuple[float, float]) -> Work:
    """One multi-token-prediction module: embedding, two norms, the 2h->h projection, one
    transformer layer and its own output head (DeepSeek-V3 §2.2)."""
    a = ctx.shape
    w = Builder()
    _linear(ctx, w, ctx.tokens, a.h / ctx.tp, 2 * a.h, ctx.linear_dtype())
    n = ctx.sp_tokens * a.h
    w.add(ELEM, 4 * E_BYTES * n / ctx.hbm, 8 * E_BYTES * n / ctx.hbm)
    return w.build() + embedding(ctx) + transformer_layer(ctx, moe, params) + output_head(ctx)
