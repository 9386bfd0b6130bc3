"""The search point: `TrialConfig` (knobs a trial may set, `knobs.py`) and its resolved `EffectiveConfig`."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..identity_cache import by_identity
from ..pipeline_split import SplitError, parse_layout
from .knobs import KNOB_TO_ARG, KNOBS, NONE_IS_NULL, SPLIT_KNOBS, TrialConfig
from .training import (
    CudaGraphImpl,
    Dispatcher,
    FlexBackend,
    Fp8Recipe,
    PipelineSchedule,
    RecomputeGranularity,
    RecomputeMethod,
    ShardingStrategy,
    StateDtype,
    TrainingArgs,
)
from .trusted import drop_cached, trusted

# Megatron's defaults of the split knobs: a trial that sets one split knob gets these for the others.
_SPLIT_DEFAULTS = {k.name: k.off for k in KNOBS if k.split}


class EffectiveConfig(BaseModel):
    """A complete layout: the workload's arguments with a trial's overrides, canonicalised. Its first fields are
    the knobs, in `TrialConfig`'s order, with their resolved types (tests/test_knob_registry.py checks)."""

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
    moe_use_legacy_grouped_gemm: bool = False  # a default: ledger rows written before it was modelled load
    fp8_recipe: str
    moe_shared_expert_overlap: bool
    cuda_graph_scope: tuple[str, ...] | None
    recompute_layer_ids: tuple[int, ...] | None = None  # Primus: the layers full recompute redoes (TrainingArgs)
    use_transformer_engine_op_fuser: bool = False  # a default: ledger rows written before it was modelled load
    moe_deepep_num_sms: int | None = 20  # a default: ledger rows written before it was modelled load
    moe_hybridep_num_sms: int | None = 16  # the same
    fp8_dot_product_attention: bool = False  # the same

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
    return trusted_config(fields)


def trusted_config(fields: dict[str, Any]) -> EffectiveConfig:
    """The `EffectiveConfig` of resolved `fields` (every field, in field order), unvalidated, its key computed."""
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
