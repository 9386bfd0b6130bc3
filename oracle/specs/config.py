"""The search point: `TrialConfig` (knobs a trial may set) and its resolved `EffectiveConfig`."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from functools import cached_property
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveInt,
    field_validator,
)

from ..identity_cache import by_identity
from ..pipeline_split import SplitError, parse_layout
from .normalize import none_like, parse_modules
from .training import (
    CudaGraphImpl,
    Dispatcher,
    FlexBackend,
    Fp8Recipe,
    PipelineSchedule,
    RecomputeGranularity,
    RecomputeMethod,
    RecomputeModule,
    ShardingStrategy,
    StateDtype,
    TrainingArgs,
)
from .trusted import drop_cached, trusted

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
    "pp_layout": "pipeline_model_parallel_layout",
    "pp_first_layers": "decoder_first_pipeline_num_layers",
    "pp_last_layers": "decoder_last_pipeline_num_layers",
    "pp_embedding_in_split": "account_for_embedding_in_pipeline_split",
    "pp_loss_in_split": "account_for_loss_in_pipeline_split",
    "recompute_modules": "recompute_modules",
    "grad_reduce_in_fp32": "grad_reduce_in_fp32",
    "fp8_param_gather": "fp8_param_gather",
    "use_megatron_fsdp": "use_megatron_fsdp",
    "optimizer_cpu_offload": "optimizer_cpu_offload",
    "moe_token_dispatcher_type": "moe_token_dispatcher_type",
    "moe_flex_dispatcher_backend": "moe_flex_dispatcher_backend",
    "moe_grouped_gemm": "moe_grouped_gemm",
    "tp_comm_overlap": "tp_comm_overlap",
    "overlap_moe_expert_parallel_comm": "overlap_moe_expert_parallel_comm",
    "cuda_graph_impl": "cuda_graph_impl",
}
# Knobs whose "none" spelling means the feature is off (None in EffectiveConfig); cuda_graph_impl keeps
# Megatron's own "none" value.
NONE_IS_NULL = frozenset({"recompute_granularity", "fp8", "pp_layout"})
# The knobs that together are the pipeline split: a trial that sets one of them replaces the whole
# split (the ones it leaves out take Megatron's defaults), since Megatron refuses mixed mechanisms.
SPLIT_KNOBS = ("pp_layout", "pp_first_layers", "pp_last_layers", "pp_embedding_in_split", "pp_loss_in_split")
_SPLIT_DEFAULTS = {"pp_layout": None, "pp_first_layers": None, "pp_last_layers": None,
                   "pp_embedding_in_split": False, "pp_loss_in_split": False}


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
    pp_layout: str | None = None
    pp_first_layers: PositiveInt | None = None
    pp_last_layers: PositiveInt | None = None
    pp_embedding_in_split: bool | None = None
    pp_loss_in_split: bool | None = None
    recompute_modules: tuple[RecomputeModule, ...] | None = None
    grad_reduce_in_fp32: bool | None = None
    fp8_param_gather: bool | None = None
    use_megatron_fsdp: bool | None = None
    optimizer_cpu_offload: bool | None = None
    moe_token_dispatcher_type: Dispatcher | None = None
    moe_flex_dispatcher_backend: FlexBackend | None = None
    moe_grouped_gemm: bool | None = None
    tp_comm_overlap: bool | None = None
    overlap_moe_expert_parallel_comm: bool | None = None
    cuda_graph_impl: CudaGraphImpl | None = None

    @field_validator("recompute_granularity", "fp8", "pp_layout", mode="before")
    @classmethod
    def _off_spelling(cls, v: object) -> object:
        # "none"/false explicitly switch the feature off, unlike an absent knob (keep the workload's).
        return "none" if v is not None and none_like(v) is None else v

    @field_validator("recompute_modules", mode="before")
    @classmethod
    def _modules(cls, v: object) -> object:
        return parse_modules(v)

    def overrides(self) -> dict[str, object]:
        """Training-argument overrides this trial sets, in Megatron names."""
        return {KNOB_TO_ARG[knob]: None if value == "none" and knob in NONE_IS_NULL else value
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
    pp_layout: str | None
    pp_first_layers: int | None
    pp_last_layers: int | None
    pp_embedding_in_split: bool
    pp_loss_in_split: bool
    recompute_modules: tuple[str, ...] | None
    grad_reduce_in_fp32: bool
    fp8_param_gather: bool
    use_megatron_fsdp: bool
    optimizer_cpu_offload: bool
    moe_token_dispatcher_type: Dispatcher
    moe_flex_dispatcher_backend: FlexBackend
    moe_grouped_gemm: bool
    tp_comm_overlap: bool
    overlap_moe_expert_parallel_comm: bool
    cuda_graph_impl: CudaGraphImpl
    # not knobs: the workload's own values
    sequence_parallel: bool
    use_flash_attn: bool
    seq_length: int
    microbatch_group_size_per_vp_stage: int | None
    use_precision_aware_optimizer: bool
    main_grads_dtype: str
    main_params_dtype: str
    exp_avg_dtype: StateDtype
    exp_avg_sq_dtype: StateDtype
    optimizer_offload_fraction: float
    data_parallel_sharding_strategy: ShardingStrategy
    moe_permute_fusion: bool
    fp8_recipe: str
    moe_shared_expert_overlap: bool
    cuda_graph_scope: tuple[str, ...] | None
    recompute_layer_ids: tuple[int, ...] | None = None  # Primus: the layers full recompute redoes (TrainingArgs)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> EffectiveConfig:
        """A copy with `update` applied; the cached key is dropped, since the fields may change."""
        return drop_cached(super().model_copy(update=update, deep=deep))

    @cached_property
    def key(self) -> str:
        """Canonical hash: equal for every spelling of the same layout (field order is fixed)."""
        values = self.__dict__
        return canonical_key(tuple([values[name] for name in _EFFECTIVE_FIELDS]))

    def as_trial(self) -> TrialConfig:
        """The knobs of this layout as a TrialConfig (a re-runnable overlay)."""
        data = {k: getattr(self, k) for k in TrialConfig.model_fields}
        data["recompute_granularity"] = data["recompute_granularity"] or "none"
        data["fp8"] = data["fp8"] or "none"
        data["pp_layout"] = data["pp_layout"] or "none"
        return TrialConfig(**data)


_EFFECTIVE_FIELDS = tuple(EffectiveConfig.model_fields)


def canonical_key(values: tuple) -> str:
    """The key of a layout from its field values in `EffectiveConfig` field order."""
    return hashlib.sha256(repr(values).encode()).hexdigest()[:16]


@by_identity()
def _baseline(training: TrainingArgs) -> dict[str, object]:
    """The workload's own value of every layout field, in `EffectiveConfig` field order (knobs read
    their Megatron argument; the fields that are not knobs keep the workload's value)."""
    args = training.__dict__
    return {name: args[KNOB_TO_ARG.get(name, name)] for name in _EFFECTIVE_FIELDS}


def resolve(training: TrainingArgs, trial: TrialConfig, *, is_moe: bool) -> EffectiveConfig:
    """Apply a trial's overrides to the workload's arguments and canonicalise the result.

    Both inputs are validated models and every value below comes from them, so the result is built
    without validating again, and its key is computed here (this runs for every point of a search)."""
    base = _baseline(training)
    fields: dict[str, Any] = base.copy()  # updated in place below, so the field order (which the key hashes) stays
    knobs = trial.__dict__
    set_knobs = trial.__pydantic_fields_set__
    if not set_knobs.isdisjoint(SPLIT_KNOBS):
        fields.update(_SPLIT_DEFAULTS)
    for knob in set_knobs:  # an unset knob holds its default, None
        value = knobs[knob]
        if value is not None:
            fields[knob] = None if value == "none" and knob in NONE_IS_NULL else value
    if "recompute_modules" in set_knobs and "recompute_granularity" not in set_knobs and knobs["recompute_modules"]:
        fields["recompute_granularity"] = "selective"  # modules only act under selective recompute
    tp = fields["tp"]
    if fields["pp_layout"] is not None and (fields["vpp"] or 1) == 1:
        fields["vpp"] = _layout_vpp(fields["pp_layout"], fields["pp"])
    vpp = fields["vpp"] = fields["vpp"] or 1
    schedule = fields["pp_schedule"] or "1f1b"
    fields["pp_schedule"] = "interleaved" if schedule == "1f1b" and vpp > 1 else schedule
    if fields["sync_free_stage"] >= 2:
        fields["use_turbo_deepep"] = True  # Primus sets it for stages 2-3 (rocm_arg_validation.py)
    if fields["use_turbo_deepep"]:
        fields["moe_token_dispatcher_type"] = "flex"  # Primus-Turbo DeepEP runs as the flex dispatcher
    if is_moe:
        fields["etp"] = fields["etp"] or tp
    else:
        fields["ep"], fields["etp"] = 1, tp
    _recompute(base, fields, knobs)
    if fields["recompute_granularity"] != "selective":
        fields["recompute_modules"] = None
    elif fields["recompute_modules"] is None:
        fields["recompute_modules"] = ("core_attn",)  # Megatron's default (transformer_config.py)
    fields["sequence_parallel"] = sequence_parallel_in_effect(fields["sequence_parallel"], tp)
    key = canonical_key(tuple(fields.values()))
    cfg = trusted(EffectiveConfig, fields)
    fields["key"] = key  # `fields` is now cfg.__dict__: this fills the cached_property as a first read would
    return cfg


def sequence_parallel_in_effect(requested: bool, tp: int) -> bool:
    """Megatron runs sequence parallelism only inside a TP group: asked for with TP 1, it is off."""
    return requested and tp > 1


def _layout_vpp(layout: str, pp: int) -> int:
    """The VPP a layout string implies (its stages / PP; 1 when the string cannot be read)."""
    try:
        stages = len(parse_layout(layout))
    except SplitError:
        return 1
    return stages // pp if stages % pp == 0 and stages >= pp else 1


def _full_recompute(granularity: str | None, method: str | None, num_layers: int | None) -> bool:
    return granularity == "full" and not (method == "block" and num_layers == 0)


def _recompute(base: dict, fields: dict, knobs: dict) -> None:
    """Canonicalise (granularity, method, num_layers) in `fields`: block recompute of 0 layers is no
    recompute; a trial that switches full recompute on without saying how gets Megatron's defaults
    (uniform, 1)."""
    method, num_layers = fields["recompute_method"], fields["recompute_num_layers"]
    if knobs["recompute_granularity"] == "full" and not _full_recompute(
            base["recompute_granularity"], base["recompute_method"], base["recompute_num_layers"]):
        method, num_layers = knobs["recompute_method"], knobs["recompute_num_layers"]
    granularity = fields["recompute_granularity"]
    canonical: tuple[str | None, str | None, int | None]
    if not _full_recompute(granularity, method, num_layers):
        canonical = (granularity if granularity != "full" else None), None, None
    else:
        canonical = "full", method or "uniform", 1 if num_layers is None else num_layers
        if fields["recompute_layer_ids"]:  # Primus: the listed layers decide; recompute_method must be null
            canonical = "full", None, None
    fields["recompute_granularity"], fields["recompute_method"], fields["recompute_num_layers"] = canonical
