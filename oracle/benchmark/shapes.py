"""Per-rank shapes of one transformer layer of a layout, and the tiny stand-in layout of a CPU smoke run.

TP shards heads, query groups and the MLP; SP splits the tokens outside the TP region TP ways; CP
splits the sequence (tokens per rank = MBS·seq/CP); EP keeps num_experts/EP experts per rank that,
at balanced load, receive the rank's own tokens·topk routed copies; ETP shards the expert MLP.

Tiny rule (CPU smoke runs, `tiny_layout`): the parallel sizes stay, the widths shrink so every
division still holds — hidden 64, head width 16 (MLA: qk 16 + rotary 8, v 16, kv_lora 32, q_lora 32),
2 heads per TP rank (1 query group per rank under GQA), MLP 64 and shared experts 32 per TP rank,
expert MLP 32 per ETP rank, at most 2 experts per EP rank, seq 16·max(4, TP) per CP rank, MBS 1.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass

from ..model_shape import model_shape
from ..specs import EffectiveConfig, ModelArch


@dataclass(frozen=True)
class LayerShape:
    """What one rank computes for one layer: the unit benchmark mode builds, times and caches. Widths
    are named as in `ModelShape`; the per-rank ones say so."""

    moe: bool
    mla: bool
    mbs: int
    seq: int  # query tokens per sequence on this rank (seq / CP)
    cp: int
    sp: int  # sequence-parallel split of the tokens outside the TP region (TP under SP, else 1)
    h: int
    heads: int  # attention heads on this rank
    groups: int  # key/value heads on this rank
    qk_head_dim: int  # query/key width per head without MLA's decoupled rotary part
    qk_pos_dim: int  # MLA's decoupled rotary width; 0 for GQA (rotary over all of qk_head_dim)
    v_head_dim: int
    q_lora_rank: int  # MLA query down-projection rank; 0 = direct query projection
    kv_lora_rank: int
    ffn: int  # MLP width on this rank (an MoE layer: its shared experts, 0 = none)
    gated: int  # 2 for SwiGLU (gate + up), 1 for GeLU
    rms: bool  # RMSNorm (else LayerNorm)
    rotary: bool
    experts: int  # router width (all experts); 0 for a dense layer
    local_experts: int
    topk: int
    expert_ffn: int  # expert MLP width on this rank (/ETP)
    etp: int
    fp8: str | None  # FP8 recipe of the linear GEMMs, None = BF16

    @property
    def kind(self) -> str:
        return "moe" if self.moe else "dense"

    @property
    def tokens(self) -> int:
        """Tokens of one micro-batch on this rank (inside the TP region)."""
        return self.mbs * self.seq

    def key(self, device: str) -> str:
        """Cache key: every shape field, the precision and the device (with its torch build)."""
        blob = "|".join(f"{k}={v}" for k, v in asdict(self).items()) + f"|device={device}"
        return hashlib.sha256(blob.encode()).hexdigest()[:24]


def layer_kinds(model: ModelArch) -> tuple[bool, ...]:
    """The layer kinds a model holds, dense (False) before MoE (True)."""
    pattern = model_shape(model).pattern
    return tuple(moe for moe in (False, True) if int(moe) in pattern)


def layer_shape(model: ModelArch, cfg: EffectiveConfig, moe: bool) -> LayerShape:
    """Per-rank shape of one dense or MoE layer of `model` under layout `cfg`, from its `ModelShape`."""
    a, tp = model_shape(model), cfg.tp
    heads = a.heads // tp
    return LayerShape(
        moe=moe, mla=a.mla, mbs=cfg.mbs, seq=cfg.seq_length // cfg.cp, cp=cfg.cp,
        sp=tp if cfg.sequence_parallel else 1, h=a.h, heads=heads, groups=heads if a.mla else max(1, a.groups // tp),
        qk_head_dim=a.qk_head_dim, qk_pos_dim=a.qk_pos_dim, v_head_dim=a.v_head_dim, q_lora_rank=a.q_lora_rank,
        kv_lora_rank=a.kv_lora_rank, ffn=(a.shared_ffn if moe else a.ffn) // tp, gated=a.gated, rms=a.rms,
        rotary=a.rotary, experts=a.experts if moe else 0, local_experts=a.experts // cfg.ep if moe else 0,
        topk=a.topk if moe else 0, expert_ffn=a.expert_ffn // cfg.etp if moe else 0,
        etp=cfg.etp if moe else 1, fp8=cfg.fp8,
    )


def tiny_layout(model: ModelArch, cfg: EffectiveConfig) -> tuple[ModelArch, EffectiveConfig]:
    """The stand-in (model, layout) of a CPU smoke run: same parallel sizes, tiny widths (module doc)."""
    tp, gqa = cfg.tp, model.groups < model.num_attention_heads
    heads = tp * min(2, model.num_attention_heads // tp)
    update = {"hidden_size": 64, "num_attention_heads": heads, "num_query_groups": tp if gqa else heads,
              "kv_channels": 16, "ffn_hidden_size": 64 * tp, "vocab_size": 256,
              "qk_head_dim": 16, "qk_pos_emb_head_dim": 8, "v_head_dim": 16, "kv_lora_rank": 32,
              "q_lora_rank": 32 if model.q_lora_rank else None}
    if model.is_moe:
        experts = cfg.ep * min(2, (model.num_experts or 0) // cfg.ep)
        update |= {"num_experts": experts, "moe_router_topk": min(model.moe_router_topk, experts),
                   "moe_ffn_hidden_size": 32 * cfg.etp,
                   "moe_shared_expert_intermediate_size":
                       32 * tp if model.moe_shared_expert_intermediate_size else None}
    fields = {**cfg.model_dump(), "mbs": 1, "seq_length": cfg.cp * 16 * max(4, tp)}
    return model.model_copy(update=update), EffectiveConfig.model_construct(**fields)
