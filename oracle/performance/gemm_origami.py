"""GEMM time from Origami (`rocm-origami`), AMD's analytic GEMM model, for the AMD GPUs it knows.

Kernel time only (no launch overhead); `origami` is loaded lazily so this module imports without it.
"""

from __future__ import annotations

import sys
from functools import cache, lru_cache
from importlib import machinery, util
from itertools import product
from pathlib import Path
from types import ModuleType

# Per catalog GPU, as hipGetDeviceProperties reports it: gfx arch, CUs, LDS bytes per CU, L2 bytes
# per XCD, peak engine clock in kHz (CUs x clock reproduce the catalog's dense BF16 peak).
_HARDWARE = {
    "mi300x": ("gfx942", 304, 64 * 1024, 4 * 1024 * 1024, 2_100_000),
    "mi300a": ("gfx942", 228, 64 * 1024, 4 * 1024 * 1024, 2_100_000),
    "mi325x": ("gfx942", 304, 64 * 1024, 4 * 1024 * 1024, 2_100_000),
    "mi355x": ("gfx950", 256, 160 * 1024, 4 * 1024 * 1024, 2_400_000),
}
ORIGAMI_ARCHS: dict[str, str] = {name: hw[0] for name, hw in _HARDWARE.items()}

# Macro-tile edges and K depths offered to Origami's ranking (a superset of hipBLASLt's common tiles).
_TILE_MN = (16, 32, 48, 64, 96, 128, 160, 192, 224, 256)
_TILE_K = (16, 32, 64, 128, 256, 512)
_DTYPES = ("bf16", "fp16", "fp8")


_EXTENSION = "origami.origami"  # the compiled bindings inside the `origami` package (rocm-origami 0.0.3)


@cache
def _origami() -> ModuleType:
    """Origami's compiled bindings, everything this model calls, loaded without the package's __init__.

    rocm-origami's origami/__init__.py re-exports these bindings and then imports its torch-based Python
    selector (origami/selector.py: `import torch`, seconds) that nothing here uses. The extension is loaded
    from the package's folder under its own name and registered there, so a later `import origami` reuses
    it instead of loading the library twice. ImportError when the package or its library is missing.
    """
    if _EXTENSION in sys.modules:
        return sys.modules[_EXTENSION]
    package = util.find_spec("origami")
    if package is None or not package.submodule_search_locations:
        raise ImportError("rocm-origami is not installed")
    folder = Path(next(iter(package.submodule_search_locations)))
    found = [f for suffix in machinery.EXTENSION_SUFFIXES for f in folder.glob(f"origami{suffix}")]
    spec = util.spec_from_file_location(_EXTENSION, found[0]) if found else None
    if spec is None or spec.loader is None:
        raise ImportError(f"rocm-origami: no compiled origami extension in {folder}")
    module = util.module_from_spec(spec)  # ImportError when its HIP runtime library is missing
    spec.loader.exec_module(module)
    sys.modules[_EXTENSION] = module
    return module


@cache
def origami_available() -> bool:
    """True when Origami's extension loads (it also needs the HIP runtime library)."""
    try:
        _origami()
    except ImportError:
        return False
    return True


@cache
def _hardware(gpu_name: str):
    """Origami's hardware model of one catalog GPU, built without a device present."""
    origami = _origami()

    arch, cus, lds, l2, clock_khz = _HARDWARE[gpu_name]
    return origami.get_hardware_for_arch(
        getattr(origami.architecture_t, arch), cus, lds, l2, clock_khz
    )


def _origami_dtype(arch: str, dtype: str):
    """Origami's input type: FP8 is E4M3 FNUZ on gfx942 and OCP E4M3 on gfx950."""
    origami = _origami()

    t = origami.data_type_t
    if dtype == "fp8":
        return t.Float8_fnuz if arch == "gfx942" else t.Float8
    return {"bf16": t.BFloat16, "fp16": t.Half}[dtype]


@cache
def _configs(gpu_name: str, dtype: str) -> list:
    """Candidate kernel configs: every tile of the grid with every 16+ wide matrix instruction."""
    origami = _origami()

    hw = _hardware(gpu_name)
    configs = []
    for mi in hw.get_valid_matrix_instructions(_origami_dtype(ORIGAMI_ARCHS[gpu_name], dtype)):
        if mi.m < 16:
            continue
        for tm, tn, tk in product(_TILE_MN, _TILE_MN, _TILE_K):
            if tm % mi.m or tn % mi.n or tk % mi.k:
                continue
            c = origami.config_t()
            c.mt = origami.dim3_t(tm, tn, tk)
            c.mi = origami.dim3_t(mi.m, mi.n, mi.k)
            c.occupancy = 1
            configs.append(c)
    return configs


@lru_cache(maxsize=65536)
def _gemm_ms(gpu_name: str, m: int, n: int, k: int, dtype: str, batch: int) -> float:
    """Predicted ms of the best config for `batch` independent m x n x k GEMMs (one batched kernel)."""
    origami = _origami()

    hw = _hardware(gpu_name)
    in_type = _origami_dtype(ORIGAMI_ARCHS[gpu_name], dtype)
    out_type = origami.data_type_t.Half if dtype == "fp16" else origami.data_type_t.BFloat16
    p = origami.problem_t()
    p.size = origami.dim3_t(m, n, k)
    p.batch = batch
    p.a_transpose = origami.transpose_t.T  # "TN": A and B both contiguous along K, as training uses
    p.b_transpose = origami.transpose_t.N
    p.a_dtype = p.b_dtype = p.mi_dtype = in_type
    p.c_dtype = p.d_dtype = out_type
    best = origami.select_config(p, hw, _configs(gpu_name, dtype))  # lowest predicted latency
    return best.latency / (hw.compute_clock_ghz * 1e6)  # cycles at the engine clock -> ms


class OrigamiGemm:
    """GEMM time from AMD's Origami analytic model for one GPU architecture."""

    name = "origami"

    def __init__(self, gpu_name: str):
        if gpu_name not in _HARDWARE:
            raise ValueError(
                f"origami GEMM model: no Origami hardware for GPU {gpu_name!r}; "
                f"known: {', '.join(sorted(_HARDWARE))}"
            )
        if not origami_available():
            raise ValueError(
                "origami GEMM model: rocm-origami is not installed; run scripts/install-origami.sh"
            )
        self.gpu_name = gpu_name
        self.arch = ORIGAMI_ARCHS[gpu_name]

    def gemm_ms(self, m: int, n: int, k: int, dtype: str, batch: int = 1) -> float:
        """Milliseconds for `batch` GEMMs of m x n x k (C[m,n] = A[m,k] B[k,n]); 0 for empty work. Origami
        models no MXFP8 kernel: MXFP8 is timed as its FP8 one."""
        dtype = "fp8" if dtype == "mxfp8" else dtype
        if dtype not in _DTYPES:
            raise ValueError(f"origami GEMM model: dtype {dtype!r} is not one of {', '.join(_DTYPES)}")
        if m <= 0 or n <= 0 or k <= 0 or batch <= 0:
            return 0.0
        return _gemm_ms(self.gpu_name, int(m), int(n), int(k), dtype, int(batch))
