"""Torch modules for one transformer layer of each kind the oracle models, at one rank's shapes.

Dense: GQA attention (SDPA, full causal even where the model has a sliding window or chunks: SDPA has
no window, and `analytic.project_layer` compares against full attention too) and a SwiGLU (or GeLU)
MLP; MoE: the same attention, a
router with top-k, expert GEMMs over the rank's experts at balanced load and shared experts; either
with MLA attention (DeepSeek: low-rank Q and KV projections, decoupled rotary). BF16 weights and
activations; tokens flow as [tokens, hidden] rows, sharded over TP outside the TP region under SP.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .ops import gather, grouped_linear, linear, scatter, swiglu
from .shapes import LayerShape

DTYPE = torch.bfloat16
INIT_STD = 0.02
ROPE_BASE = 10000.0
FP8_ROWS = 16  # torch._scaled_mm wants every GEMM dimension a multiple of 16: expert rows are padded to it


def _weight(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.randn(*shape, dtype=DTYPE) * INIT_STD)


def _norm(width: int, rms: bool) -> nn.Module:
    return nn.RMSNorm(width, dtype=DTYPE) if rms else nn.LayerNorm(width, dtype=DTYPE)


class Rotary(nn.Module):
    """Rotary position embedding of width `dim` over `seq` positions, for [batch, seq, heads, dim]."""

    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(self, seq: int, dim: int):
        super().__init__()
        inv = ROPE_BASE ** (-torch.arange(0, dim, 2, dtype=torch.float32) / dim)
        angles = torch.outer(torch.arange(seq, dtype=torch.float32), inv).repeat(1, 2)[:, None, :]
        self.register_buffer("cos", angles.cos().to(DTYPE), persistent=False)
        self.register_buffer("sin", angles.sin().to(DTYPE), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, -1)
        return x * self.cos + torch.cat([-x2, x1], -1) * self.sin


def core_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cp: int) -> torch.Tensor:
    """Causal SDPA of [batch, seq, heads, dim] tensors; under CP a ring-attention stand-in at balanced
    causal load: the local causal block plus one non-causal call over (CP-1)/2 chunks of keys, the two
    outputs summed (same work as the ring's other steps; the log-sum-exp merge is left out)."""
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    gqa = k.shape[1] != q.shape[1]
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    if cp > 1:
        seq = k.shape[2]
        remote = (cp - 1) * seq // 2
        reps = -(-remote // seq)
        k_r, v_r = (t.repeat(1, 1, reps, 1)[:, :, :remote] for t in (k, v))
        out = out + F.scaled_dot_product_attention(q, k_r, v_r, enable_gqa=gqa)
    return out.transpose(1, 2)


class Attention(nn.Module):
    """GQA (or MHA) self-attention: fused QKV projection, rotary, SDPA, output projection."""

    def __init__(self, s: LayerShape):
        super().__init__()
        self.s = s
        self.qkv = _weight((s.heads + 2 * s.groups) * s.qk_head_dim, s.h)
        self.out = _weight(s.h, s.heads * s.v_head_dim)
        self.rope = Rotary(s.seq, s.qk_head_dim) if s.rotary else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.s
        qkv = linear(x, self.qkv, s.sp, s.fp8)
        q, k, v = qkv.split([s.heads * s.qk_head_dim, s.groups * s.qk_head_dim, s.groups * s.qk_head_dim], -1)
        q, k, v = (t.unflatten(0, (s.mbs, s.seq)).unflatten(-1, (-1, s.qk_head_dim)) for t in (q, k, v))
        if self.rope is not None:
            q, k = self.rope(q), self.rope(k)
        o = core_attention(q, k, v, s.cp).reshape(s.tokens, s.heads * s.v_head_dim)
        return scatter(linear(o, self.out, 1, s.fp8), s.sp)


class MLAttention(nn.Module):
    """Multi-latent attention: Q (optionally through a q_lora latent) and a kv_lora latent with a shared
    decoupled rotary key, up-projected per head; SDPA over qk_dim + rope_dim, values of v_dim."""

    def __init__(self, s: LayerShape):
        super().__init__()
        self.s = s
        q_width = s.heads * (s.qk_head_dim + s.qk_pos_dim)
        if s.q_lora_rank:
            self.q_down, self.q_norm = _weight(s.q_lora_rank, s.h), _norm(s.q_lora_rank, s.rms)
            self.q_up = _weight(q_width, s.q_lora_rank)
        else:
            self.q_up = _weight(q_width, s.h)
        self.kv_down, self.kv_norm = _weight(s.kv_lora_rank + s.qk_pos_dim, s.h), _norm(s.kv_lora_rank, s.rms)
        self.kv_up = _weight(s.heads * (s.qk_head_dim + s.v_head_dim), s.kv_lora_rank)
        self.out = _weight(s.h, s.heads * s.v_head_dim)
        self.rope = Rotary(s.seq, s.qk_pos_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.s
        if s.q_lora_rank:
            q = linear(self.q_norm(linear(x, self.q_down, s.sp, s.fp8)), self.q_up, 1, s.fp8)
        else:
            q = linear(x, self.q_up, s.sp, s.fp8)
        q = q.unflatten(0, (s.mbs, s.seq)).unflatten(-1, (s.heads, -1))
        q_nope, q_pe = q.split([s.qk_head_dim, s.qk_pos_dim], -1)
        latent, k_pe = linear(x, self.kv_down, s.sp, s.fp8).split([s.kv_lora_rank, s.qk_pos_dim], -1)
        kv = linear(self.kv_norm(latent), self.kv_up, 1, s.fp8).unflatten(0, (s.mbs, s.seq))
        k_nope, v = kv.unflatten(-1, (s.heads, -1)).split([s.qk_head_dim, s.v_head_dim], -1)
        k_pe = self.rope(k_pe.unflatten(0, (s.mbs, s.seq))[:, :, None, :]).expand(-1, -1, s.heads, -1)
        q = torch.cat([q_nope, self.rope(q_pe)], -1)
        k = torch.cat([k_nope, k_pe], -1)
        o = core_attention(q, k, v, s.cp).reshape(s.tokens, s.heads * s.v_head_dim)
        return scatter(linear(o, self.out, 1, s.fp8), s.sp)


class MLP(nn.Module):
    """TP-sharded MLP of width `ffn` on this rank (a dense layer's MLP, or an MoE layer's shared experts)."""

    def __init__(self, s: LayerShape, ffn: int):
        super().__init__()
        self.s = s
        self.up = _weight(s.gated * ffn, s.h)
        self.down = _weight(s.h, ffn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.s
        h = linear(x, self.up, s.sp, s.fp8)
        h = swiglu(h) if s.gated == 2 else F.gelu(h)
        return scatter(linear(h, self.down, 1, s.fp8), s.sp)


class MoE(nn.Module):
    """Router and top-k on the rank's tokens, permutation, expert GEMMs over the rank's experts at
    balanced load (the EP all-to-all is an identity stand-in: balanced, a rank receives as many routed
    copies as it sends; ETP gathers them), probability-weighted unpermute, shared experts."""

    def __init__(self, s: LayerShape):
        super().__init__()
        self.s = s
        self.router = _weight(s.experts, s.h)
        self.w1 = _weight(s.local_experts, s.gated * s.expert_ffn, s.h)
        self.w2 = _weight(s.local_experts, s.h, s.expert_ffn)
        self.shared = MLP(s, s.ffn) if s.ffn else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.s
        probs = linear(x, self.router).float().softmax(-1)
        top_p, top_i = probs.topk(s.topk, -1)
        order = top_i.flatten().argsort()
        src = order // s.topk  # token of each routed copy, in expert order
        routed = gather(x[src], s.etp)
        rows, local, align = routed.shape[0], s.local_experts, FP8_ROWS if s.fp8 else 1
        per = -(-rows // (local * align)) * align
        h = F.pad(routed, (0, 0, 0, per * local - rows)).view(local, per, s.h)
        h = grouped_linear(h, self.w1, s.fp8)
        h = swiglu(h) if s.gated == 2 else F.gelu(h)
        y = scatter(grouped_linear(h, self.w2, s.fp8).flatten(0, 1)[:rows], s.etp)
        out = torch.zeros_like(x).index_add(0, src, y * top_p.flatten()[order].to(y.dtype)[:, None])
        return out + self.shared(x) if self.shared is not None else out


class Layer(nn.Module):
    """Pre-norm transformer layer on [tokens / SP, hidden] rows: attention, then MLP or MoE."""

    def __init__(self, s: LayerShape):
        super().__init__()
        self.norm1, self.norm2 = _norm(s.h, s.rms), _norm(s.h, s.rms)
        self.attention = MLAttention(s) if s.mla else Attention(s)
        self.mlp = MoE(s) if s.moe else MLP(s, s.ffn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def build_layer(s: LayerShape, device: str) -> tuple[Layer, torch.Tensor]:
    """The layer of shape `s` on `device` and an input that requires grad (as inside a layer stack)."""
    with torch.device(device):
        layer = Layer(s)
        x = torch.randn(s.tokens // s.sp, s.h, dtype=DTYPE, requires_grad=True)
    return layer, x
