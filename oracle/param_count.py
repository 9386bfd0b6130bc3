"""Parameter counts held by one GPU, per layer type and for the embedding / output / MTP blocks: the one
count memory (weights, gradients, optimizer state) and time (DP traffic, optimizer step, FSDP) read.

Counts are per rank after tensor (TP), expert (EP) and expert-tensor (ETP) sharding; data-parallel
sharding of the optimizer state is applied by the reader (`memory/estimate.py`, `performance/pipeline.py`).
Dense parameters (attention, dense MLP, router, shared experts, norms, embeddings) are sharded over TP
only; CP does not shard parameters.
Expert parameters are sharded over EP (whole experts) and ETP (each expert's FFN dimension).
The layer formulas match Megatron-LM's `compute_weight_and_optimizer_memory` term by term (MLA
included) and add what it leaves out: biases (QKV, output, MLP, experts, router: megatron-core 0.16.1
`router.py` builds a bias under add_bias_linear), Q/K norms and learnable softmax offsets
(`dot_product_attention.py` `softmax_offset`, one per head, sharded over TP).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .model_shape import ModelShape, padded_vocab


@dataclass(frozen=True, slots=True)
class LayerParams:
    dense: float  # parameters sharded like the dense part (DP·CP for the distributed optimizer)
    expert: float  # parameters sharded like the experts (expert-DP)
    linear: float  # weights of GEMM layers (get FP8 copies under FP8 training)


def _attention(g: ModelShape, tp: int) -> tuple[float, float]:
    """(all parameters, linear weights) of one attention block on one TP rank, without its norm."""
    h, a = g.h, g.heads
    if g.mla:
        qk = g.qk_head_dim + g.qk_pos_dim
        # Replicated over TP (Megatron builds the down-projections as "duplicated" linears):
        #   q_down h x q_lora (+ q_layernorm q_lora), kv_down h x (kv_lora + rope) (+ kv_layernorm).
        rep_linear = h * (g.kv_lora_rank + g.qk_pos_dim)
        rep_norm = g.kv_lora_rank * g.norm_params
        if g.q_lora_rank:
            rep_linear += h * g.q_lora_rank
            rep_norm += g.q_lora_rank * g.norm_params
            q_up = g.q_lora_rank * a * qk  # q_up: q_lora -> heads x (qk_head + rope)
        else:
            q_up = h * a * qk  # direct linear_q_proj
        # Column/row parallel over TP: q_up (or q_proj), kv_up kv_lora -> heads x (qk_head + v_head),
        # out proj heads x v_head -> h.
        sharded = (q_up + g.kv_lora_rank * a * (g.qk_head_dim + g.v_head_dim) + a * g.v_head_dim * h) / tp
        linear = rep_linear + sharded
        return linear + rep_norm, linear
    qd = a * g.head_dim
    kvd = g.groups * g.head_dim
    linear = (h * (qd + 2 * kvd) + qd * h) / tp  # fused QKV (column parallel) + output (row parallel)
    bias = ((qd + 2 * kvd) / tp if g.qkv_bias else 0.0) + (h if g.bias else 0.0)  # QKV sharded, output replicated
    extra = 2 * g.head_dim * g.qk_norm_params + (a / tp if g.sinks else 0.0)  # q/k norms (per head dim), sinks
    return linear + bias + extra, linear


def _mlp(g: ModelShape, ffn: int, shard: int) -> tuple[float, float]:
    """(all parameters, linear weights) of one MLP with `ffn` hidden units sharded `shard` ways."""
    linear = (g.gated + 1) * g.h * ffn / shard  # fc1 h -> gated*ffn, fc2 ffn -> h
    bias = (g.gated * ffn / shard + g.h) if g.bias else 0.0
    return linear + bias, linear


@lru_cache(maxsize=4096)
def layer_params(g: ModelShape, tp: int, etp: int, ep: int) -> tuple[LayerParams, LayerParams]:
    """(dense layer, MoE layer) parameters on one rank."""
    attn, attn_lin = _attention(g, tp)
    norms = 2 * g.h * g.norm_params  # input_layernorm + pre_mlp_layernorm, replicated over TP
    mlp, mlp_lin = _mlp(g, g.ffn, tp)
    dense = LayerParams(attn + norms + mlp, 0.0, attn_lin + mlp_lin)
    if not g.is_moe:
        return dense, dense
    router = g.experts * (g.h + (1 if g.bias else 0))  # router weight (and bias), replicated over TP
    shared, shared_lin = _mlp(g, g.shared_ffn, tp) if g.shared_ffn else (0.0, 0.0)
    one_expert, one_expert_lin = _mlp(g, g.expert_ffn, etp)
    local_experts = g.experts / ep
    moe = LayerParams(
        attn + norms + router + shared,
        local_experts * one_expert,
        attn_lin + shared_lin + local_experts * one_expert_lin,
    )
    return dense, moe


@dataclass(frozen=True, slots=True)
class EdgeParams:
    embedding: float  # word (+ learned position) embedding, on the first chunk
    output: float  # output layer weight on the last chunk (untied, or Megatron's tied copy when PP>1)
    final_norm: float
    mtp: LayerParams  # all MTP modules together (on the last chunk)
    mtp_embedding: float  # embedding copy the MTP block needs on the last stage (PP>1, untied)


@lru_cache(maxsize=4096)
def edge_params(g: ModelShape, tp: int, etp: int, ep: int, piped: bool, seq: int) -> EdgeParams:
    """Embedding, output, final-norm and MTP parameters on one rank (`piped`: PP > 1)."""
    vp = padded_vocab(g.vocab, tp)
    word = vp * g.h / tp  # vocab-parallel embedding
    embedding = word + (seq * g.h if g.learned_positions else 0.0)  # positions: max_position = seq
    # Untied: the output layer is its own weight. Tied: with PP>1 Megatron keeps a copy of the word
    # embedding on the last stage (synchronised through the embedding group); with PP=1 it is shared.
    output = word if (g.untied or piped) else 0.0
    final_norm = g.h * g.norm_params
    mtp = LayerParams(0.0, 0.0, 0.0)
    mtp_embedding = 0.0
    if g.mtp_layers:
        dense_l, moe_l = layer_params(g, tp, etp, ep)
        body = moe_l if g.mtp_is_moe else dense_l
        # Each MTP module: enorm + hnorm + eh_proj (2h -> h, column parallel) + one transformer layer
        # + its final norm (DeepSeek-V3 §2.2, Megatron MultiTokenPredictionLayer).
        eh_proj = 2 * g.h * g.h / tp
        extra = 3 * g.h * g.norm_params + eh_proj
        n = g.mtp_layers
        mtp = LayerParams(n * (body.dense + extra), n * body.expert, n * (body.linear + eh_proj))
        # The MTP block embeds the shifted tokens itself: with PP>1 the last stage builds an embedding;
        # tied models reuse the output copy already there.
        mtp_embedding = word if (piped and g.untied) else 0.0
    return EdgeParams(embedding, output, final_norm, mtp, mtp_embedding)
