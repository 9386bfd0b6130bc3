"""GPU and cluster descriptions: peaks, memory, links, and the optimisation target on them."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from ..stacks import Stack, default_stack
from .search import SearchConstraints

Vendor = Literal["nvidia", "amd"]
HostCPU = Literal["x86", "grace"]


class GPUSpec(BaseModel):
    """Dense peak figures of one GPU (no sparsity); bandwidths are per GPU, one direction."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    vendor: Vendor
    family: str
    hbm_gb: PositiveFloat
    hbm_tb_s: PositiveFloat
    bf16_tflops: PositiveFloat
    fp8_tflops: PositiveFloat | None = None
    num_sms: PositiveInt
    intra_node_gb_s: PositiveFloat
    inter_node_gb_s: PositiveFloat
    gpus_per_node: PositiveInt = 8
    # the CPU that launches the GPU's kernels: Grace (Arm Neoverse V2) on GB200/GB300 NVL72, an x86 host on
    # HGX/DGX boards; it sets the host's time per launch (calibration `launch_us` / `grace_launch_us`)
    host_cpu: HostCPU = "x86"
    source: str = ""

    @property
    def has_fp8(self) -> bool:
        return self.fp8_tflops is not None

    def peak_tflops(self, fp8: bool) -> float:
        """Dense peak for the GEMM precision (FP8 when asked and available)."""
        return self.fp8_tflops if fp8 and self.fp8_tflops else self.bf16_tflops


class Budget(BaseModel):
    """Evaluation budget per fidelity and the number of LLM rounds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_perf_calls: NonNegativeInt = 30
    max_benchmark_calls: NonNegativeInt = 0
    max_rounds: NonNegativeInt = 3


class ClusterSpec(BaseModel):
    """A target cluster and the optimisation settings that come with it (DESIGN §2)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    num_nodes: PositiveInt
    gpus_per_node: PositiveInt
    gpu: GPUSpec
    hbm_capacity_gb: PositiveFloat
    memory_safety_margin: float = Field(default=0.10, ge=0.0, lt=1.0)
    objective: Literal["tokens_per_s_per_gpu"] = "tokens_per_s_per_gpu"
    budget: Budget = Budget()
    allow_cross_node_tp: bool = False
    has_gpu: bool = False
    benchmark_gpus: NonNegativeInt = 0
    llm_model: str | None = None
    llm_timeout_s: PositiveFloat = 120.0  # one LLM call's limit (agent.llm.timeout_s), queueing included
    llm_max_tokens: PositiveInt = 2048  # completion tokens per LLM call (agent.llm.max_tokens)
    llm_retries: NonNegativeInt | None = None  # retries of a failed call (agent.llm.retries); None: 0 loopback, 1 else
    llm_phase_timeout_s: PositiveFloat = 1800.0  # wall clock of the whole LLM phase (agent.llm.phase_timeout_s)
    llm_context_window: PositiveInt | None = None  # the model's input tokens (agent.llm.context_window)
    llm_structured: Literal["schema", "json", "markers"] = "schema"  # how answers are typed (agent.llm.structured)
    prompt_extras: str = ""
    stack: Stack | None = None  # the software stack the cluster runs; None in a file: the vendor's default
    stack_version: str | None = None
    stack_is_default: bool = False  # whether `stack` came from the GPU vendor, not the file
    search: SearchConstraints = SearchConstraints()

    @model_validator(mode="after")
    def _stack(self) -> ClusterSpec:
        if self.stack is None:  # frozen: filled once, at validation
            object.__setattr__(self, "stack", default_stack(self.gpu.vendor))
            object.__setattr__(self, "stack_is_default", True)
        return self

    @property
    def stack_text(self) -> str:
        """The stack as the output states it, saying where it came from."""
        version = f" {self.stack_version}" if self.stack_version else ""
        vendor = self.gpu.vendor.upper()
        why = f" (default for {vendor} GPUs; set target_cluster.stack)" if self.stack_is_default else ""
        return f"{self.stack}{version}{why}"

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @property
    def memory_cap_gb(self) -> float:
        """Usable HBM per GPU after the safety margin, GiB."""
        return self.hbm_capacity_gb * (1.0 - self.memory_safety_margin)
