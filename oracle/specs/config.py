"""The search point: `TrialConfig` (knobs a trial may set) and its resolved `EffectiveConfig`."""

from __future__ import annotations

import hashlib
from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, field_validator

from .normalize import none_like
from .training import Fp8Recipe, PipelineSchedule, RecomputeGranularity, RecomputeMethod, TrainingArgs
from .trusted import trusted

# TrialConfig knob -> the Megatron/Primus training argument it overrides.
KNOB_TO_ARG: dict[str, str] = {
    "tp": "tensor_model_parallel_size",
    "pp": "pipeline_model_parallel_size",
    "ep": "expert_model_parallel_size",
    "cp": "context_parallel_size",
    "etp": "expert_tensor_parallel_size",
    "vpp": "virtual_pipeline_model_parallel_size",
    "mbs": "micro_batch_size",
    "gbs": "global_batch_size",
    "pp_schedule": "pp_schedule",
    "recompute_granularity": "recompute_granularity",
    "recompute_method": "recompute_method",
    "recompute_num_layers": "recompute_num_layers",
    "fp8": "fp8",
    "use_distributed_optimizer": "use_distributed_optimizer",
    "use_torch_fsdp2": "use_torch_fsdp2",
    "use_turbo_deepep": "use_turbo_deepep",
    "sync_free_stage": "turbo_sync_free_moe_stage",
    "overlap_grad_reduce": "overlap_grad_reduce",
    "cross_entropy_loss_fusion": "cross_entropy_loss_fusion",
}


class TrialConfig(BaseModel):
    """Knobs one trial may set; an absent knob keeps the workload's own value."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tp: PositiveInt | None = None
    pp: PositiveInt | None = None
    ep: PositiveInt | None = None
    cp: PositiveInt | None = None
    etp: PositiveInt | None = None
    vpp: PositiveInt | None = None
    mbs: PositiveInt | None = None
    gbs: PositiveInt | None = None
    pp_schedule: PipelineSchedule | None = None
    recompute_granularity: RecomputeGranularity | Literal["none"] | None = None
    recompute_method: RecomputeMethod | None = None
    recompute_num_layers: NonNegativeInt | None = None
    fp8: Fp8Recipe | Literal["none"] | None = None
    use_distributed_optimizer: bool | None = None
    use_torch_fsdp2: bool | None = None
    use_turbo_deepep: bool | None = None
    sync_free_stage: int | None = Field(default=None, ge=0)
    overlap_grad_reduce: bool | None = None
    cross_entropy_loss_fusion: bool | None = None

    @field_validator("recompute_granularity", "fp8", mode="before")
    @classmethod
    def _off_spelling(cls, v: object) -> object:
        # "none"/false explicitly switch the feature off, unlike an absent knob (keep the workload's).
        return "none" if v is not None and none_like(v) is None else v

    def overrides(self) -> dict[str, object]:
        """Training-argument overrides this trial sets, in Megatron names."""
        return {KNOB_TO_ARG[knob]: None if value == "none" else value
                for knob, value in self.__dict__.items() if value is not None}


class EffectiveConfig(BaseModel):
    """A complete layout: the workload's arguments with a trial's overrides, canonicalised."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tp: int
    pp: int
    ep: int
    cp: int
    etp: int
    vpp: int
    mbs: int
    gbs: int
    pp_schedule: PipelineSchedule
    recompute_granularity: RecomputeGranularity | None
    recompute_method: RecomputeMethod | None
    recompute_num_layers: int | None
    fp8: Fp8Recipe | None
    use_distributed_optimizer: bool
    use_torch_fsdp2: bool
    use_turbo_deepep: bool
    sync_free_stage: int
    overlap_grad_reduce: bool
    cross_entropy_loss_fusion: bool
    sequence_parallel: bool
    use_flash_attn: bool
    seq_length: int

    @cached_property
    def key(self) -> str:
        """Canonical hash: equal for every spelling of the same layout (field order is fixed)."""
        values = self.__dict__
        blob = repr(tuple([values[name] for name in _EFFECTIVE_FIELDS]))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def as_trial(self) -> TrialConfig:
        """The knobs of this layout as a TrialConfig (a re-runnable overlay)."""
        data = {k: getattr(self, k) for k in TrialConfig.model_fields}
        data["recompute_granularity"] = data["recompute_granularity"] or "none"
        data["fp8"] = data["fp8"] or "none"
        return TrialConfig(**data)


_EFFECTIVE_FIELDS = tuple(EffectiveConfig.model_fields)


def resolve(training: TrainingArgs, trial: TrialConfig, *, is_moe: bool) -> EffectiveConfig:
    """Apply a trial's overrides to the workload's arguments and canonicalise the result.

    Both inputs are validated models and every value below comes from them, so the result is built
    without validating again (this runs for every point of a sweep)."""
    args = {**training.__dict__, **trial.overrides()}
    tp = args["tensor_model_parallel_size"]
    vpp = args["virtual_pipeline_model_parallel_size"] or 1
    schedule = args["pp_schedule"] or "1f1b"
    if schedule == "1f1b" and vpp > 1:
        schedule = "interleaved"
    granularity, method, num_layers = _recompute(training.__dict__, args, trial)
    return trusted(EffectiveConfig, dict(
        tp=tp,
        pp=args["pipeline_model_parallel_size"],
        ep=args["expert_model_parallel_size"] if is_moe else 1,
        cp=args["context_parallel_size"],
        etp=(args["expert_tensor_parallel_size"] or tp) if is_moe else tp,
        vpp=vpp,
        mbs=args["micro_batch_size"],
        gbs=args["global_batch_size"],
        pp_schedule=schedule,
        recompute_granularity=granularity,
        recompute_method=method,
        recompute_num_layers=num_layers,
        fp8=args["fp8"],
        use_distributed_optimizer=args["use_distributed_optimizer"],
        use_torch_fsdp2=args["use_torch_fsdp2"],
        use_turbo_deepep=args["use_turbo_deepep"],
        sync_free_stage=args["turbo_sync_free_moe_stage"],
        overlap_grad_reduce=args["overlap_grad_reduce"],
        cross_entropy_loss_fusion=args["cross_entropy_loss_fusion"],
        sequence_parallel=args["sequence_parallel"] and tp > 1,
        use_flash_attn=args["use_flash_attn"],
        seq_length=args["seq_length"],
    ))


def _full_recompute(granularity: str | None, method: str | None, num_layers: int | None) -> bool:
    return granularity == "full" and not (method == "block" and num_layers == 0)


def _recompute(base: dict, args: dict, trial: TrialConfig) -> tuple:
    """(granularity, method, num_layers), canonical: block recompute of 0 layers is no recompute; a
    trial that switches full recompute on without saying how gets Megatron's defaults (uniform, 1)."""
    method, num_layers = args["recompute_method"], args["recompute_num_layers"]
    if trial.recompute_granularity == "full" and not _full_recompute(
            base["recompute_granularity"], base["recompute_method"], base["recompute_num_layers"]):
        method, num_layers = trial.recompute_method, trial.recompute_num_layers
    granularity = args["recompute_granularity"]
    if not _full_recompute(granularity, method, num_layers):
        return (granularity if granularity != "full" else None), None, None
    return "full", method or "uniform", 1 if num_layers is None else num_layers
