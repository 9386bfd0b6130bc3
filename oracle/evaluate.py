"""The oracle's entry points: one layout in, one `EvalResult` out (memory-only or simulated)."""

from __future__ import annotations

from .layout import data_parallel
from .legality import validate
from .memory import estimate_memory
from .performance import simulate
from .specs import ClusterSpec, EffectiveConfig, EvalResult, TrialConfig, Workload
from .specs.trusted import trusted


def evaluate_config(workload: Workload, cluster: ClusterSpec, cfg: EffectiveConfig, *, performance: bool) -> EvalResult:
    """Legality, then memory, then (when `performance`) the simulated iteration of one layout."""
    config, key = {name: cfg.__dict__[name] for name in EffectiveConfig.model_fields}, cfg.key
    source = "simulate" if performance else "memory_only"
    model = workload.model
    violations = validate(model, cfg, cluster)
    if violations:
        return trusted(EvalResult, dict(
            legal=False, reason="; ".join(v.message for v in violations), violations=violations, fits=None,
            memory_per_gpu_gb=None, param_optimizer_gb=None, activation_gb=None,
            memory_cap_gb=cluster.memory_cap_gb, iteration_ms=None, tokens_per_s_per_gpu=None,
            tflops_per_gpu=None, mfu=None, derived_dp=data_parallel(cfg, cluster.world_size) or None,
            source=source, breakdown={}, config=config, config_key=key,
        ))
    mem = estimate_memory(model, cfg, cluster)
    fits = mem.total_gb <= cluster.memory_cap_gb
    reason = "" if fits else f"needs {mem.total_gb:.1f} GiB per GPU, cap is {cluster.memory_cap_gb:.1f} GiB"
    breakdown = {f"mem_{k}": v for k, v in mem.breakdown.items()}
    perf = simulate(model, cfg, cluster) if performance else None
    if perf is not None:
        breakdown.update({f"time_{k}_ms": v for k, v in perf.breakdown.items()})
    return trusted(EvalResult, dict(
        legal=True, reason=reason, violations=[], fits=fits,
        memory_per_gpu_gb=mem.total_gb, param_optimizer_gb=mem.param_optimizer_gb,
        activation_gb=mem.activation_gb, memory_cap_gb=cluster.memory_cap_gb,
        iteration_ms=perf.iteration_ms if perf else None,
        tokens_per_s_per_gpu=perf.tokens_per_s_per_gpu if perf else None,
        tflops_per_gpu=perf.tflops_per_gpu if perf else None,
        mfu=perf.mfu if perf else None,
        derived_dp=data_parallel(cfg, cluster.world_size), source=source,
        breakdown=breakdown, config=config, config_key=key,
    ))


def evaluate_memory_only(workload: Workload, cluster: ClusterSpec, trial: TrialConfig | None = None) -> EvalResult:
    """Legality and per-GPU memory of a trial (no throughput)."""
    return evaluate_config(workload, cluster, workload.effective(trial), performance=False)


def evaluate_simulate(workload: Workload, cluster: ClusterSpec, trial: TrialConfig | None = None) -> EvalResult:
    """Legality, memory and the projected iteration time / tokens/s/GPU of a trial."""
    return evaluate_config(workload, cluster, workload.effective(trial), performance=True)
