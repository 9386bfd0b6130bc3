"""Model architecture in Megatron-LM argument names (absent = Megatron's default)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cached_property
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    field_validator,
    model_validator,
)

from .trusted import drop_cached


def parse_layer_pattern(value: str, num_layers: int) -> list[int]:
    """Expand Megatron's `moe_layer_freq` list expression, e.g. "([0]*3+[1]*58)", without eval."""
    text = value.replace(" ", "").strip("()")
    out: list[int] = []
    for term in text.split("+"):
        m = re.fullmatch(r"\[([0-9,]*)\](?:\*(\d+))?", term)
        if not m:
            raise ValueError(f"cannot read layer pattern {value!r}; expected e.g. '([0]*3+[1]*58)'")
        items = [int(x) for x in m.group(1).split(",") if x]
        out.extend(items * int(m.group(2) or 1))
    if len(out) != num_layers:
        raise ValueError(f"layer pattern {value!r} has {len(out)} entries, num_layers is {num_layers}")
    return out


class ModelArch(BaseModel):
    """A transformer decoder: dense or MoE, MHA/GQA or MLA attention."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "custom"
    source: str = ""
    num_layers: PositiveInt
    hidden_size: PositiveInt
    num_attention_heads: PositiveInt
    ffn_hidden_size: PositiveInt | None = None
    num_query_groups: PositiveInt | None = None
    kv_channels: PositiveInt | None = None
    vocab_size: PositiveInt = 32000
    swiglu: bool = False
    untie_embeddings_and_output_weights: bool = False
    normalization: str = "LayerNorm"
    add_bias_linear: bool = True
    add_qkv_bias: bool | None = None  # None: follows add_bias_linear (Megatron-LM arguments.py)
    # None: Megatron's defaults for GPT-style cards (learned positions, dropout 0.1), RoPE and no dropout
    # for Llama-style ones (RMSNorm or SwiGLU); see `learned_positions` / `has_dropout`
    position_embedding_type: Literal["learned_absolute", "rope", "yarn", "mrope", "relative", "none"] | None = None
    hidden_dropout: float | None = Field(default=None, ge=0.0, lt=1.0)
    # Carried to the launch so the launched model is the card's; not read by memory or time. None: Megatron's
    # default (arguments.py core_v0.16.1: --rotary-base 10000, --rotary-percent 1.0, --rotary-scaling-factor
    # 1.0 (MLA's YaRN factor), --norm-epsilon 1e-5, TransformerConfig.layernorm_epsilon)
    rotary_base: PositiveInt | None = None
    rotary_percent: float | None = Field(default=None, gt=0.0, le=1.0)
    rotary_scaling_factor: float | None = Field(default=None, gt=0.0)
    norm_epsilon: float | None = Field(default=None, gt=0.0)
    qk_layernorm: bool = False  # a learned norm over each head's query and key (Qwen3)
    qk_l2_norm: bool = False  # Llama 4's weightless L2 norm of query and key
    # Attention pattern (megatron-core 0.16.1 transformer_config.py): sliding window (left, right) on the layers
    # `window_attn_skip_freq` marks (int N: every Nth layer is full; list: 1 = windowed; None: all);
    # learnable softmax offsets (attention sinks, GPT-OSS)
    softmax_type: Literal["vanilla", "off-by-one", "learnable"] = "vanilla"
    window_size: tuple[int, int] | None = None
    window_attn_skip_freq: PositiveInt | list[int] | None = None
    no_rope_freq: PositiveInt | list[int] | None = None  # int N: every Nth layer skips RoPE; list: 1 = skips
    # Llama 4's chunked attention on the layers that apply RoPE (HF Llama4TextAttention; Megatron-Bridge
    # `llama4_utils.py` Llama4SelfAttention at 067f987); not a Megatron-LM argument
    attention_chunk_size: PositiveInt | None = None
    # MoE
    num_experts: PositiveInt | None = None
    moe_router_topk: PositiveInt = 2
    moe_ffn_hidden_size: PositiveInt | None = None
    moe_shared_expert_intermediate_size: PositiveInt | None = None
    moe_layer_freq: int | list[int] | str = 1
    moe_expert_capacity_factor: float | None = None
    # MLA (DeepSeek-V2/V3)
    multi_latent_attention: bool = False
    q_lora_rank: PositiveInt | None = None
    kv_lora_rank: PositiveInt = 512
    qk_head_dim: PositiveInt = 128
    qk_pos_emb_head_dim: PositiveInt = 64
    v_head_dim: PositiveInt = 128
    # multi-token prediction heads (DeepSeek-V3); each is one extra dense-attention + MLP block
    mtp_num_layers: int = Field(default=0, ge=0)

    @field_validator("moe_layer_freq")
    @classmethod
    def _freq_positive(cls, v: int | list[int] | str) -> int | list[int] | str:
        if isinstance(v, int) and v < 1:
            raise ValueError("must be >= 1")
        return v

    @model_validator(mode="after")
    def _check(self) -> ModelArch:
        if self.num_query_groups and self.num_attention_heads % self.num_query_groups:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be divisible by "
                f"num_query_groups ({self.num_query_groups})"
            )
        if isinstance(self.moe_layer_freq, (str, list)):
            self.moe_layer_pattern  # noqa: B018 - validates the pattern length now, not at evaluation
        for name in ("window_attn_skip_freq", "no_rope_freq"):
            value = getattr(self, name)
            if isinstance(value, list) and len(value) != self.num_layers:
                raise ValueError(f"{name} has {len(value)} entries, num_layers is {self.num_layers}")
        if isinstance(self.no_rope_freq, int) and self.num_layers % self.no_rope_freq:
            raise ValueError(f"num_layers ({self.num_layers}) must be divisible by no_rope_freq ({self.no_rope_freq})")
        if self.window_size is not None and (self.window_size[1] not in (0, -1) or self.window_size[0] < -1):
            raise ValueError(f"window_size {self.window_size}: only causal windows (left, 0) are modelled")
        return self

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> ModelArch:
        """A copy with `update` applied; the cached per-layer patterns are dropped, since the fields may change."""
        return drop_cached(super().model_copy(update=update, deep=deep))

    # ---- resolved defaults (Megatron's) -------------------------------------------------------
    @property
    def ffn(self) -> int:
        return self.ffn_hidden_size or 4 * self.hidden_size

    @property
    def groups(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def is_moe(self) -> bool:
        return bool(self.num_experts and self.num_experts > 1)

    @property
    def expert_ffn(self) -> int:
        return self.moe_ffn_hidden_size or self.ffn

    @cached_property
    def moe_layer_pattern(self) -> tuple[int, ...]:
        """1 for each MoE layer, 0 for each dense layer (all 0 for a dense model)."""
        if not self.is_moe:
            return (0,) * self.num_layers
        freq = self.moe_layer_freq
        if isinstance(freq, int):
            return tuple(1 if i % freq == 0 else 0 for i in range(self.num_layers))
        if isinstance(freq, str):
            return tuple(parse_layer_pattern(freq, self.num_layers))
        if len(freq) != self.num_layers:
            raise ValueError(f"moe_layer_freq has {len(freq)} entries, num_layers is {self.num_layers}")
        return tuple(1 if x else 0 for x in freq)

    @property
    def num_moe_layers(self) -> int:
        return sum(self.moe_layer_pattern)

    @property
    def gpt_style(self) -> bool:
        """LayerNorm + GeLU: the GPT-2/3 cards, whose Megatron defaults are learned positions and dropout."""
        return self.normalization.lower() != "rmsnorm" and not self.swiglu

    @property
    def learned_positions(self) -> bool:
        """A learned absolute position embedding (Megatron's default `learned_absolute`) instead of RoPE."""
        kind = self.position_embedding_type
        return self.gpt_style if kind is None else kind == "learned_absolute"

    @property
    def rotary(self) -> bool:
        """Rotary position embedding applied to Q and K (RoPE, YaRN, mRoPE)."""
        kind = self.position_embedding_type
        return not self.gpt_style if kind is None else kind in ("rope", "yarn", "mrope")

    @property
    def has_dropout(self) -> bool:
        """Hidden and attention dropout on (Megatron's default 0.1 for GPT-style cards, off for the others)."""
        return self.gpt_style if self.hidden_dropout is None else self.hidden_dropout > 0.0

    @property
    def qkv_bias(self) -> bool:
        return self.add_bias_linear if self.add_qkv_bias is None else self.add_qkv_bias

    @cached_property
    def attention_spans(self) -> tuple[int, ...]:
        """Per layer, the keys a query sees before it: 0 = all (full causal), w = a sliding window of w keys
        (megatron-core 0.16.1 transformer/utils.py `is_layer_window_attention`, layer numbers from 1), -C =
        chunks of C tokens."""
        n = self.num_layers
        out = [0] * n
        if self.window_size is not None and self.window_size[0] >= 0:
            freq = self.window_attn_skip_freq
            for i in range(n):
                windowed = True if freq is None else (bool(freq[i]) if isinstance(freq, list) else (i + 1) % freq != 0)
                if windowed:
                    out[i] = self.window_size[0] + 1
        if self.attention_chunk_size:
            rope = self.rope_layers
            out = [-self.attention_chunk_size if rope[i] else span for i, span in enumerate(out)]
        return tuple(out)

    @cached_property
    def rope_layers(self) -> tuple[bool, ...]:
        """Per layer, whether it applies rotary embeddings (`no_rope_freq`, megatron-core transformer_config.py)."""
        freq, n = self.no_rope_freq, self.num_layers
        if freq is None:
            return (self.rotary,) * n
        skip = [bool(freq[i]) for i in range(n)] if isinstance(freq, list) else [(i + 1) % freq == 0 for i in range(n)]
        return tuple(self.rotary and not x for x in skip)

    @property
    def gated_mult(self) -> int:
        """Number of up-projections in the MLP: 2 for SwiGLU (gate + up), 1 otherwise."""
        return 2 if self.swiglu else 1
