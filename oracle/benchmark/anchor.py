"""`evaluate_with_benchmark`: the simulated result of one layout, anchored to measured layers (DESIGN §4).

One layer of each kind the model holds (dense, MoE; with MLA attention where the model has it) is
built at the layout's per-rank shapes and measured once per shape and device (cached). Its measured
forward and backward times over the analytic compute of the same layer scale the compute of every
such layer in the simulated iteration; communication, the pipeline schedule, DP and the optimizer
stay analytic. Its measured activation bytes over the analytic ones scale the activation memory of
those layers, and on a GPU the measured allocator overhead (reserved - allocated at the peak, as a
fraction of the peak) replaces the analytic fragmentation fraction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..evaluate import evaluate_config
from ..memory.constants import ALLOCATOR_FRAGMENTATION
from ..performance import simulate
from ..specs import (
    ClusterSpec,
    EffectiveConfig,
    EvalResult,
    ModelArch,
    TrialConfig,
    Violation,
    Workload,
)
from .analytic import LayerProjection, project_all_gather, project_layer, tp_bytes
from .cache import PROCESS_CACHE, MeasurementCache
from .collectives import measure_collectives
from .gate import benchmark_device, device_label, fp8_unsupported
from .shapes import LayerShape, layer_kinds, layer_shape, tiny_layout

Progress = Callable[[int, int, str], None]  # (done, total, message)
MIB = 2.0**20


def measured_layout(model: ModelArch, cfg: EffectiveConfig,
                    device: str) -> tuple[ModelArch, EffectiveConfig, list[str]]:
    """The (model, layout) that is measured — the target's, or its tiny stand-in on CPU — in the
    precision the device supports and with fused (SDPA) attention; and notes on what differs."""
    notes = []
    skip_fp8 = fp8_unsupported(device) if cfg.fp8 else None
    if skip_fp8:
        notes.append(skip_fp8)
    fields = {**cfg.model_dump(), "use_flash_attn": True, "fp8": None if skip_fp8 else cfg.fp8}
    measured = EffectiveConfig.model_construct(**fields)
    if device == "cpu":
        notes.append("CPU smoke measurement on tiny shapes: its times and memory are not meaningful for the target")
        return (*tiny_layout(model, measured), notes)
    return model, measured, notes


def _measure(shape: LayerShape, device: str, label: str, cache: MeasurementCache) -> tuple[dict[str, Any], bool]:
    """(measurement, from cache) of one layer shape on this device."""
    key = shape.key(label)
    hit = cache.get(key)
    if hit is not None:
        return hit, True
    # torch loads only once benchmarking is known to be possible
    from .timing import measure_layer

    data = {**measure_layer(shape, device), "device": label, "kind": shape.kind}
    cache.put(key, data)
    return data, False


def _collectives(model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec, label: str,
                 cache: MeasurementCache) -> dict[str, float]:
    """Measured vs analytic TP all-gather / reduce-scatter on this host's GPUs (benchmark_gpus > 1)."""
    import torch

    group = min(cfg.tp, cluster.benchmark_gpus, torch.cuda.device_count())
    if group < 2:
        return {}
    nbytes = tp_bytes(model, cfg, cluster.world_size)
    key = f"collectives|tp={group}|bytes={nbytes}|{label}"
    data = cache.get(key)
    if data is None:
        data = measure_collectives(group, nbytes)
        cache.put(key, data)
    analytic = project_all_gather(cluster, nbytes, group)
    return {"bench_tp_group": float(group), "bench_tp_all_gather_ms": data["all_gather_ms"],
            "bench_tp_reduce_scatter_ms": data["reduce_scatter_ms"], "analytic_tp_all_gather_ms": analytic,
            "analytic_tp_reduce_scatter_ms": analytic}


def _layer_figures(kind: str, m: dict[str, Any], p: LayerProjection) -> dict[str, float]:
    out = {f"bench_{kind}_fwd_ms": m["fwd_ms"], f"bench_{kind}_bwd_ms": m["bwd_ms"],
           f"analytic_{kind}_fwd_ms": p.fwd_ms, f"analytic_{kind}_bwd_ms": p.bwd_ms,
           f"bench_{kind}_fwd_scale": m["fwd_ms"] / p.fwd_ms, f"bench_{kind}_bwd_scale": m["bwd_ms"] / p.bwd_ms,
           f"bench_{kind}_act_mib": m["act_bytes"] / MIB, f"analytic_{kind}_act_mib": p.act_bytes / MIB,
           f"bench_{kind}_act_scale": m["act_bytes"] / p.act_bytes}
    if m["peak_bytes"] is not None:
        out[f"bench_{kind}_peak_mib"] = m["peak_bytes"] / MIB
        out[f"bench_{kind}_alloc_overhead_mib"] = m["alloc_overhead_bytes"] / MIB
    return out


def _alloc_fraction(measured: list[dict[str, Any]]) -> float:
    """Allocator overhead as a fraction of the dynamic peak: measured on GPU, the analytic constant on CPU."""
    peaks = [m["peak_bytes"] for m in measured]
    if None in peaks or not sum(peaks):
        return ALLOCATOR_FRAGMENTATION
    return sum(m["alloc_overhead_bytes"] for m in measured) / sum(peaks)


def _anchored_memory(base: EvalResult, act_scale: dict[str, float],
                     alloc_frac: float) -> tuple[dict[str, float], float, float]:
    """(updated mem_* terms, GiB of activations added, GiB of allocator overhead added): layer
    activations scaled per kind, the allocator overhead recomputed at `alloc_frac` of the dynamic
    (activation + transient buffer) bytes."""
    b = base.breakdown
    dense = act_scale.get("dense", act_scale.get("moe", 1.0))
    moe = act_scale.get("moe", dense)
    terms = {"mem_act_dense_layers": dense, "mem_act_moe_layers": moe, "mem_act_recompute_transient": max(dense, moe)}
    new = {k: b[k] * scale for k, scale in terms.items()}
    delta = sum(new[k] - b[k] for k in terms)
    old_alloc = b["mem_allocator_overhead"]
    new["mem_allocator_overhead"] = alloc_frac * (old_alloc / ALLOCATOR_FRAGMENTATION + delta)
    return new, delta, new["mem_allocator_overhead"] - old_alloc


def evaluate_with_benchmark(workload: Workload, cluster: ClusterSpec,
                            trial_or_cfg: TrialConfig | EffectiveConfig | None = None, *, allow_cpu: bool = False,
                            cache: MeasurementCache | None = None, progress: Progress | None = None,
                            violations: list[Violation] | None = None) -> EvalResult:
    """Legality, memory and iteration time of one layout, anchored to layers measured on this host.

    Illegal layouts come back legal=false with nothing measured. Raises BenchmarkUnavailable when no
    GPU can be used (`allow_cpu`: a CPU smoke run on tiny shapes instead). `cache` (get/put) defaults to
    one per process; `progress(done, total, message)` follows the layers; `violations`: the layout's, when
    the caller has checked them already."""
    cfg = trial_or_cfg if isinstance(trial_or_cfg, EffectiveConfig) else workload.effective(trial_or_cfg)
    base = evaluate_config(workload, cluster, cfg, performance=True, violations=violations)
    if not base.legal:
        return base.model_copy(update={"source": "benchmark"})
    device = benchmark_device(cluster, allow_cpu)
    cache = PROCESS_CACHE if cache is None else cache
    label = device_label(device)
    model_m, cfg_m, notes = measured_layout(workload.model, cfg, device)
    kinds = layer_kinds(workload.model)
    figures: dict[str, float] = {"bench_cpu_smoke": float(device == "cpu"), "bench_fp8": float(cfg_m.fp8 is not None)}
    measured: list[dict[str, Any]] = []
    scales: dict[str, tuple[float, float]] = {}
    act_scale: dict[str, float] = {}
    for done, moe in enumerate(kinds, 1):
        shape = layer_shape(model_m, cfg_m, moe)
        m, cached = _measure(shape, device, label, cache)
        p = project_layer(model_m, cfg_m, cluster, moe)
        measured.append(m)
        scales[shape.kind] = (m["fwd_ms"] / p.fwd_ms, m["bwd_ms"] / p.bwd_ms)
        act_scale[shape.kind] = m["act_bytes"] / p.act_bytes
        figures |= _layer_figures(shape.kind, m, p)
        if progress:
            how = "cached" if cached else f"measured on {label}"
            progress(done, len(kinds), f"{shape.kind} layer ({how}): fwd {m['fwd_ms']:.3f} ms, "
                                       f"bwd {m['bwd_ms']:.3f} ms, activations {m['act_bytes'] / MIB:.2f} MiB")
    if device == "cuda" and cluster.benchmark_gpus > 1 and cfg.tp > 1:
        try:
            figures |= _collectives(workload.model, cfg, cluster, label, cache)
        except RuntimeError as exc:  # the layer measurements stand without it
            notes.append(f"TP collectives not measured ({exc})")
    dense = scales.get("dense") or scales["moe"]  # a model has dense layers, MoE layers or both
    perf = simulate(workload.model, cfg, cluster, compute_scale=(dense, scales.get("moe", dense)))
    # a legal layout's simulated result has every figure
    assert base.memory_per_gpu_gb is not None and base.activation_gb is not None
    assert base.iteration_ms is not None and base.tokens_per_s_per_gpu is not None
    alloc_frac = _alloc_fraction(measured)
    mem, act_delta, alloc_delta = _anchored_memory(base, act_scale, alloc_frac)
    total = base.memory_per_gpu_gb + act_delta + alloc_delta
    fits = total <= cluster.memory_cap_gb
    breakdown = {k: v for k, v in base.breakdown.items() if k.startswith("mem_")} | mem
    breakdown |= {f"time_{k}_ms": v for k, v in perf.breakdown.items()}
    breakdown |= figures | {"bench_alloc_frac": alloc_frac, "analytic_alloc_frac": ALLOCATOR_FRAGMENTATION,
                            "analytic_iteration_ms": base.iteration_ms,
                            "analytic_tokens_per_s_per_gpu": base.tokens_per_s_per_gpu,
                            "analytic_memory_per_gpu_gb": base.memory_per_gpu_gb,
                            "analytic_activation_gb": base.activation_gb}
    fit_note = "" if fits else f"needs {total:.1f} GiB per GPU, cap is {cluster.memory_cap_gb:.1f} GiB"
    return base.model_copy(update={
        "source": "benchmark", "reason": "; ".join(x for x in (fit_note, *notes) if x), "fits": fits,
        "memory_per_gpu_gb": total, "activation_gb": base.activation_gb + act_delta,
        "iteration_ms": perf.iteration_ms, "tokens_per_s_per_gpu": perf.tokens_per_s_per_gpu,
        "tflops_per_gpu": perf.tflops_per_gpu, "mfu": perf.mfu, "breakdown": breakdown,
        "error": None, "error_family": None,  # anchored to a measurement: the analytic family error does not apply
    })
