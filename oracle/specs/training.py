"""Training arguments in Megatron-LM (and Primus) argument names: the workload's baseline layout."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveInt,
    field_validator,
)

from .normalize import none_like, parse_modules

RecomputeGranularity = Literal["selective", "full"]
RecomputeMethod = Literal["uniform", "block"]
Fp8Recipe = Literal["hybrid", "e4m3"]
# Megatron's --fp8-recipe (megatron-core 0.16.1 enums.py Fp8Recipe; default delayed).
Fp8Scaling = Literal["delayed", "tensorwise", "mxfp8", "blockwise", "custom"]
PipelineSchedule = Literal["1f1b", "interleaved", "zb", "zbv"]
# Megatron's `recompute_modules` choices (megatron-core 0.16.1 transformer_config.py).
RecomputeModule = Literal["core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts"]
Dispatcher = Literal["allgather", "alltoall", "flex"]
FlexBackend = Literal["deepep", "hybridep"]
# Optimizer-state dtypes of the precision-aware optimizer (megatron-core optimizer_config.py).
StateDtype = Literal["fp32", "bf16", "fp16", "fp8"]
ShardingStrategy = Literal["no_shard", "optim", "optim_grads", "optim_grads_params"]
# CUDA-graph capture (megatron-core 0.16.1 transformer_config.py `cuda_graph_impl`).
CudaGraphImpl = Literal["none", "local", "transformer_engine"]
CudaGraphScope = Literal["attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "full_iteration"]


class TrainingArgs(BaseModel):
    """Batch, sequence, precision and parallel layout of one training job."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seq_length: PositiveInt = 4096
    global_batch_size: PositiveInt = 128
    micro_batch_size: PositiveInt = 1
    tensor_model_parallel_size: PositiveInt = 1
    pipeline_model_parallel_size: PositiveInt = 1
    virtual_pipeline_model_parallel_size: PositiveInt | None = None
    context_parallel_size: PositiveInt = 1
    expert_model_parallel_size: PositiveInt = 1
    expert_tensor_parallel_size: PositiveInt | None = None
    sequence_parallel: bool = True
    use_flash_attn: bool = True
    recompute_granularity: RecomputeGranularity | None = None
    recompute_method: RecomputeMethod | None = None
    recompute_num_layers: NonNegativeInt | None = None
    # Primus's `recompute_layer_ids` (AMD-AGI/Primus fd1eeab primus_megatron_module.yaml and
    # primus/backends/megatron/patches/recompute_layer_patches.py): under full recompute, exactly these global
    # layers (decoder 0..num_layers-1, then the MTP depths) are recomputed, each checkpointed alone; None:
    # recompute_method decides. Primus's "0,3,4" string or a list, read as its validator does (sorted, unique).
    recompute_layer_ids: tuple[NonNegativeInt, ...] | None = None
    fp8: Fp8Recipe | None = None
    fp8_recipe: Fp8Scaling = "delayed"
    bf16: bool = True
    fp16: bool = False
    use_distributed_optimizer: bool = False
    use_torch_fsdp2: bool = False
    use_turbo_deepep: bool = False
    turbo_sync_free_moe_stage: int = Field(default=0, ge=0)
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    cross_entropy_loss_fusion: bool = False
    pp_schedule: PipelineSchedule | None = None
    # pipeline split (oracle/pipeline_split.py) and interleaved micro-batch groups
    pipeline_model_parallel_layout: str | None = None
    decoder_first_pipeline_num_layers: PositiveInt | None = None
    decoder_last_pipeline_num_layers: PositiveInt | None = None
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    microbatch_group_size_per_vp_stage: PositiveInt | None = None
    # selective recompute modules (None: Megatron's default, core_attn)
    recompute_modules: tuple[RecomputeModule, ...] | None = None
    # precision and sharding of the model state
    grad_reduce_in_fp32: bool = True
    use_precision_aware_optimizer: bool = False
    main_grads_dtype: Literal["fp32", "bf16"] = "fp32"
    main_params_dtype: Literal["fp32", "fp16"] = "fp32"
    exp_avg_dtype: StateDtype = "fp32"
    exp_avg_sq_dtype: StateDtype = "fp32"
    fp8_param_gather: bool = False
    # the attention core in FP8 too (megatron-core TransformerConfig `fp8_dot_product_attention`, default off;
    # Bridge `mixed_precision.fp8_dot_product_attention`; Megatron-LM d48bd6be0a arguments.py has no flag for it)
    fp8_dot_product_attention: bool = False
    optimizer_cpu_offload: bool = False
    optimizer_offload_fraction: float = Field(default=1.0, ge=0.0, le=1.0)
    use_megatron_fsdp: bool = False
    data_parallel_sharding_strategy: ShardingStrategy = "no_shard"
    # MoE token dispatcher (Megatron's default is allgather)
    moe_token_dispatcher_type: Dispatcher = "allgather"
    moe_flex_dispatcher_backend: FlexBackend = "deepep"
    moe_grouped_gemm: bool = False
    # with moe_grouped_gemm, megatron-core's legacy GroupedMLP (the grouped_gemm package) instead of TE's
    # (gpt_layer_specs.py; Primus keeps it as DeprecatedGroupedMLP, transformer_engine_spec_provider.py)
    moe_use_legacy_grouped_gemm: bool = False
    moe_permute_fusion: bool = False
    # SMs the flex dispatcher's DeepEP and HybridEP kernels run on (megatron-core 0.16.1 transformer_config.py
    # defaults 20 and 16; None: the kernel's own, `ep_bandwidth`): their achieved rate grows with them
    moe_deepep_num_sms: PositiveInt | None = 20
    moe_hybridep_num_sms: PositiveInt | None = 16
    moe_shared_expert_overlap: bool = False
    # NVIDIA-side overlaps and CUDA graphs (Megatron-LM arguments.py defaults: all off)
    tp_comm_overlap: bool = False
    overlap_moe_expert_parallel_comm: bool = False
    cuda_graph_impl: CudaGraphImpl = "none"
    cuda_graph_scope: tuple[CudaGraphScope, ...] | None = None  # None or empty: the whole layer (Megatron's default)
    # Transformer Engine's op fuser for the routed experts (megatron-core cd4afffa64 transformer_config.py
    # `use_transformer_engine_op_fuser`, default off; experts.py `TEGroupedMLP._with_fused_impl`): fc1, the
    # scaled activation and fc2 as one te.ops.Sequential, the fc2 bias scaled by the probs inside it
    use_transformer_engine_op_fuser: bool = False

    @field_validator("recompute_granularity", "fp8", "recompute_method", "pp_schedule",
                     "pipeline_model_parallel_layout", mode="before")
    @classmethod
    def _none_like(cls, v: object) -> object:
        return none_like(v)

    @field_validator("recompute_layer_ids", mode="before")
    @classmethod
    def _layer_ids(cls, v: object) -> object:
        """validate_specified_recompute_layers (recompute_layer_patches.py): "a,b" or a list of ints, sorted and
        unique; an empty list is refused."""
        if isinstance(v, str):
            v = [x.strip() for x in v.split(",") if x.strip()]
        if isinstance(v, (list, tuple)):
            if not v:
                raise ValueError("recompute_layer_ids must not be empty (Primus recompute_layer_patches.py)")
            return tuple(sorted({int(x) for x in v}))
        return v

    @field_validator("recompute_modules", mode="before")
    @classmethod
    def _modules(cls, v: object) -> object:
        return parse_modules(v)

    @field_validator("cuda_graph_scope", mode="before")
    @classmethod
    def _scope(cls, v: object) -> object:
        return parse_modules(v) or None

    @field_validator("cuda_graph_impl", mode="before")
    @classmethod
    def _graphs_off(cls, v: object) -> object:
        return "none" if none_like(v) is None else v
