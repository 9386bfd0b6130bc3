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
    rotary: bool  # RoPE on Q and K
    dropout: bool  # hidden and attention dropout (1-byte masks)
    qk_norm: bool  # a norm over each head's Q and K (learned or L2)
    untied: bool  # separate output-layer weight
    spans_dense: tuple[tuple[int, int], ...]  # (attention span, layers) of the dense layers: `ModelArch.attention_spans`
    spans_moe: tuple[tuple[int, int], ...]  # ... of the MoE layers


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
        rotary=model.rotary,
        dropout=model.has_dropout,
        qk_norm=(model.qk_layernorm or model.qk_l2_norm) and not mla,
        untied=model.untie_embeddings_and_output_weights,
        spans_dense=_spans(model, 0),
        spans_moe=_spans(model, 1),
    )


def _spans(model: ModelArch, kind: int) -> tuple[tuple[int, int], ...]:
    """(span, number of layers) over the layers of one kind (0 dense, 1 MoE), spans as `attention_spans`."""
    spans = [s for s, k in zip(model.attention_spans, model.moe_layer_pattern) if k == kind]
    return tuple(sorted((s, spans.count(s)) for s in set(spans)))
