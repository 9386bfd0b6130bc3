"""Model architecture in Megatron-LM argument names (absent = Megatron's default)."""

from __future__ import annotations

import re
from functools import cached_property

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator, model_validator


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
    def _check(self) -> "ModelArch":
        if self.num_query_groups and self.num_attention_heads % self.num_query_groups:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be divisible by "
                f"num_query_groups ({self.num_query_groups})"
            )
        if isinstance(self.moe_layer_freq, (str, list)):
            self.moe_layer_pattern  # noqa: B018 - validates the pattern length now, not at evaluation
        return self

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
    def gated_mult(self) -> int:
        """Number of up-projections in the MLP: 2 for SwiGLU (gate + up), 1 otherwise."""
        return 2 if self.swiglu else 1
