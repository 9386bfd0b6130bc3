"""GEMM time backends behind one interface, `gemm_ms(m, n, k, dtype, batch=1)`.

The built-in backend is a tile/wave-quantisation roofline: the output is cut into tiles, the tiles run
in waves over the compute units, and a wave costs the tile's FLOPs at a fitted fraction of the dense
peak, with the K loop lengthened by a fixed per-tile prologue/epilogue (`gemm_k_overhead` steps of
K); the result is at least the HBM traffic time, plus a fixed kernel latency. Origami (AMD's
analytic GEMM model) serves the AMD architectures it knows when it is installed.
"""

from __future__ import annotations

from functools import lru_cache
from math import ceil
from typing import Protocol

from ..specs import GPUSpec
from .calibration import Constants, constants

# (tile rows, tile cols, relative efficiency): the backend takes the fastest, like a library heuristic.
TILES = ((256, 128, 1.0), (128, 256, 1.0), (128, 128, 0.9))
_IN_BYTES = {"fp8": 1, "mxfp8": 1, "bf16": 2, "fp16": 2}
FP8_DTYPES = frozenset({"fp8", "mxfp8"})  # per-tensor (or blockwise) scaled FP8, and MXFP8's 1x32 block scaling
# TransformerEngine's GEMM profiling guide (docs/examples/gemm_profiling/gemm_profiling.rst @ 1609c890ee): ms of
# one 5B layer's twelve GEMMs on a B300 with pre-quantized inputs, per GEMM dtype (FP8: current scaling); the
# calibration holds Blackwell's efficiencies at them (calibration/published.py)
TE_B300_LAYER_MS = {"bf16": 13.102, "fp8": 6.812, "mxfp8": 7.161}
# MXFP8's block-scaled GEMMs run at this fraction of per-tensor FP8's (the only GPU it is published for)
MXFP8_OVER_FP8 = TE_B300_LAYER_MS["fp8"] / TE_B300_LAYER_MS["mxfp8"]
_OUT_BYTES = 2
# Compute streams TransformerEngine spreads a grouped GEMM's per-expert cuBLAS GEMMs over
# (TransformerEngine d0067d0 common/util/multi_stream.cpp `get_num_compute_streams`: a constant 4).
TE_GROUPED_STREAMS = 4


class GemmBackend(Protocol):
    def gemm_ms(self, m: int, n: int, k: int, dtype: str, batch: int = 1) -> float: ...


class RooflineGemm:
    """Tile/wave-quantised roofline of one GPU (every catalog GPU)."""

    name = "roofline"

    def __init__(self, gpu: GPUSpec, c: Constants):
        bf16 = gpu.bf16_tflops * 1e12 * c.gemm_eff
        fp8 = gpu.fp8_tflops * 1e12 * c.fp8_gemm_eff if gpu.fp8_tflops else bf16
        self._rate = {"bf16": bf16 / gpu.num_sms, "fp16": bf16 / gpu.num_sms, "fp8": fp8 / gpu.num_sms,
                      "mxfp8": fp8 * MXFP8_OVER_FP8 / gpu.num_sms}
        self._units = gpu.num_sms
        self._hbm = gpu.hbm_tb_s * 1e12 * c.hbm_eff
        self._latency_ms = c.gemm_latency_us * 1e-3
        self._k0 = c.gemm_k_overhead
        self.gemm_ms = lru_cache(maxsize=65536)(self._gemm_ms)

    def _gemm_ms(self, m: int, n: int, k: int, dtype: str, batch: int = 1) -> float:
        if m <= 0 or n <= 0 or k <= 0 or batch <= 0:
            return 0.0
        rate = self._rate[dtype]
        k_eff = k + self._k0
        compute = min(
            ceil(ceil(m / tm) * ceil(n / tn) * batch / self._units) * 2.0 * tm * tn * k_eff / (rate * eff)
            for tm, tn, eff in TILES
        )
        traffic = ((m * k + k * n) * _IN_BYTES[dtype] + m * n * _OUT_BYTES) * batch / self._hbm
        return max(compute, traffic) * 1e3 + self._latency_ms


class ScaledOrigami:
    """Origami's kernel time at the fitted fraction of its speed, plus the kernel latency, cached."""

    name = "origami"

    def __init__(self, inner: GemmBackend, c: Constants):
        self._inner = inner
        self._scale = 1.0 / c.origami_eff
        self._latency_ms = c.gemm_latency_us * 1e-3
        self.gemm_ms = lru_cache(maxsize=65536)(self._gemm_ms)

    def _gemm_ms(self, m: int, n: int, k: int, dtype: str, batch: int = 1) -> float:
        t = self._inner.gemm_ms(m, n, k, dtype, batch)
        return t * self._scale + self._latency_ms if t > 0 else 0.0


def _origami_for(gpu: GPUSpec, c: Constants) -> GemmBackend | None:
    if c.gemm_model != "auto":
        return None
    try:
        from . import gemm_origami
    except ImportError:
        return None
    if gpu.name not in gemm_origami.ORIGAMI_ARCHS or not gemm_origami.origami_available():
        return None
    return ScaledOrigami(gemm_origami.OrigamiGemm(gpu.name), c)


def multi_stream_ms(backend: GemmBackend, m: int, n: int, k: int, dtype: str, gemms: int,
                    streams: int = TE_GROUPED_STREAMS) -> float:
    """ms of `gemms` equal m x n x k GEMMs issued as separate kernels round-robin over `streams` CUDA streams.

    TE's grouped GEMM (GroupedLinear -> `general_grouped_gemm` -> `te_general_grouped_gemm` ->
    `nvte_multi_tensor_gemm`) is not one grouped kernel: without NVTE_USE_CUTLASS_GROUPED_GEMM (default off,
    Hopper only) it takes `multi_stream_cublas_gemm` (TransformerEngine d0067d0
    common/gemm/cublaslt_gemm.cu), one cuBLAS GEMM per expert, GEMM i on compute stream i % 4, all streams
    joined at the end. At most `streams` of them are resident at once, so they run in rounds of `streams`
    kernels sharing the SMs (one batched launch of the backend: their tiles share the waves, their latencies
    overlap) and a last round of the remainder: at a small per-expert M a round's tiles do not fill the GPU,
    which one pooled launch of all the experts' tiles would hide. Not modelled: TE's grouped-tensor paths,
    one grouped kernel (cuBLASLt 13.3+ grouped GEMM, TE 2d80391f7; megatron-core's op-fuser MoE path,
    `use_transformer_engine_op_fuser` with `moe_use_grouped_tensor`, and its CuTe-DSL fused grouped MLP,
    NVTE_CUTEDSL_FUSED_GROUPED_MLP=1, which Megatron-Bridge 0.6.0's Blackwell DeepSeek-V3 and GPT-OSS perf
    recipes set); at those rows' 2-8 local experts of thousands of rows each, the one or two rounds fill the
    SMs as one pooled launch does."""
    full, rest = divmod(gemms, streams)
    t = full * backend.gemm_ms(m, n, k, dtype, streams) if full else 0.0
    return t + (backend.gemm_ms(m, n, k, dtype, rest) if rest else 0.0)


@lru_cache(maxsize=64)
def gemm_backend(gpu: GPUSpec, c: Constants | None = None) -> GemmBackend:
    """Origami for the AMD GPUs it models when installed (unless the constants ask for the roofline),
    else the built-in roofline."""
    c = c or constants(gpu)
    return _origami_for(gpu, c) or RooflineGemm(gpu, c)
