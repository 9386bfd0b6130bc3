"""Weights one rank holds, split into the part sharded like dense layers and the expert part."""

from __future__ import annotations

from .arch import Arch


def attention_params(a: Arch, tp: int) -> float:
    """Attention projections on one TP rank (MLA down-projections are replicated over TP)."""
    if a.mla:
        heads = a.heads / tp
        down = a.h * (a.kv_lora + a.rope_dim) + (a.h * a.q_lora if a.q_lora else 0)
        q_up = (a.q_lora or a.h) * heads * a.qk_dim
        kv_up = a.kv_lora * heads * (a.qk_dim - a.rope_dim + a.v_dim)
        return down + q_up + kv_up + heads * a.v_dim * a.h
    return a.h * (a.heads + 2 * a.groups) * a.qk_dim / tp + a.heads * a.v_dim * a.h / tp


def layer_params(a: Arch, tp: int, ep: int, etp: int, moe: bool) -> tuple[float, float]:
    """(dense-sharded, expert) weights of one transformer layer on one rank."""
    dense = attention_params(a, tp) + 2 * a.h
    if not moe:
        return dense + (a.gated + 1) * a.h * a.ffn / tp, 0.0
    dense += a.experts * a.h + (a.gated + 1) * a.h * a.shared_ffn / tp
    return dense, (a.experts / ep) * (a.gated + 1) * a.h * a.expert_ffn / etp


def vocab_params(a: Arch, tp: int) -> float:
    """One vocab-parallel embedding (or output layer) shard."""
    return a.vocab * a.h / tp
