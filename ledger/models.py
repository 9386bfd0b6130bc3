"""Typed rows the ledger hands out: runs, trials, notes, LLM calls, sweep summaries, budget lines."""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict

from paratune.oracle.specs import Budget, EffectiveConfig, EvalResult, TrialConfig

Fidelity = Literal["dry", "memory_only", "simulate", "benchmark"]
FIDELITIES: tuple[Fidelity, ...] = get_args(Fidelity)  # cheapest first; a higher one is a new trial
RunStatus = Literal["open", "finished", "failed"]


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True)


class RunInfo(_Row):
    """One tuning run: the workload and cluster it is for (by content hash), its budget and status."""

    id: int
    created: str
    status: RunStatus
    workload_name: str
    workload_sha256: str
    cluster_name: str
    cluster_sha256: str
    objective: str
    budget: Budget


class Factors(_Row):
    """Per-run corrections fitted to the user's measurements (`planner/run/measurements.py`)."""

    compute: float  # multiplies compute + recompute ms
    other: float  # multiplies communication, pipeline bubble and optimizer ms
    activations: float  # multiplies activation GiB (weights, grads, optimizer, buffers stay as projected)
    measurements: int
    fit: str  # how they were fitted, in words
    residuals: dict[int, float] = {}  # measured trial id -> measured / calibrated tokens/s/GPU - 1


class Calibrated(_Row):
    """A trial's projection with its run's factors applied; the raw result is kept beside it."""

    tokens_per_s_per_gpu: float | None
    iteration_ms: float | None
    memory_per_gpu_gb: float | None
    fits: bool | None
    factors: Factors
    measured: bool = False  # the figures are the cluster's measurement of this layout, not a projection


class Measurement(_Row):
    """What the user's cluster measured for one trial (source: measured)."""

    id: int
    run_id: int
    trial_id: int
    tokens_per_s_per_gpu: float
    peak_memory_gib: float | None
    note: str
    created: str
    source: Literal["measured"] = "measured"


class TrialRecord(_Row):
    """One evaluated layout at one fidelity; `config` is the canonical effective config; `calibrated` is
    its projection under the run's measurement factors, when the run has measurements."""

    id: int
    run_id: int
    config_key: str
    config: dict[str, Any]
    fidelity: Fidelity
    result: EvalResult
    legal: bool
    fits: bool | None
    tokens_per_s_per_gpu: float | None
    memory_per_gpu_gb: float | None
    wall_ms: float
    origin: str
    created: str
    calibrated: Calibrated | None = None

    @property
    def knobs(self) -> TrialConfig:
        """The trial's layout as the knobs that give it back (`--config`, the MCP tools, explain)."""
        return EffectiveConfig(**self.config).as_trial()


class Note(_Row):
    """A scratchpad entry."""

    id: int
    run_id: int
    author: str
    text: str
    created: str


class LLMCall(_Row):
    """Usage of one LLM call (never its key); `outcome` is ok, or the class of its failure (timeout,
    connection, rate_limit, server_error, error:<Exception>)."""

    id: int
    run_id: int
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    created: str
    outcome: str = "ok"


class SweepSummary(_Row):
    """The counts and winners of one exhaustive sweep (not every point)."""

    id: int
    run_id: int
    space_size: int
    legal: int
    fits: int
    scored: int
    top_k: list[dict[str, Any]]
    wall_s: float
    created: str


class BudgetLine(_Row):
    """Calls spent at one fidelity; `limit` and `left` are None when that fidelity is unlimited."""

    spent: int
    limit: int | None
    left: int | None
