"""Model FLOPs per token: the convention behind `tflops_per_gpu` and MFU.

Forward + backward = 3 x forward; a GEMM costs 2·m·n·k; causal attention counts half of the s² term
(each token attends to s/2 keys on average), a sliding window or chunk the keys each query sees; MoE
counts the router, top-k experts and shared experts; the logits GEMM counts, the embedding lookup does
not; MTP modules count; recompute does not.
"""

from __future__ import annotations

from ..model_shape import ModelShape, model_shape
from ..specs import ModelArch


def attention_linear_flops(a: ModelShape) -> float:
    """Forward FLOPs per token of the attention projections."""
    if a.mla:
        q_in = a.q_lora_rank or a.h  # the query up-projection reads the latent, or h directly
        q = (2 * a.h * a.q_lora_rank if a.q_lora_rank else 0) + 2 * q_in * a.heads * a.qk_dim
        kv = 2 * a.h * (a.kv_lora_rank + a.qk_pos_dim) + 2 * a.kv_lora_rank * a.heads * (a.qk_head_dim + a.v_head_dim)
        return q + kv + 2 * a.heads * a.v_head_dim * a.h
    return 2 * a.h * (a.heads + 2 * a.groups) * a.qk_dim + 2 * a.heads * a.v_head_dim * a.h


def mlp_flops(a: ModelShape, ffn: int) -> float:
    return 2.0 * a.h * ffn * (a.gated + 1)


def span_keys(span: int, seq: int) -> float:
    """Mean keys a query attends in a causal `seq`-token sequence: s/2 for full attention (flash
    attention's half square); a window of w keys sees min(p+1, w) at position p; chunks of C tokens
    (span -C) see p mod C + 1. Never more than the full s/2."""
    if span > 0 and span < seq:
        return min(seq / 2, span - span * (span - 1) / (2 * seq))
    if span < 0 and -span < seq:
        c = -span
        q, r = divmod(seq, c)
        return min(seq / 2, (q * c * (c + 1) / 2 + r * (r + 1) / 2) / seq)
    return seq / 2


def attended_keys(spans: tuple[tuple[int, int], ...], seq: int) -> float:
    """Mean keys per query over layers with (span, count) `spans` (`ModelShape.spans_dense` / `spans_moe`;
    none: full attention)."""
    if not spans:
        return seq / 2
    if len(spans) == 1:
        return span_keys(spans[0][0], seq)
    return sum(n * span_keys(s, seq) for s, n in spans) / sum(n for _, n in spans)


def layer_flops(a: ModelShape, seq: int, moe: bool) -> float:
    """Forward FLOPs per token of one transformer layer (causal attention over its layers' spans)."""
    keys = attended_keys(a.spans_moe if moe else a.spans_dense, seq)
    attn = attention_linear_flops(a) + 2 * keys * a.heads * (a.qk_dim + a.v_head_dim)
    if not moe:
        return attn + mlp_flops(a, a.ffn)
    experts = 2.0 * a.h * a.experts + a.topk * mlp_flops(a, a.expert_ffn)
    return attn + experts + (mlp_flops(a, a.shared_ffn) if a.shared_ffn else 0.0)


def model_flops_per_token(model: ModelArch, seq_length: int) -> float:
    """Training FLOPs (forward + backward, no recompute) per token of `seq_length`-token sequences."""
    a = model_shape(model)
    pattern = model.moe_layer_pattern
    moe = sum(pattern)
    fwd = moe * layer_flops(a, seq_length, True) + (len(pattern) - moe) * layer_flops(a, seq_length, False)
    head = 2.0 * a.h * a.vocab
    mtp = a.mtp_layers * (layer_flops(a, seq_length, bool(pattern[-1])) + 4.0 * a.h * a.h + head)
    return 3.0 * (fwd + head + mtp)
