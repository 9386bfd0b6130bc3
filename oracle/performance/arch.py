"""The numbers of a `ModelArch` the time model reads, as one small hashable record."""

from __future__ import annotations

from dataclasses import dataclass

from ..identity_cache import by_identity
from ..specs import ModelArch


@dataclass(frozen=True)
class Arch:
    h: int
    heads: int
    groups: int
    qk_dim: int  # query/key width per head (MLA: qk_head_dim + qk_pos_emb_head_dim)
    v_dim: int  # value width per head
    ffn: int
    gated: int  # 2 for SwiGLU (gate + up), 1 otherwise
    vocab: int
    experts: int  # 0 for a dense model
    topk: int
    expert_ffn: int
    shared_ffn: int  # 0 without shared experts
    mla: bool
    q_lora: int  # 0 = direct Q projection
    kv_lora: int
    rope_dim: int  # MLA's decoupled rotary width
    mtp_layers: int
    gpt_style: bool  # LayerNorm + GeLU cards: hidden dropout, learned positions, no rotary
    untied: bool  # separate output-layer weight


@by_identity()
def arch_of(model: ModelArch) -> Arch:
    """The time model's view of `model`, built once per model object."""
    mla = model.multi_latent_attention
    return Arch(
        h=model.hidden_size,
        heads=model.num_attention_heads,
        groups=model.groups,
        qk_dim=model.qk_head_dim + model.qk_pos_emb_head_dim if mla else model.head_dim,
        v_dim=model.v_head_dim if mla else model.head_dim,
        ffn=model.ffn,
        gated=model.gated_mult,
        vocab=model.vocab_size,
        experts=model.num_experts if model.is_moe else 0,
        topk=model.moe_router_topk,
        expert_ffn=model.expert_ffn,
        shared_ffn=model.moe_shared_expert_intermediate_size or 0,
        mla=mla,
        q_lora=model.q_lora_rank or 0,
        kv_lora=model.kv_lora_rank,
        rope_dim=model.qk_pos_emb_head_dim,
        mtp_layers=model.mtp_num_layers,
        gpt_style=model.normalization.lower() != "rmsnorm" and not model.swiglu,
        untied=model.untie_embeddings_and_output_weights,
    )
