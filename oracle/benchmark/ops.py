"""Operations of the benchmark layers: linear (SP gather, FP8), expert GEMMs, SwiGLU, on one device.

Collectives are local stand-ins (their time is projected analytically, not measured here): an
all-gather copies the rank's tokens `parts` times and a reduce-scatter keeps the rank's rows. As in
Megatron, a sequence-parallel linear saves only its sharded input and gathers it again in backward.
FP8 follows the recipe: E4M3 inputs and weights, E5M2 ("hybrid") or E4M3 output gradients, current
per-tensor scaling with unfused casts, and only the FP8 copy of the input saved for backward.
"""

from __future__ import annotations

import torch

E4M3 = torch.float8_e4m3fn
GRAD_DTYPE = {"hybrid": torch.float8_e5m2, "e4m3": E4M3}

Quantized = tuple[torch.Tensor, torch.Tensor]  # (FP8 tensor, dequantisation scale)


def gather(x: torch.Tensor, parts: int) -> torch.Tensor:
    """All-gather stand-in over the token dimension: the rank's rows `parts` times."""
    return x.repeat(parts, 1) if parts > 1 else x


def scatter(x: torch.Tensor, parts: int) -> torch.Tensor:
    """Reduce-scatter stand-in over the token dimension: this rank's 1/`parts` of the rows."""
    return x[: x.shape[0] // parts] if parts > 1 else x


def _quantize(t: torch.Tensor, dtype: torch.dtype) -> Quantized:
    """FP8 copy of `t` under current per-tensor scaling, with the scale that undoes it."""
    amax = t.abs().amax().float().clamp(min=1e-12)
    scale = torch.finfo(dtype).max / amax
    return (t.float() * scale).to(dtype), scale.reciprocal()


def _fp8_mm(a: Quantized, b: Quantized, out_dtype: torch.dtype) -> torch.Tensor:
    """a @ b on FP8 tensor cores (torch._scaled_mm wants `a` row-major and `b` column-major)."""
    (a8, sa), (b8, sb) = a, b
    return torch._scaled_mm(a8.contiguous(), b8.t().contiguous().t(), sa, sb, out_dtype=out_dtype)


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, parts: int, fp8: str | None) -> torch.Tensor:
        ctx.parts, ctx.fp8 = parts, fp8
        if fp8 is None:
            ctx.save_for_backward(x, weight)
            return gather(x, parts) @ weight.t()
        x8, sx = _quantize(x, E4M3)
        ctx.save_for_backward(x8, sx, weight)
        w8, sw = _quantize(weight, E4M3)
        return _fp8_mm((gather(x8, parts), sx), (w8.t(), sw), x.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None, None]:
        parts, fp8 = ctx.parts, ctx.fp8
        grad = grad.contiguous()
        if fp8 is None:
            x, weight = ctx.saved_tensors
            dx, dw = grad @ weight, grad.t() @ gather(x, parts)
        else:
            x8, sx, weight = ctx.saved_tensors
            g8, sg = _quantize(grad, GRAD_DTYPE[fp8])
            dx = _fp8_mm((g8, sg), _quantize(weight, E4M3), grad.dtype)
            dw = _fp8_mm((g8.t(), sg), (gather(x8, parts), sx), grad.dtype)
        return scatter(dx, parts), dw, None, None


def linear(x: torch.Tensor, weight: torch.Tensor, parts: int = 1, fp8: str | None = None) -> torch.Tensor:
    """x [tokens, in] @ weight [out, in]ᵀ, the tokens first SP-gathered `parts` ways."""
    return _Linear.apply(x, weight, parts, fp8)


def grouped_linear(x: torch.Tensor, weight: torch.Tensor, fp8: str | None = None) -> torch.Tensor:
    """Expert GEMMs at balanced load: x [experts, tokens, in] @ weight [experts, out, in]ᵀ, one batched
    GEMM in BF16 (under FP8 one FP8 GEMM per expert: torch has no public FP8 grouped GEMM)."""
    if fp8 is None:
        return torch.bmm(x, weight.transpose(1, 2))
    return torch.stack([linear(x[e], weight[e], fp8=fp8) for e in range(x.shape[0])])


class _SwiGLU(torch.autograd.Function):
    """silu(gate) · up, saving only its input as Megatron's fused bias-SwiGLU does."""

    @staticmethod
    def forward(ctx, h: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(h)
        g, u = h.chunk(2, -1)
        return torch.nn.functional.silu(g) * u

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (h,) = ctx.saved_tensors
        g, u = h.chunk(2, -1)
        sig = torch.sigmoid(g)
        return torch.cat([grad * u * sig * (1 + g * (1 - sig)), grad * g * sig], -1)


def swiglu(h: torch.Tensor) -> torch.Tensor:
    """SwiGLU over the last dimension (gate half, then up half)."""
    return _SwiGLU.apply(h)
