"""The oracle's stated uncertainty: the accuracy report's error on the published runs of a layout's
family (dense or MoE, NVIDIA or AMD), read from `uncertainty.yaml` (written by
`benchmarks/accuracy.py --write-uncertainty`). A projection of T tokens/s/GPU is stated as T ± MAPE·T;
a family without published rows borrows the largest error of any family, and says so."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from ..specs import GPUSpec, ModelArch

UNCERTAINTY_FILE = Path(__file__).with_name("uncertainty.yaml")


@dataclass(frozen=True)
class Uncertainty:
    family: str  # e.g. "moe/amd"
    mape: float  # mean |projected / measured - 1| over the family's published rows
    max_abs: float
    rows: int  # 0: no rows of its own, the worst family's error is borrowed

    @property
    def text(self) -> str:
        own = f"{self.rows} published row{'s' if self.rows != 1 else ''}" if self.rows else "no rows: worst family's"
        return f"±{100 * self.mape:.1f}% (the oracle's MAPE on {self.family}, {own})"


def family_name(model: ModelArch, gpu: GPUSpec) -> str:
    return f"{'moe' if model.is_moe else 'dense'}/{gpu.vendor}"


@cache
def _table() -> dict[str, dict[str, float]]:
    return yaml.safe_load(UNCERTAINTY_FILE.read_text(encoding="utf-8"))["families"]


def uncertainty(model: ModelArch, gpu: GPUSpec) -> Uncertainty:
    """The stated error of a projection of `model` on `gpu`."""
    return _of_family(family_name(model, gpu))


@cache
def _of_family(family: str) -> Uncertainty:
    row = _table().get(family)
    if row is None:
        worst = max(_table().values(), key=lambda r: r["mape"])
        return Uncertainty(family, worst["mape"], worst["max_abs"], 0)
    return Uncertainty(family, row["mape"], row["max_abs"], int(row["rows"]))
