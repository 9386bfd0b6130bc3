"""GEMM efficiencies a GPU family's kernels reach in a benchmark their library's authors publish, through
paratune's GEMM roofline, so the fit holds them instead of guessing them from rows that cannot see them.

TransformerEngine's GEMM profiling guide (NVIDIA/TransformerEngine docs/examples/gemm_profiling/
gemm_profiling.rst @ 1609c890ee, "Autocast vs Pre-quantized", NVIDIA B300) times the twelve GEMMs of one
layer of a 5B model (hidden 4096, FFN 16384, QKV 12288; M = 31 x 512 = 15,872 tokens; Fprop, Dgrad and Wgrad
of the QKV, attention-out, MLP-up and MLP-down projections, benchmarks/gemm/benchmark_gemm.py
`compute_gemm_shapes`) with every input quantized before the timed loop: 13.102 ms per layer in BF16,
6.812 ms in per-tensor FP8 (current scaling) and 7.161 ms in MXFP8 (`gemm.MXFP8_OVER_FP8` is their ratio).
A dtype's efficiency is the one at which `RooflineGemm` sums those twelve shapes to the published time.
Blackwell's rows are mostly MXFP8 runs: what little BF16 GEMM time they hold (the output head, the router)
the fit cannot tell from attention's and from the overlap cost, and it had put Blackwell Ultra's BF16 at
0.536, 30 % below the kernels' published time.
"""

from __future__ import annotations

from paratune.oracle.catalog import gpu
from paratune.oracle.performance.calibration import Constants, constants_for, with_fitted
from paratune.oracle.performance.gemm import TE_B300_LAYER_MS, RooflineGemm

SOURCE = ("TransformerEngine docs/examples/gemm_profiling/gemm_profiling.rst @ 1609c890ee (B300, pre-quantized "
          "5B layer: BF16 13.102 ms, FP8 current scaling 6.812 ms), through the GEMM roofline "
          "(calibration/published.py)")
_M, _H, _FFN, _QKV = 31 * 512, 4096, 16384, 12288
# (M, K, N) of each timed te.Linear / generic GEMM: Fprop Y = X W, Dgrad dX = dY W^T, Wgrad dW = X^T dY
LAYER_SHAPES = (
    (_M, _H, _QKV), (_M, _H, _H), (_M, _H, _FFN), (_M, _FFN, _H),
    (_M, _QKV, _H), (_M, _H, _H), (_M, _FFN, _H), (_M, _H, _FFN),
    (_H, _M, _QKV), (_H, _M, _H), (_H, _M, _FFN), (_FFN, _M, _H),
)
_BF16 = {"gemm_eff": ("bf16", TE_B300_LAYER_MS["bf16"])}
# family -> (GPU measured, {constant: (GEMM dtype, published ms per layer)}). B200/GB200 take the B300's BF16
# figure alone (the same fifth-generation tensor cores and cuBLAS kernels, no B200 figure published): their rows,
# nearly all MXFP8, see little BF16 GEMM time, and fitted on them BF16 drifts from 0.61 to 0.51 with each refit
# while the overlap cost falls towards 0; their FP8 efficiency the rows do identify, and it is fitted (held at
# the B300's too, the fit puts B200/GB200 attention at 0.25 of the peak).
PUBLISHED = {"blackwell-ultra": ("b300", {**_BF16, "fp8_gemm_eff": ("fp8", TE_B300_LAYER_MS["fp8"])}),
             "blackwell": ("b300", _BF16)}
BORROWED = {"blackwell": "; B200/GB200 take the B300's BF16 figure, none being published for them"}


def source(family: str) -> str:
    """The held-value note of a published efficiency of `family`."""
    return SOURCE + BORROWED.get(family, "")


def layer_ms(gpu_name: str, c: Constants, dtype: str) -> float:
    """ms of the benchmark's twelve GEMMs of one layer in `dtype` through the roofline at constants `c`."""
    roofline = RooflineGemm(gpu(gpu_name), c)
    return sum(roofline.gemm_ms(m, n, k, dtype) for m, k, n in LAYER_SHAPES)


def _solve(gpu_name: str, base: Constants, name: str, dtype: str, target_ms: float) -> float:
    """The value of efficiency `name` at which the layer takes `target_ms` (bisection: time falls as it rises)."""
    lo, hi = 0.05, 1.5
    for _ in range(60):
        mid = (lo + hi) / 2
        if layer_ms(gpu_name, with_fitted(base, {name: mid}), dtype) > target_ms:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def published_effs() -> dict[str, dict[str, float]]:
    """family -> {constant: value} held at the published benchmark (the roofline's other constants as they are)."""
    return {fam: {name: round(_solve(gpu_name, constants_for(fam), name, dtype, ms), 4)
                  for name, (dtype, ms) in effs.items()}
            for fam, (gpu_name, effs) in PUBLISHED.items()}
