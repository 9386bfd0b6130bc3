"""Training arguments in Megatron-LM (and Primus) argument names: the workload's baseline layout."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, field_validator

from .normalize import none_like

RecomputeGranularity = Literal["selective", "full"]
RecomputeMethod = Literal["uniform", "block"]
Fp8Recipe = Literal["hybrid", "e4m3"]
PipelineSchedule = Literal["1f1b", "interleaved", "zb", "zbv"]


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
    fp8: Fp8Recipe | None = None
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

    @field_validator("recompute_granularity", "fp8", "recompute_method", "pp_schedule", mode="before")
    @classmethod
    def _none_like(cls, v: object) -> object:
        return none_like(v)
