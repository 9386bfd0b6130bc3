"""Load a target cluster in the Primus target-cluster schema (extended, DESIGN §2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
)

from ..catalog import gpu, gpu_card, gpu_name
from ..errors import InputError
from ..specs import Budget, ClusterSpec, GPUSpec
from ..specs.search import SearchConstraints
from ..stacks import Stack
from .yaml_io import build, read_mapping


class _TargetCluster(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = "cluster"
    num_nodes: PositiveInt
    gpus_per_node: PositiveInt | None = None
    gpu_arch: str
    allow_cross_node_tp: bool = False
    stack: Stack | None = None  # the software stack; None: the GPU vendor's (oracle.stacks.DEFAULT_STACK)
    stack_version: str | None = None


class _Optimization(BaseModel):
    model_config = ConfigDict(extra="forbid")
    objective: str = "tokens_per_s_per_gpu"
    hbm_capacity_gb: float | None = Field(default=None, gt=0)
    memory_safety_margin: float = Field(default=0.10, ge=0.0, lt=1.0)
    budget: Budget = Budget()


class _Benchmark(BaseModel):
    model_config = ConfigDict(extra="forbid")
    has_gpu: bool = False
    benchmark_gpus: NonNegativeInt = 0


class _Llm(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str | None = None
    timeout_s: PositiveFloat = 120.0
    max_tokens: PositiveInt = 2048
    retries: NonNegativeInt | None = None  # None: 0 for a loopback endpoint, else 1 (planner/llm/bounds.py)
    phase_timeout_s: PositiveFloat = 1800.0
    context_window: PositiveInt | None = None
    structured: Literal["schema", "json", "markers"] = "schema"


class _Agent(BaseModel):
    model_config = ConfigDict(extra="allow")
    llm: _Llm = _Llm()
    prompt_extras: str | list[str] = ""


class _ClusterFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    target_cluster: _TargetCluster
    hardware: dict[str, Any] = Field(default_factory=dict)
    optimization: _Optimization = _Optimization()
    available_for_benchmark: _Benchmark = _Benchmark()
    agent: _Agent = _Agent()
    search: SearchConstraints = SearchConstraints()


def _gpu_with_overrides(arch: str, overrides: dict[str, Any], file: str) -> GPUSpec:
    """The catalog GPU `arch` with the `hardware:` figures over it; a GPU the catalog lacks is built from
    the `hardware:` block alone (then every GPUSpec figure must be there)."""
    if gpu_name(arch) is None and overrides:
        return build(GPUSpec, {"name": arch, **overrides}, file=file, prefix="hardware.")
    base = gpu(arch, file=file)
    if not overrides:
        return base
    return build(GPUSpec, {**gpu_card(arch), **overrides}, file=file, prefix="hardware.")


def load_cluster(path: str | Path) -> ClusterSpec:
    """A ClusterSpec from a cluster YAML; unknown GPUs or keys raise InputError naming file and key."""
    file = str(path)
    raw = build(_ClusterFile, read_mapping(path), file=file)
    tc = raw.target_cluster
    spec = _gpu_with_overrides(tc.gpu_arch, raw.hardware, file)
    if raw.optimization.objective != "tokens_per_s_per_gpu":
        raise InputError("only 'tokens_per_s_per_gpu' is supported", file=file, key="optimization.objective")
    extras = raw.agent.prompt_extras
    return ClusterSpec(
        name=tc.name,
        num_nodes=tc.num_nodes,
        gpus_per_node=tc.gpus_per_node or spec.gpus_per_node,
        gpu=spec,
        hbm_capacity_gb=raw.optimization.hbm_capacity_gb or spec.hbm_gb,
        memory_safety_margin=raw.optimization.memory_safety_margin,
        budget=raw.optimization.budget,
        allow_cross_node_tp=tc.allow_cross_node_tp,
        has_gpu=raw.available_for_benchmark.has_gpu,
        benchmark_gpus=raw.available_for_benchmark.benchmark_gpus,
        llm_model=raw.agent.llm.model,
        llm_timeout_s=raw.agent.llm.timeout_s,
        llm_max_tokens=raw.agent.llm.max_tokens,
        llm_retries=raw.agent.llm.retries,
        llm_phase_timeout_s=raw.agent.llm.phase_timeout_s,
        llm_context_window=raw.agent.llm.context_window,
        llm_structured=raw.agent.llm.structured,
        prompt_extras="\n".join(extras) if isinstance(extras, list) else extras,
        stack=tc.stack,
        stack_version=tc.stack_version,
        search=raw.search,
    )
