"""The Origami GEMM backend against bounds derived here from datasheet peaks and bandwidths."""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("origami") is None:  # found, not imported: origami loads torch (seconds) at collection
    pytest.skip("rocm-origami not installed: run scripts/install-origami.sh", allow_module_level=True)

from paratune.oracle.catalog import gpu_card  # noqa: E402
from paratune.oracle.performance import gemm_origami  # noqa: E402
from paratune.oracle.performance.gemm_origami import ORIGAMI_ARCHS, OrigamiGemm, origami_available  # noqa: E402

# Dense peaks from the datasheets: CUs x peak engine clock x MFMA FLOPs per clock per CU.
# MI300X: 304 CUs x 2.1 GHz x 2048 (BF16) = 1307.4 TFLOP/s, x 4096 (FP8) = 2614.9 TFLOP/s.
# MI355X: 256 CUs x 2.4 GHz x 4096 (BF16) = 2516.6 TFLOP/s.
MI300X_BF16 = 304 * 2.1e9 * 2048
MI300X_FP8 = 304 * 2.1e9 * 4096
MI355X_BF16 = 256 * 2.4e9 * 4096
MI300X_HBM = 5.3e12  # bytes/s
BF16_FLOPS_PER_CLOCK_PER_CU = {"gfx942": 2048, "gfx950": 4096}


def flop_bound_ms(m: int, n: int, k: int, peak: float, batch: int = 1) -> float:
    """The time at the dense peak: no kernel can be faster."""
    return 2.0 * m * n * k * batch / peak * 1e3


@pytest.fixture(scope="module")
def mi300x() -> OrigamiGemm:
    return OrigamiGemm("mi300x")


def test_archs_and_availability():
    assert origami_available()
    assert ORIGAMI_ARCHS["mi300x"] == ORIGAMI_ARCHS["mi325x"] == "gfx942"
    assert ORIGAMI_ARCHS["mi355x"] == "gfx950"


@pytest.mark.parametrize("name", sorted(ORIGAMI_ARCHS))
def test_hardware_matches_catalog(name):
    """Origami's CU count and clock reproduce the catalog GPU's CU count and dense BF16 peak."""
    card = gpu_card(name)
    hw = gemm_origami._hardware(name)
    assert card["num_sms"] == hw.N_CU
    per_cu = BF16_FLOPS_PER_CLOCK_PER_CU[ORIGAMI_ARCHS[name]]
    peak = hw.N_CU * hw.compute_clock_ghz * 1e9 * per_cu
    assert peak == pytest.approx(card["bf16_tflops"] * 1e12, rel=5e-3)


def test_large_bf16_between_peak_and_three_times_peak(mi300x):
    lower = flop_bound_ms(8192, 8192, 8192, MI300X_BF16)  # 0.841 ms
    t = mi300x.gemm_ms(8192, 8192, 8192, "bf16")
    assert lower < t < 3 * lower


def test_fp8_faster_than_bf16_but_not_past_fp8_peak(mi300x):
    bf16 = mi300x.gemm_ms(8192, 8192, 8192, "bf16")
    fp8 = mi300x.gemm_ms(8192, 8192, 8192, "fp8")
    # Compute bound: twice the MFMA rate must take a good part of the time off, not a few percent.
    assert fp8 < 0.75 * bf16
    assert fp8 > flop_bound_ms(8192, 8192, 8192, MI300X_FP8)


def test_mxfp8_is_timed_as_fp8(mi300x):
    """Origami models no MXFP8 kernel: an MXFP8 GEMM (Primus's fp8_recipe mxfp8 on CDNA) takes its FP8 time."""
    assert mi300x.gemm_ms(4096, 14336, 4096, "mxfp8") == mi300x.gemm_ms(4096, 14336, 4096, "fp8")


def test_fp16_matches_bf16_rate(mi300x):
    """FP16 and BF16 MFMAs have the same rate and operand size on CDNA3."""
    fp16 = mi300x.gemm_ms(4096, 14336, 4096, "fp16")
    assert fp16 == pytest.approx(mi300x.gemm_ms(4096, 14336, 4096, "bf16"))


def test_mi355x_faster_than_mi300x(mi300x):
    t300 = mi300x.gemm_ms(8192, 8192, 8192, "bf16")
    t355 = OrigamiGemm("mi355x").gemm_ms(8192, 8192, 8192, "bf16")
    assert t355 > flop_bound_ms(8192, 8192, 8192, MI355X_BF16)
    # 1.92x the dense peak; a large compute-bound GEMM should see most of it.
    assert t300 / t355 > 1.3


def test_skinny_gemm_is_memory_bound(mi300x):
    """128 x 4096 x 4096: the 32 MiB weight must come from HBM at least once."""
    t = mi300x.gemm_ms(128, 4096, 4096, "bf16")
    weight_ms = 2 * 4096 * 4096 / MI300X_HBM * 1e3  # 6.3 us, above the 3.3 us FLOP bound
    assert t > weight_ms
    assert t > flop_bound_ms(128, 4096, 4096, MI300X_BF16)


def test_tiny_gemm_does_not_scale_with_flops(mi300x):
    big = mi300x.gemm_ms(8192, 8192, 8192, "bf16")
    tiny = mi300x.gemm_ms(128, 128, 128, "bf16")
    linear = big * (128 / 8192) ** 3  # what a pure FLOP model would give: 4 ns
    assert tiny > 0
    assert tiny > 20 * linear


def test_batched_gemm_bounds(mi300x):
    """Batched GEMMs: above the FLOP bound of all of them, no slower than running them one by one,
    and when one GEMM leaves most CUs idle (512 x 2048: at most 256 tiles of >= 64 x 64 on 304 CUs),
    batching fills them."""
    for m, n, k in ((4096, 4096, 4096), (512, 2048, 7168)):
        one = mi300x.gemm_ms(m, n, k, "bf16")
        eight = mi300x.gemm_ms(m, n, k, "bf16", batch=8)
        assert eight > flop_bound_ms(m, n, k, MI300X_BF16, batch=8)
        assert eight <= 1.05 * 8 * one
    one = mi300x.gemm_ms(512, 2048, 7168, "bf16")
    assert mi300x.gemm_ms(512, 2048, 7168, "bf16", batch=8) < 0.75 * 8 * one


def test_cached_second_call_is_identical(mi300x):
    first = mi300x.gemm_ms(3072, 5120, 2560, "fp8", batch=3)
    hits = gemm_origami._gemm_ms.cache_info().hits
    assert mi300x.gemm_ms(3072, 5120, 2560, "fp8", batch=3) == first
    assert gemm_origami._gemm_ms.cache_info().hits == hits + 1


def test_empty_work_and_bad_inputs(mi300x):
    assert mi300x.gemm_ms(0, 4096, 4096, "bf16") == 0.0
    assert mi300x.gemm_ms(4096, 4096, 4096, "bf16", batch=0) == 0.0
    with pytest.raises(ValueError, match="dtype"):
        mi300x.gemm_ms(4096, 4096, 4096, "fp32")
    with pytest.raises(ValueError, match="h100-sxm"):
        OrigamiGemm("h100-sxm")
