"""The knob registry: `TrialConfig`, whose every field is one search knob, declared once.

A field's annotation is the knob's type and values (a `Literal` lists them; an integer's bounds are its
constraint; where a model and cluster narrow them, `axis` says `oracle.legality.legal_axes` gives them);
its `Knob` says what it is (`doc`, the one line the MCP `config` schema and docs/knobs.md show), the
`TrainingArgs` field it overrides (`dest`, Megatron-LM's argument dest), its argument in each stack that
has it (`ARG_FILES` names the file; None: the stack lacks it), the GPU vendors it runs on, the legality
rules it takes part in (`rules`: `oracle.legality` / `oracle.pipeline_split` violation codes), and where
its effect on time and on memory comes from. Everything else that lists knobs is derived from these
fields once, at import (`KNOBS`, `KNOB_SPECS`, `KNOB_TO_ARG`, `NONE_IS_NULL`, `SPLIT_KNOBS`, the stack
rules of `oracle.constraints`, the launch writers' arguments), or is checked against them by
tests/test_knob_registry.py (`EffectiveConfig`'s knob fields, `LegalAxes`, docs/knobs.md, the published
MCP schema). Adding a knob is one field here plus its physics.

A knob (or value) the cluster's stack lacks is outside the search and a `stack_knob` / `stack_value`
violation when a trial sets it. Revisions: megatron-core 0.16.1 (`pipeline_split.MEGATRON_CORE_VERSION`),
Primus fd1eeab, Megatron-Bridge 067f987 (the vocabulary files in `oracle/inputs/vocabulary/` list every
name).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    NonNegativeInt,
    PositiveInt,
    field_validator,
)
from pydantic_core import core_schema

from ..stacks import ALL, STACKS, Stack
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
)

BOTH_VENDORS = frozenset({"nvidia", "amd"})
# Where each stack's argument names come from (the `megatron_lm` / `primus` / `bridge` of a Knob).
ARG_FILES: dict[Stack, str] = {
    "megatron-lm": "megatron/training/arguments.py (pretrain_gpt.py flags, core_v0.16.1)",
    "primus": "primus/configs/modules/megatron/*.yaml (keys, fd1eeab)",
    # the comm_overlap / mixed_precision sections where Bridge's runtime_config_update rewrites the
    # model/ddp field from them
    "megatron-bridge": "src/megatron/bridge/training/config.py (ConfigContainer paths, 067f987)",
}


def _off_spelling(v: object) -> object:
    """"none"/false explicitly switch the feature off, unlike an absent knob (which keeps the workload's)."""
    return "none" if v is not None and none_like(v) is None else v


@dataclass(frozen=True, eq=False)
class Knob:
    """One search knob's declaration beside its type (a `TrialConfig` field's annotation metadata)."""

    doc: str  # one line: what the knob sets
    dest: str  # the TrainingArgs field (Megatron-LM argument dest) it overrides
    megatron_lm: str | None  # pretrain_gpt.py flag (None: Megatron-LM lacks it)
    primus: str | None  # Primus YAML key
    bridge: str | None  # Megatron-Bridge ConfigContainer path
    time: str  # the effect on time, with its source
    memory: str  # the effect on memory, with its source
    rules: tuple[str, ...] = ()  # legality codes this knob takes part in
    off: object = None  # the value that leaves the feature off (any stack accepts it)
    vendors: frozenset[str] = BOTH_VENDORS
    # values only some stacks have (e.g. the zero-bubble schedules are Primus patches)
    value_stacks: Mapping[object, frozenset[str]] = field(default_factory=dict)
    axis: bool = False  # `legal_axes` gives its values on a model and cluster (a LegalAxes field)
    moe: bool = False  # only a MoE model has it (a dense model's launch leaves it out)
    none_is_null: bool = False  # "none" (or false) means the feature off: None in EffectiveConfig
    split: bool = False  # one of the knobs that together are the pipeline split
    inverted: frozenset[str] = frozenset()  # stacks whose argument is this knob's negation
    name: str = ""  # the TrialConfig field (filled by `knobs_of`)

    def arg(self, stack: Stack) -> str | None:
        """This knob's argument name in `stack`, None where the stack lacks it."""
        return {"megatron-lm": self.megatron_lm, "primus": self.primus, "megatron-bridge": self.bridge}[stack]

    def stacks(self) -> frozenset[str]:
        return frozenset(s for s in STACKS if self.arg(s) is not None)

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        """The field's validation: its type's, reading "none"/false as the explicit off where that is null."""
        schema = handler(source)
        return core_schema.no_info_before_validator_function(_off_spelling, schema) if self.none_is_null else schema

    def __get_pydantic_json_schema__(self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler) -> dict:
        """The field's JSON Schema with `doc` as its description (the MCP knob text)."""
        out = handler(schema)
        out["description"] = self.doc
        return out


_SPLIT_TIME = "per-stage layers set each stage's compute (oracle.pipeline_split, megatron-core 0.16.1)"
_SPLIT_MEM = "per-stage layers set each stage's weights and stored activations (oracle.memory.inflight)"
# Megatron's layer split (oracle.pipeline_split) and the check that it builds every decoder layer
_SPLIT_RULES = ("split_conflict", "split_first_last", "split_middle", "split_pp", "split_vpp", "split_decoders",
                "layout_size", "layout_syntax", "layout_pp", "layout_vpp", "layout_edges", "layout_decoders",
                "layout_mtp", "layout_mtp_order", "layout_mtp_stage")
_FIRST_LAST_RULES = ("split_conflict", "split_first_last", "split_middle", "split_vpp", "split_decoders")
_ACCOUNTING_RULES = ("split_conflict", "split_pp", "split_vpp", "split_decoders")
_TP_DIMS = ("tp_num_attention_heads", "tp_num_query_groups", "tp_hidden_size", "tp_ffn_hidden_size")
_ZB = ("zb_needs_pp", "zbv_needs_pp", "zb_recompute", "zbv_recompute", "zb_vpp", "zbv_vpp")
_EP_OVERLAP = ("ep_overlap_ep", "ep_overlap_dispatcher", "ep_overlap_vpp", "ep_overlap_schedule",
               "ep_overlap_recompute", "ep_overlap_mtp", "shared_overlap_ep_overlap")
_NVIDIA = frozenset({"nvidia"})
_AMD = frozenset({"amd"})


class TrialConfig(BaseModel):
    """Knobs one trial may set; an absent knob keeps the workload's own value. Each field is the knob's one
    declaration (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tp: Annotated[PositiveInt | None, Knob(
        "tensor-parallel size", "tensor_model_parallel_size",
        "--tensor-model-parallel-size", "tensor_model_parallel_size", "model.tensor_model_parallel_size",
        "GEMMs sharded over TP, TP/SP collectives per region (oracle.performance.layers)",
        "weights / TP, activations / TP under SP (Korthikanti 2022 §4)",
        rules=("world_attention", *_TP_DIMS, "tp_node", "ep_tp_needs_sp", "tp_overlap_sp", "gbs_mbs_dp"),
        off=1, axis=True)] = None
    pp: Annotated[PositiveInt | None, Knob(
        "pipeline-parallel size", "pipeline_model_parallel_size",
        "--pipeline-model-parallel-size", "pipeline_model_parallel_size", "model.pipeline_model_parallel_size",
        "pipeline schedule with its bubble (oracle.performance.schedule)",
        "layers per stage; in-flight micro-batches per schedule (oracle.memory.inflight)",
        rules=("world_attention", "world_expert", *_SPLIT_RULES, "vpp_needs_pp", "gbs_mbs_dp",
               "interleaved_microbatches", "zb_needs_pp", "zbv_needs_pp", "ep_overlap_vpp", "fsdp2_pp",
               "recompute_num_layers"),
        off=1, axis=True)] = None
    ep: Annotated[PositiveInt | None, Knob(
        "expert-parallel size (MoE)", "expert_model_parallel_size",
        "--expert-model-parallel-size", "expert_model_parallel_size", "model.expert_model_parallel_size",
        "token dispatch/combine over EP (oracle.performance.comm)", "experts per rank / EP",
        rules=("world_expert", "ep_experts", "ep_tp_needs_sp", "ep_overlap_ep", "fsdp2_ep", "flex_tp_ep",
               "deepep_moe", "sync_free_moe", "turbo_deepep_ranks"),
        off=1, axis=True, moe=True)] = None
    cp: Annotated[PositiveInt | None, Knob(
        "context-parallel size", "context_parallel_size",
        "--context-parallel-size", "context_parallel_size", "model.context_parallel_size",
        "attention K/V ring over CP (oracle.performance.layers._cp_ring)", "tokens per rank / CP",
        rules=("world_attention", "cp_seq", "gbs_mbs_dp"), off=1, axis=True)] = None
    etp: Annotated[PositiveInt | None, Knob(
        "expert tensor-parallel size (MoE; default TP)", "expert_tensor_parallel_size",
        "--expert-tensor-parallel-size", "expert_tensor_parallel_size", "model.expert_tensor_parallel_size",
        "expert GEMMs sharded over ETP with a reduce-scatter (oracle.performance.moe_layer)", "expert weights / ETP",
        rules=("world_expert", "etp_moe_ffn", "etp_node", "etp_moe_bias", "flex_tp_ep", "sync_free_etp",
               "turbo_deepep_ranks"),
        axis=True, moe=True)] = None
    vpp: Annotated[PositiveInt | None, Knob(
        "virtual pipeline stages per rank", "virtual_pipeline_model_parallel_size",
        "--num-virtual-stages-per-pipeline-rank", "num_virtual_stages_per_pipeline_rank",
        "model.virtual_pipeline_model_parallel_size", "bubble / VPP, VPP x the P2P (Narayanan 2021 §2.2)",
        "warm-up chunk-forwards (PP-r-1)*2 + (VPP-1)*N (megatron-core schedules.py)",
        rules=("split_vpp", "layout_vpp", "vpp_needs_pp", "interleaved_vpp", "zb_vpp", "zbv_vpp", "ep_overlap_vpp",
               "recompute_num_layers"),
        off=1, axis=True)] = None
    mbs: Annotated[PositiveInt | None, Knob(
        "micro-batch size", "micro_batch_size", "--micro-batch-size", "micro_batch_size", "train.micro_batch_size",
        "GEMM shapes and micro-batch count", "activations x MBS",
        rules=("gbs_mbs_dp", "interleaved_microbatches"), axis=True)] = None
    gbs: Annotated[PositiveInt | None, Knob(
        "global batch size (sequences per iteration)", "global_batch_size",
        "--global-batch-size", "global_batch_size", "train.global_batch_size",
        "micro-batches per iteration", "none beyond the micro-batch count",
        rules=("gbs_mbs_dp", "interleaved_microbatches"))] = None
    # no argument of its own: VPP sets Megatron's schedule; Primus's zero-bubble patches set ZB-H1 / ZB-V
    # (patch_zero_bubble, zero_bubble_v_schedule: planner.launch.settings.primus_extras)
    pp_schedule: Annotated[PipelineSchedule | None, Knob(
        "pipeline schedule (zb, zbv: Primus only)", "pp_schedule", None, None, None,
        "1F1B / interleaved (Megatron), ZB-H1 and ZB-V (Qi 2023; Primus's zero-bubble patches)",
        "in-flight micro-batches per schedule (oracle.memory.inflight)",
        rules=("interleaved_vpp", "interleaved_microbatches", *_ZB, "ep_overlap_schedule"), off="1f1b",
        value_stacks={"1f1b": ALL, "interleaved": ALL, "zb": frozenset({"primus"}), "zbv": frozenset({"primus"})},
        axis=True)] = None
    recompute_granularity: Annotated[RecomputeGranularity | Literal["none"] | None, Knob(
        "activation recompute", "recompute_granularity",
        "--recompute-granularity", "recompute_granularity", "model.recompute_granularity",
        "re-runs the recomputed forward in the backward (oracle.performance.pipeline)",
        "drops the recomputed activations (megatron-core recompute; oracle.memory.activations)",
        rules=("zb_recompute", "zbv_recompute", "cuda_graph_recompute", "ep_overlap_recompute",
               "recompute_fp8_delayed", "recompute_layer_ids_full", "recompute_num_layers"),
        axis=True, none_is_null=True)] = None
    recompute_method: Annotated[RecomputeMethod | None, Knob(
        "which layers full recompute re-runs", "recompute_method",
        "--recompute-method", "recompute_method", "model.recompute_method",
        "which layers full recompute re-runs", "which layers keep only their input")] = None
    recompute_num_layers: Annotated[NonNegativeInt | None, Knob(
        "layers per full-recompute group (uniform) or per chunk (block)", "recompute_num_layers",
        "--recompute-num-layers", "recompute_num_layers", "model.recompute_num_layers",
        "layers per recompute group (uniform) or per chunk (block)", "stored layer inputs per group",
        rules=("recompute_num_layers",))] = None
    fp8: Annotated[Fp8Recipe | Literal["none"] | None, Knob(
        "FP8 GEMMs (format)", "fp8", "--fp8-format", "fp8", "mixed_precision.fp8",
        "FP8 GEMMs at the FP8 peak plus casts (oracle.performance.layers._linear)",
        "FP8 weight cache and FP8 GEMM inputs (Transformer Engine)",
        rules=("fp8_gpu", "tp_overlap_fp8_rocm", "recompute_fp8_delayed", "legacy_gg_moe_act_fp8"), axis=True,
        none_is_null=True)] = None
    use_distributed_optimizer: Annotated[bool | None, Knob(
        "distributed optimizer (ZeRO-1)", "use_distributed_optimizer",
        "--use-distributed-optimizer", "use_distributed_optimizer", "ddp.use_distributed_optimizer",
        "reduce-scatter grads, all-gather weights over DP (ZeRO-1)",
        "optimizer state / DP (megatron-core distrib_optimizer.py)",
        rules=("fsdp_distopt", "precision_aware_distopt", "offload_distopt"), off=False, axis=True)] = None
    use_torch_fsdp2: Annotated[bool | None, Knob(
        "torch FSDP2", "use_torch_fsdp2", "--use-torch-fsdp2", "use_torch_fsdp2", "dist.use_torch_fsdp2",
        "per-layer weight all-gather and grad reduce-scatter over DP·CP (torch FSDP2)",
        "weights, grads and optimizer state / DP·CP",
        rules=("fsdp_distopt", "fsdp2_pp", "fsdp2_ep", "fsdp_both"), off=False, axis=True)] = None
    use_turbo_deepep: Annotated[bool | None, Knob(
        "Primus-Turbo DeepEP dispatch (MoE, ROCm)", "use_turbo_deepep", None, "use_turbo_deepep", None,
        "Primus-Turbo DeepEP dispatch, which sets the flex dispatcher (patches/turbo/moe_dispatcher_patches.py; "
        "costed by oracle.performance.moe_layer.dispatch_combine)",
        "DeepEP's buffers (oracle.memory.overheads.deepep_buffers)",
        rules=("deepep_moe", "turbo_deepep_ranks", "flex_rocm"), off=False, vendors=_AMD, axis=True,
        moe=True)] = None
    sync_free_stage: Annotated[NonNegativeInt | None, Knob(
        "Primus-Turbo sync-free MoE stage (0 off; MoE, ROCm)", "turbo_sync_free_moe_stage",
        None, "turbo_sync_free_moe_stage", None,
        "stages 1-3 remove the dispatcher's device-to-host syncs (rocm_arg_validation.py "
        "_get_sync_free_moe_options; oracle.performance.moe_layer.host_syncs); stages 2-3 also run Turbo DeepEP",
        "not modelled (stage 3 sizes permute buffers for the worst case, primus_turbo moe_permute.py)",
        rules=("sync_free_range", "sync_free_moe", "sync_free_etp", "legacy_gg_turbo"), off=0, vendors=_AMD, axis=True,
        moe=True)] = None
    overlap_grad_reduce: Annotated[bool | None, Knob(
        "overlap the DP gradient reduce with the backward", "overlap_grad_reduce",
        "--overlap-grad-reduce", "overlap_grad_reduce", "comm_overlap.overlap_grad_reduce",
        "grad buckets reduced during the last backward (megatron-core DDP; oracle.performance.pipeline)",
        "none modelled", off=False)] = None
    cross_entropy_loss_fusion: Annotated[bool | None, Knob(
        "fused cross-entropy loss", "cross_entropy_loss_fusion",
        "--cross-entropy-loss-fusion", "cross_entropy_loss_fusion", "model.cross_entropy_loss_fusion",
        "fused loss traffic (oracle.performance.constants.LOSS_BYTES)", "no fp32 logits copy", off=False)] = None
    pp_layout: Annotated[str | None, Knob(
        "pipeline layout string (E, t, m, L per stage)", "pipeline_model_parallel_layout",
        "--pipeline-model-parallel-layout", "pipeline_model_parallel_layout",
        "model.pipeline_model_parallel_layout", _SPLIT_TIME, _SPLIT_MEM,
        rules=_SPLIT_RULES, none_is_null=True, split=True)] = None
    pp_first_layers: Annotated[PositiveInt | None, Knob(
        "decoder layers on the first pipeline stage", "decoder_first_pipeline_num_layers",
        "--decoder-first-pipeline-num-layers", "decoder_first_pipeline_num_layers",
        "model.num_layers_in_first_pipeline_stage", _SPLIT_TIME, _SPLIT_MEM,
        rules=_FIRST_LAST_RULES, split=True)] = None
    pp_last_layers: Annotated[PositiveInt | None, Knob(
        "decoder layers on the last pipeline stage", "decoder_last_pipeline_num_layers",
        "--decoder-last-pipeline-num-layers", "decoder_last_pipeline_num_layers",
        "model.num_layers_in_last_pipeline_stage", _SPLIT_TIME, _SPLIT_MEM,
        rules=_FIRST_LAST_RULES, split=True)] = None
    pp_embedding_in_split: Annotated[bool | None, Knob(
        "count the embedding as a layer in the split", "account_for_embedding_in_pipeline_split",
        "--account-for-embedding-in-pipeline-split", "account_for_embedding_in_pipeline_split",
        "model.account_for_embedding_in_pipeline_split", _SPLIT_TIME, _SPLIT_MEM,
        rules=_ACCOUNTING_RULES, off=False, split=True)] = None
    pp_loss_in_split: Annotated[bool | None, Knob(
        "count the loss as a layer in the split", "account_for_loss_in_pipeline_split",
        "--account-for-loss-in-pipeline-split", "account_for_loss_in_pipeline_split",
        "model.account_for_loss_in_pipeline_split", _SPLIT_TIME, _SPLIT_MEM,
        rules=_ACCOUNTING_RULES, off=False, split=True)] = None
    recompute_modules: Annotated[tuple[RecomputeModule, ...] | None, Knob(
        "modules selective recompute re-runs", "recompute_modules",
        "--recompute-modules", "recompute_modules", "model.recompute_modules",
        "each module's forward re-run (oracle.performance.work.RECOMPUTE_MODULES)",
        "each module's discarded tensors (megatron-core transformer_config.py)",
        rules=("ep_overlap_recompute", "recompute_moe_act", "recompute_fp8_delayed", "recompute_mla_up_proj",
               "legacy_gg_moe_act_fp8", "shared_overlap_recompute"))] = None
    grad_reduce_in_fp32: Annotated[bool | None, Knob(
        "reduce gradients in FP32 (else BF16)", "grad_reduce_in_fp32",
        "--grad-reduce-in-bf16", "grad_reduce_in_bf16", "mixed_precision.grad_reduce_in_fp32",
        "gradient bytes reduced over DP (4 or 2)", "gradient buffer bytes (4 or 2)",
        inverted=frozenset({"megatron-lm", "primus"}))] = None
    fp8_param_gather: Annotated[bool | None, Knob(
        "keep and gather weights in FP8", "fp8_param_gather",
        "--fp8-param-gather", "fp8_param_gather", "mixed_precision.fp8_param_gather",
        "not modelled: the distributed optimizer's weight all-gather is costed in BF16 "
        "(oracle.performance.pipeline.dp_traffic)",
        "no BF16 weight copy beside the FP8 one (oracle.memory.state_bytes)", off=False)] = None
    use_megatron_fsdp: Annotated[bool | None, Knob(
        "Megatron-FSDP", "use_megatron_fsdp", "--use-megatron-fsdp", "use_megatron_fsdp", "ddp.use_megatron_fsdp",
        "per its data_parallel_sharding_strategy (megatron-core distributed_data_parallel_config.py)",
        "per its sharding strategy", rules=("fsdp_both",), off=False)] = None
    optimizer_cpu_offload: Annotated[bool | None, Knob(
        "optimizer state on the host", "optimizer_cpu_offload",
        "--optimizer-cpu-offload", "optimizer_cpu_offload", "optimizer.optimizer_cpu_offload",
        "not modelled (the optimizer step on the host)",
        "optimizer_offload_fraction of the optimizer state moved to the host (HybridDeviceOptimizer; "
        "oracle.memory.state_bytes)", rules=("offload_distopt",), off=False)] = None
    moe_token_dispatcher_type: Annotated[Dispatcher | None, Knob(
        "MoE token dispatcher", "moe_token_dispatcher_type",
        "--moe-token-dispatcher-type", "moe_token_dispatcher_type", "model.moe_token_dispatcher_type",
        "allgather / NCCL all-to-all / flex (DeepEP, HybridEP) dispatch (oracle.performance.comm)",
        "NCCL all-to-all / allgather buffers and DeepEP's NVLink/RDMA buffers (oracle.memory.overheads)",
        rules=("ep_overlap_dispatcher", "flex_tp_ep", "flex_rocm", "shared_overlap_dispatcher"),
        off="allgather", axis=True, moe=True)] = None
    moe_flex_dispatcher_backend: Annotated[FlexBackend | None, Knob(
        "flex dispatcher backend (MoE, NVIDIA)", "moe_flex_dispatcher_backend",
        "--moe-flex-dispatcher-backend", None, "model.moe_flex_dispatcher_backend",
        "DeepEP's / HybridEP's dispatch at their published rates (oracle.performance.moe_layer, ep_bandwidth)",
        "DeepEP's buffers (oracle.memory.overheads.deepep_buffers); HybridEP's worst-case buffers are not "
        "modelled", off="deepep", vendors=_NVIDIA, axis=True, moe=True)] = None
    moe_grouped_gemm: Annotated[bool | None, Knob(
        "grouped expert GEMMs (MoE)", "moe_grouped_gemm", "--moe-grouped-gemm", "moe_grouped_gemm",
        "model.moe_grouped_gemm",
        "one grouped launch for the local experts' GEMMs, or one GEMM per expert (SequentialMLP) "
        "(oracle.performance.moe_layer.expert_mlps, oracle.performance.host_issue)", "none modelled",
        rules=("recompute_moe_act", "legacy_gg_bias", "legacy_gg_moe_act_fp8", "legacy_gg_turbo"), off=False)] = None
    tp_comm_overlap: Annotated[bool | None, Knob(
        "overlap TP communication with GEMMs", "tp_comm_overlap",
        "--tp-comm-overlap", "tp_comm_overlap", "comm_overlap.tp_comm_overlap",
        "TP all-gather / reduce-scatter pipelined with the GEMMs they feed (Transformer Engine userbuffers; "
        "on ROCm Primus's re-implementation, te_patches/tp_overlap_patches.py)",
        "userbuffers workspace not modelled", rules=("tp_overlap_sp", "tp_overlap_fp8_rocm"), off=False,
        axis=True)] = None
    overlap_moe_expert_parallel_comm: Annotated[bool | None, Knob(
        "overlap EP all-to-all with another micro-batch (MoE)", "overlap_moe_expert_parallel_comm",
        "--overlap-moe-expert-parallel-comm", "overlap_moe_expert_parallel_comm",
        "comm_overlap.overlap_moe_expert_parallel_comm",
        "EP dispatch/combine of one micro-batch hidden behind another's compute (megatron-core combined_1f1b.py)",
        "one more warm-up micro-batch under interleaving (megatron-core schedules.py)",
        rules=_EP_OVERLAP, off=False, axis=True, moe=True)] = None
    # on ROCm Primus documents graphs only for MegaMoE (mega-moe.md)
    cuda_graph_impl: Annotated[CudaGraphImpl | None, Knob(
        "CUDA graphs (NVIDIA)", "cuda_graph_impl", "--cuda-graph-impl", "cuda_graph_impl", "model.cuda_graph_impl",
        "a captured scope replays with one launch, so the host issue time of its kernels goes "
        "(oracle.performance.host_issue), and a graphed MoE preprocess has no host syncs "
        "(oracle.performance.moe_layer.host_syncs)",
        "static inputs and masks per stored layer sample (oracle.memory.overheads.cuda_graph_buffers; "
        "megatron-core cuda_graphs.py)", rules=("cuda_graph_recompute",), off="none", vendors=_NVIDIA)] = None

    @field_validator("recompute_modules", mode="before")
    @classmethod
    def _modules(cls, v: object) -> object:
        return parse_modules(v)

    def overrides(self) -> dict[str, object]:
        """Training-argument overrides this trial sets, in Megatron names."""
        specs = knob_specs(type(self))
        return {specs[knob].dest: None if value == "none" and specs[knob].none_is_null else value
                for knob, value in self.__dict__.items() if value is not None}


@cache
def knobs_of(model: type[BaseModel]) -> tuple[Knob, ...]:
    """The knobs a `TrialConfig` (or a model extending it) declares, in field order, each named."""
    out = []
    for name, info in model.model_fields.items():
        declared = [m for m in info.metadata if isinstance(m, Knob)]
        if len(declared) != 1:
            raise TypeError(f"{model.__name__}.{name} declares {len(declared)} Knobs; each knob field declares one")
        out.append(replace(declared[0], name=name))
    return tuple(out)


@cache
def knob_specs(model: type[BaseModel]) -> dict[str, Knob]:
    return {k.name: k for k in knobs_of(model)}


KNOBS: tuple[Knob, ...] = knobs_of(TrialConfig)
KNOB_SPECS: dict[str, Knob] = knob_specs(TrialConfig)
# TrialConfig knob -> the TrainingArgs field (Megatron/Primus training argument) it overrides.
KNOB_TO_ARG: dict[str, str] = {k.name: k.dest for k in KNOBS}
# Knobs whose "none" spelling means the feature is off (None in EffectiveConfig); cuda_graph_impl keeps
# Megatron's own "none" value.
NONE_IS_NULL = frozenset(k.name for k in KNOBS if k.none_is_null)
# The knobs that together are the pipeline split: a trial that sets one of them replaces the whole
# split (the ones it leaves out take Megatron's defaults), since Megatron refuses mixed mechanisms.
SPLIT_KNOBS = tuple(k.name for k in KNOBS if k.split)
MOE_KNOBS = frozenset(k.name for k in KNOBS if k.moe)


def knob_available(knob: str, stack: str, vendor: str) -> bool:
    """Whether `stack` on `vendor` GPUs has this knob (a knob without a registry entry is everyone's)."""
    spec = KNOB_SPECS.get(knob)
    if spec is None:
        return True
    if not spec.stacks():
        return True  # no argument of its own (pp_schedule): its values are restricted, not the knob
    return stack in spec.stacks() and vendor in spec.vendors


def value_available(knob: str, value: object, stack: str, vendor: str) -> bool:
    """Whether `stack` on `vendor` GPUs can run `knob` at `value` (the off value runs everywhere)."""
    spec = KNOB_SPECS.get(knob)
    if spec is None or value == spec.off or value is None:
        return True
    if not knob_available(knob, stack, vendor):
        return False
    allowed = spec.value_stacks.get(value)
    return allowed is None or stack in allowed
