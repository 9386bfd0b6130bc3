"""Plain numbers derived once from a `ModelArch`: what the memory formulas read in the hot path.

`geometry(model)` is cached on the model object's identity (see `oracle.identity_cache`).
The returned `Geometry` hashes by identity, so downstream `lru_cache`s keyed on it are cheap.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..identity_cache import by_identity
from ..specs import ModelArch
from .constants import LAYERNORM_STAT_BYTES, RMSNORM_STAT_BYTES, VOCAB_DIVISIBLE_BY


@dataclass(frozen=True, eq=False, slots=True)
class Geometry:
    h: int
    heads: int
    groups: int
    head_dim: int
    ffn: int
    gated: int  # up-projections in the MLP: 2 for SwiGLU, 1 otherwise
    vocab: int
    num_layers: int
    pattern: tuple[int, ...]  # 1 = MoE layer, 0 = dense layer
    is_moe: bool
    experts: int
    topk: int
    expert_ffn: int
    shared_ffn: int  # 0 when the model has no shared experts
    capacity_factor: float | None
    mla: bool
    q_lora_rank: int  # 0 = direct Q projection
    kv_lora_rank: int
    qk_head_dim: int
    qk_pos_dim: int
    v_head_dim: int
    mtp_layers: int
    mtp_is_moe: bool
    norm_params: int  # parameters per hidden unit of one norm: LayerNorm 2 (weight, bias), RMSNorm 1
    norm_stat_bytes: int
    bias: bool  # linear biases (add_bias_linear), the router's included
    qkv_bias: bool  # QKV bias (add_qkv_bias, default add_bias_linear)
    qk_norm: bool  # a norm over each head's Q and K (qk_layernorm or Llama 4's qk_l2_norm); not MLA
    qk_norm_params: int  # its weights per head dimension: 0 for the L2 norm
    sinks: bool  # learnable softmax offsets, one per head (softmax_type: learnable)
    dropout: bool
    learned_positions: bool
    untied: bool


def _build(model: ModelArch) -> Geometry:
    rms = model.normalization.lower() == "rmsnorm"
    qk_norm = (model.qk_layernorm or model.qk_l2_norm) and not model.multi_latent_attention
    pattern = tuple(model.moe_layer_pattern)
    return Geometry(
        h=model.hidden_size,
        heads=model.num_attention_heads,
        groups=model.groups,
        head_dim=model.head_dim,
        ffn=model.ffn,
        gated=model.gated_mult,
        vocab=model.vocab_size,
        num_layers=model.num_layers,
        pattern=pattern,
        is_moe=model.is_moe,
        experts=model.num_experts or 1,
        topk=model.moe_router_topk,
        expert_ffn=model.expert_ffn,
        shared_ffn=model.moe_shared_expert_intermediate_size or 0,
        capacity_factor=model.moe_expert_capacity_factor,
        mla=model.multi_latent_attention,
        q_lora_rank=model.q_lora_rank or 0,
        kv_lora_rank=model.kv_lora_rank,
        qk_head_dim=model.qk_head_dim,
        qk_pos_dim=model.qk_pos_emb_head_dim,
        v_head_dim=model.v_head_dim,
        mtp_layers=model.mtp_num_layers,
        mtp_is_moe=bool(pattern and pattern[-1]),
        norm_params=1 if rms else 2,
        norm_stat_bytes=RMSNORM_STAT_BYTES if rms else LAYERNORM_STAT_BYTES,
        bias=model.add_bias_linear,
        qkv_bias=model.qkv_bias,
        qk_norm=qk_norm,
        qk_norm_params=(1 if rms else 2) if qk_norm and model.qk_layernorm else 0,
        sinks=model.softmax_type == "learnable",
        dropout=model.has_dropout,
        learned_positions=model.learned_positions,
        untied=model.untie_embeddings_and_output_weights,
    )


@by_identity()
def geometry(model: ModelArch) -> Geometry:
    """The geometry of `model`, built once per model object."""
    return _build(model)


def padded_vocab(vocab: int, tp: int) -> int:
    """Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by x TP."""
    step = VOCAB_DIVISIBLE_BY * tp
    return -(-vocab // step) * step
