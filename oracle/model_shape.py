"""The one flattened view of a `ModelArch` that memory, time and benchmark mode read, with one
vocabulary of names; built once per model object (`oracle.identity_cache`).

Every derived model fact is decided here and nowhere else: attention widths (GQA or MLA), which
layers are MoE, the expert count (0 for a dense model), routed copies per token under a capacity
factor, MTP placement, norms, biases, dropout, the position type, tied weights and attention spans.
`ModelShape` hashes by identity, so the caches keyed on it downstream are cheap.
"""

from __future__ import annotations

from dataclasses import dataclass

from .identity_cache import by_identity
from .specs import ModelArch

# Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by (default 128) x TP
# (megatron/training/arguments.py, tokenizer `_vocab_size_with_padding`).
VOCAB_DIVISIBLE_BY = 128


@dataclass(frozen=True, eq=False, slots=True)
class ModelShape:
    h: int
    heads: int
    groups: int  # key/value heads (num_query_groups; GQA only)
    head_dim: int  # GQA head width (kv_channels)
    qk_head_dim: int  # query/key width per head without MLA's decoupled rotary part (GQA: head_dim)
    qk_pos_dim: int  # MLA's decoupled rotary width (GQA: 0)
    qk_dim: int  # query/key width per head, rotary included: qk_head_dim + qk_pos_dim
    v_head_dim: int  # value width per head (GQA: head_dim)
    mla: bool
    q_lora_rank: int  # MLA query down-projection rank; 0 = direct Q projection
    kv_lora_rank: int  # MLA key/value latent (0 for GQA)
    ffn: int
    gated: int  # up-projections in the MLP: 2 for SwiGLU (gate + up), 1 otherwise
    vocab: int  # the tokenizer's vocabulary; Megatron pads it per TP size (`padded_vocab`)
    num_layers: int
    pattern: tuple[int, ...]  # 1 = MoE layer, 0 = dense layer
    is_moe: bool
    experts: int  # routed experts, 0 for a dense model
    topk: int
    expert_ffn: int
    shared_ffn: int  # 0 when the model has no shared experts
    capacity_factor: float | None
    # Capacity per expert = ceil(tokens·top-k/E · capacity factor); copies beyond it are dropped
    # (megatron-core 0.16.1 moe/moe_utils.py `get_capacity`, `apply_router_token_dropping`, no padding).
    routed_peak: float  # expert copies per token a rank may have to hold: top-k x capacity factor
    routed_mean: float  # ... it processes at balanced load: top-k, fewer when a capacity below 1 drops
    mtp_layers: int
    mtp_is_moe: bool  # MTP modules repeat the last decoder layer's kind
    rms: bool  # RMSNorm (else LayerNorm)
    norm_params: int  # parameters per hidden unit of one norm: LayerNorm 2 (weight, bias), RMSNorm 1
    bias: bool  # linear biases (add_bias_linear), the router's included
    qkv_bias: bool  # QKV bias (add_qkv_bias, default add_bias_linear)
    qk_norm: bool  # a norm over each head's Q and K (qk_layernorm or Llama 4's qk_l2_norm); not MLA
    qk_norm_params: int  # its weights per head dimension: 0 for the L2 norm
    sinks: bool  # learnable softmax offsets, one per head (softmax_type: learnable)
    dropout: bool  # hidden and attention dropout (1-byte masks)
    learned_positions: bool
    rotary: bool  # RoPE on Q and K
    # TE's fused RoPE kernel: Megatron keeps it for plain RoPE only (YaRN, mRoPE run megatron-core's unfused
    # rotary, `constants.ROPE_UNFUSED_MOVES`)
    rope_fused: bool
    untied: bool  # separate output-layer weight
    spans_dense: tuple[tuple[int, int], ...]  # (attention span, layers) of the dense layers (`attention_spans`)
    spans_moe: tuple[tuple[int, int], ...]  # ... of the MoE layers


def _spans(model: ModelArch, kind: int) -> tuple[tuple[int, int], ...]:
    """(span, number of layers) over the layers of one kind (0 dense, 1 MoE), spans as `attention_spans`."""
    spans = [s for s, k in zip(model.attention_spans, model.moe_layer_pattern) if k == kind]
    return tuple(sorted((s, spans.count(s)) for s in set(spans)))


def _build(model: ModelArch) -> ModelShape:
    rms = model.normalization.lower() == "rmsnorm"
    mla = model.multi_latent_attention
    qk_norm = (model.qk_layernorm or model.qk_l2_norm) and not mla
    pattern = tuple(model.moe_layer_pattern)
    qk_head = model.qk_head_dim if mla else model.head_dim
    qk_pos = model.qk_pos_emb_head_dim if mla else 0
    cf = model.moe_expert_capacity_factor
    topk = model.moe_router_topk
    return ModelShape(
        h=model.hidden_size, heads=model.num_attention_heads, groups=model.groups,
        head_dim=model.head_dim, qk_head_dim=qk_head, qk_pos_dim=qk_pos, qk_dim=qk_head + qk_pos,
        v_head_dim=model.v_head_dim if mla else model.head_dim, mla=mla,
        q_lora_rank=(model.q_lora_rank or 0) if mla else 0, kv_lora_rank=model.kv_lora_rank if mla else 0,
        ffn=model.ffn, gated=model.gated_mult, vocab=model.vocab_size, num_layers=model.num_layers,
        pattern=pattern, is_moe=model.is_moe, experts=(model.num_experts or 0) if model.is_moe else 0,
        topk=topk, expert_ffn=model.expert_ffn, shared_ffn=model.moe_shared_expert_intermediate_size or 0,
        capacity_factor=cf, routed_peak=topk * (cf or 1.0), routed_mean=topk * min(1.0, cf or 1.0),
        mtp_layers=model.mtp_num_layers, mtp_is_moe=bool(pattern and pattern[-1]), rms=rms,
        norm_params=1 if rms else 2,
        bias=model.add_bias_linear, qkv_bias=model.qkv_bias, qk_norm=qk_norm,
        qk_norm_params=(1 if rms else 2) if qk_norm and model.qk_layernorm else 0,
        sinks=model.softmax_type == "learnable", dropout=model.has_dropout,
        learned_positions=model.learned_positions, rotary=model.rotary,
        rope_fused=model.position_embedding_type in (None, "rope"),
        untied=model.untie_embeddings_and_output_weights, spans_dense=_spans(model, 0), spans_moe=_spans(model, 1),
    )


@by_identity()
def model_shape(model: ModelArch) -> ModelShape:
    """The shape of `model`, built once per model object."""
    return _build(model)


def padded_vocab(vocab: int, tp: int) -> int:
    """The vocabulary padded for `tp` (VOCAB_DIVISIBLE_BY): embedding and logits run at this size."""
    step = VOCAB_DIVISIBLE_BY * tp
    return -(-vocab // step) * step
