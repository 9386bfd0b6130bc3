"""`EvalResult`: one record whatever produced it (memory-only, simulate, benchmark, dry)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Source = Literal["memory_only", "simulate", "benchmark", "dry"]


class Violation(BaseModel):
    """One broken legality rule: a stable code and a sentence for people."""

    model_config = ConfigDict(frozen=True)

    code: str
    message: str


class EvalResult(BaseModel):
    """Legality, memory and (unless memory-only) throughput of one layout. All *_gb are GiB."""

    model_config = ConfigDict(extra="forbid")

    legal: bool
    reason: str = ""
    violations: list[Violation] = Field(default_factory=list)
    fits: bool | None = None
    memory_per_gpu_gb: float | None = None
    param_optimizer_gb: float | None = None
    activation_gb: float | None = None
    memory_cap_gb: float | None = None
    iteration_ms: float | None = None
    tokens_per_s_per_gpu: float | None = None
    tflops_per_gpu: float | None = None
    mfu: float | None = None
    # the oracle's stated relative error for this layout's family (accuracy report MAPE; uncertainty.yaml):
    # the projection is tokens_per_s_per_gpu x (1 ± error)
    error: float | None = None
    error_family: str | None = None
    derived_dp: int | None = None
    source: Source
    breakdown: dict[str, float] = Field(default_factory=dict)
    config: dict[str, Any] = Field(default_factory=dict)
    config_key: str = ""
