"""The oracle's stated uncertainty: the held-out error (leave one model out) on the published runs of a
layout's family (dense or MoE, NVIDIA or AMD), read from `uncertainty.yaml` (written by
`benchmarks/accuracy.py --write-uncertainty`), widened where it rests on little: x1.5 for a family with
fewer than 5 rows and x1.5 on a GPU without published rows of its own (`calibration.calibrated`), never
below a 5 % floor. A projection of T tokens/s/GPU is stated as T ± error·T; a family without published
rows borrows the largest error of any family, and says so."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from ..specs import GPUSpec, ModelArch
from .calibration import calibrated

UNCERTAINTY_FILE = Path(__file__).with_name("uncertainty.yaml")
FLOOR = 0.05  # no projection is stated as closer than this
FEW_ROWS, FEW_ROWS_WIDEN = 5, 1.5
UNCALIBRATED_WIDEN = 1.5


@dataclass(frozen=True)
class Uncertainty:
    family: str  # e.g. "moe/amd"
    mape: float  # the stated error: held-out MAPE over the family's published rows, widened and floored
    max_abs: float  # the largest held-out |error| of the family
    rows: int  # 0: no rows of its own, the worst family's error is borrowed
    held_out: float = 0.0  # the family's held-out MAPE before widening
    gpu_calibrated: bool = True

    @property
    def text(self) -> str:
        if not self.rows:
            basis = "no rows of its own: the worst family's held-out error"
        else:
            basis = f"held-out {100 * self.held_out:.1f}% over {self.rows} published run{'s' if self.rows != 1 else ''}"
        widened = [w for w, on in (("few rows", 0 < self.rows < FEW_ROWS), ("GPU uncalibrated",
                                                                            not self.gpu_calibrated)) if on]
        extra = f", widened: {', '.join(widened)}" if widened else ""
        return f"±{100 * self.mape:.1f}% ({self.family}, {basis}{extra})"


def family_name(model: ModelArch, gpu: GPUSpec) -> str:
    return f"{'moe' if model.is_moe else 'dense'}/{gpu.vendor}"


@cache
def _table() -> dict[str, dict[str, float]]:
    return yaml.safe_load(UNCERTAINTY_FILE.read_text(encoding="utf-8"))["families"]


def uncertainty(model: ModelArch, gpu: GPUSpec) -> Uncertainty:
    """The stated error of a projection of `model` on `gpu`."""
    return _of_family(family_name(model, gpu), calibrated(gpu))


@cache
def _of_family(family: str, gpu_calibrated: bool) -> Uncertainty:
    row = _table().get(family)
    if row is None:
        row = {**max(_table().values(), key=lambda r: r["mape"]), "rows": 0}
    rows = int(row["rows"])
    error = float(row["mape"]) * (FEW_ROWS_WIDEN if rows < FEW_ROWS else 1.0)
    error *= 1.0 if gpu_calibrated else UNCALIBRATED_WIDEN
    return Uncertainty(family, max(FLOOR, error), row["max_abs"], rows, float(row["mape"]), gpu_calibrated)
