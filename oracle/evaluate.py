"""The oracle's entry points: one layout in, one `EvalResult` out (memory-only or simulated)."""

from __future__ import annotations

from .constraints import rule_violations, search_rules
from .identity_cache import by_identity
from .layout import layout_facts
from .legality import validate
from .memory import estimate_memory
from .performance import simulate
from .performance.calibration import calibrated
from .performance.uncertainty import uncertainty
from .pipeline_split import Stage
from .specs import (
    ClusterSpec,
    EffectiveConfig,
    EvalResult,
    TrialConfig,
    Violation,
    Workload,
)
from .specs.trusted import trusted


@by_identity()
def _capacity(cluster: ClusterSpec) -> tuple[int, float, str]:
    """(world size, usable GiB per GPU, that cap as the reason text shows it), read once per cluster
    object: evaluation runs for every point of a search."""
    return cluster.world_size, cluster.memory_cap_gb, f"{cluster.memory_cap_gb:.1f}"


@by_identity(maxsize=4096)
def _stage_layers(stages: tuple[Stage, ...]) -> dict[str, float]:
    """Decoder layers of each virtual pipeline stage, model order (`stage_<k>_layers`), built once per
    stages object (the split cache shares one among all layouts with the same split)."""
    return {f"stage_{k}_layers": float(s.decoders) for k, s in enumerate(stages)}


def layout_violations(workload: Workload, cluster: ClusterSpec, cfg: EffectiveConfig) -> list[Violation]:
    """Every legality rule and search constraint (stack, precision, pinned knobs) `cfg` breaks, empty when
    legal: the one check every caller runs before scoring a layout."""
    return validate(workload.model, cfg, cluster) + rule_violations(search_rules(workload, cluster), cfg)


def evaluate_config(workload: Workload, cluster: ClusterSpec, cfg: EffectiveConfig, *, performance: bool,
                    violations: list[Violation] | None = None) -> EvalResult:
    """Legality, then memory, then (when `performance`) the simulated iteration of one layout;
    `violations`: what `layout_violations` already found for it (not checked again)."""
    config = dict(cfg.__dict__)
    key = config.pop("key", None) or cfg.key  # resolve() caches the key among the fields
    source = "simulate" if performance else "memory_only"
    world, cap, cap_text = _capacity(cluster)
    model = workload.model
    facts = layout_facts(model, cfg, world)
    dp = facts.dp
    if violations is None:
        violations = layout_violations(workload, cluster, cfg)
    if violations:
        return trusted(EvalResult, {
            "legal": False, "reason": "; ".join(v.message for v in violations), "violations": violations,
            "fits": None, "memory_per_gpu_gb": None, "param_optimizer_gb": None, "activation_gb": None,
            "memory_cap_gb": cap, "iteration_ms": None, "tokens_per_s_per_gpu": None, "tflops_per_gpu": None,
            "mfu": None, "error": None, "error_family": None, "derived_dp": dp or None, "source": source,
            "breakdown": {}, "config": config, "config_key": key,
        })
    mem = estimate_memory(model, cfg, cluster)
    fits = mem.total_gb <= cap
    reason = "" if fits else f"needs {mem.total_gb:.1f} GiB per GPU, cap is {cap_text} GiB"
    breakdown = mem.breakdown  # a new dict per estimate: the result may own it
    breakdown.update(_stage_layers(facts.stages))
    perf = simulate(model, cfg, cluster) if performance else None
    error = uncertainty(model, cluster.gpu) if perf is not None else None
    if perf is not None:
        breakdown.update({f"time_{k}_ms": v for k, v in perf.breakdown.items()})
        breakdown["time_gpu_calibrated"] = float(calibrated(cluster.gpu))  # 0: constants borrowed from another family
    return trusted(EvalResult, {
        "legal": True, "reason": reason, "violations": [], "fits": fits,
        "memory_per_gpu_gb": mem.total_gb, "param_optimizer_gb": mem.param_optimizer_gb,
        "activation_gb": mem.activation_gb, "memory_cap_gb": cap,
        "iteration_ms": perf.iteration_ms if perf else None,
        "tokens_per_s_per_gpu": perf.tokens_per_s_per_gpu if perf else None,
        "tflops_per_gpu": perf.tflops_per_gpu if perf else None,
        "mfu": perf.mfu if perf else None,
        "error": error.mape if error else None, "error_family": error.family if error else None,
        "derived_dp": dp, "source": source,
        "breakdown": breakdown, "config": config, "config_key": key,
    })


def evaluate_memory_only(workload: Workload, cluster: ClusterSpec, trial: TrialConfig | None = None) -> EvalResult:
    """Legality and per-GPU memory of a trial (no throughput)."""
    return evaluate_config(workload, cluster, workload.effective(trial), performance=False)


def evaluate_simulate(workload: Workload, cluster: ClusterSpec, trial: TrialConfig | None = None) -> EvalResult:
    """Legality, memory and the projected iteration time / tokens/s/GPU of a trial."""
    return evaluate_config(workload, cluster, workload.effective(trial), performance=True)
