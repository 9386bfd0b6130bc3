"""Benchmark mode on the GPU at hand: Llama 3 8B (TP1), Llama 3 70B (TP8) and Mixtral 8x22B (EP8) layers.

For each layer: measured vs analytic (simulate's own projection at the same per-rank shapes) forward
and backward compute time and stored activations, the peak and allocator overhead on GPU, and the
whole iteration simulated vs anchored; BF16, and FP8 where the GPU and torch support it. Targets an
H200 cluster (oracle.catalog.gpu('h200')). Without a GPU, `--allow-cpu` runs the same on tiny shapes
as a smoke test of the machinery (its times say nothing about an H200). Exit 2 when unavailable.

    python benchmarks/benchmark_mode.py [--allow-cpu] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from paratune.oracle.benchmark import BenchmarkUnavailable, MemoryCache, evaluate_with_benchmark
from paratune.oracle.benchmark.gate import benchmark_device, fp8_unsupported
from paratune.oracle.catalog import gpu
from paratune.oracle.inputs import load_workload
from paratune.oracle.specs import ClusterSpec, TrialConfig

ROOT = Path(__file__).resolve().parents[1]

WORKLOADS = ROOT / "examples" / "workloads"
# (label, workload file, layout knobs, nodes of 8 H200): the shapes the issue asks for.
CASES = [
    ("Llama 3 8B TP1", "llama3-8b-mi300x.yaml", {}, 1),
    ("Llama 3 70B TP8", "llama3-70b-h100.yaml", {"tp": 8, "cp": 1}, 8),
    ("Mixtral 8x22B EP8", "mixtral-8x22b-mi355x.yaml", {}, 4),
]
COLUMNS = ("case", "layer", "prec", "fwd ms", "model", "bwd ms", "model", "act MiB", "model", "peak MiB",
           "alloc %", "iter ms", "simulated")


def h200_cluster(nodes: int, gpus: int) -> ClusterSpec:
    spec = gpu("h200")
    return ClusterSpec(name=f"h200-{nodes}n", num_nodes=nodes, gpus_per_node=8, gpu=spec, hbm_capacity_gb=spec.hbm_gb,
                       has_gpu=True, benchmark_gpus=gpus)


def rows(label: str, precision: str, result) -> list[tuple]:
    b = result.breakdown
    out = []
    for kind in ("dense", "moe"):
        if f"bench_{kind}_fwd_ms" not in b:
            continue
        peak = b.get(f"bench_{kind}_peak_mib")
        out.append((label, kind, precision, b[f"bench_{kind}_fwd_ms"], b[f"analytic_{kind}_fwd_ms"],
                    b[f"bench_{kind}_bwd_ms"], b[f"analytic_{kind}_bwd_ms"], b[f"bench_{kind}_act_mib"],
                    b[f"analytic_{kind}_act_mib"], peak, 100 * b["bench_alloc_frac"], result.iteration_ms,
                    b["analytic_iteration_ms"]))
    return out


def fmt(value) -> str:
    if value is None:
        return "-"
    return f"{value:,.2f}" if isinstance(value, float) else str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allow-cpu", action="store_true", help="without a GPU, a CPU smoke run on tiny shapes")
    parser.add_argument("--json", action="store_true", help="one JSON object per layer instead of the table")
    args = parser.parse_args(argv)
    try:
        device = benchmark_device(h200_cluster(1, 1), args.allow_cpu)
    except BenchmarkUnavailable as exc:
        print(f"benchmark_mode: unavailable: {exc}", file=sys.stderr)
        return 2
    import torch

    gpus = torch.cuda.device_count() if device == "cuda" else 0
    precisions = ("none", "hybrid") if device == "cuda" and fp8_unsupported(device) is None else ("none",)
    if device == "cpu":
        print("=" * 100 + "\nCPU SMOKE RUN: tiny stand-in shapes on the CPU; the times and memory below say nothing "
              "about an H200.\n" + "=" * 100)
    else:
        print(f"device: {torch.cuda.get_device_name()} x {gpus}, torch {torch.__version__}")
    cache, table = MemoryCache(), []
    for label, file, knobs, nodes in CASES:
        workload = load_workload(WORKLOADS / file)
        cluster = h200_cluster(nodes, gpus)
        for precision in precisions:
            name = "fp8" if precision == "hybrid" else "bf16"
            trial = TrialConfig(**knobs, fp8=precision)
            result = evaluate_with_benchmark(workload, cluster, trial, allow_cpu=args.allow_cpu, cache=cache,
                                             progress=lambda d, t, m, c=label: print(f"  {c}: {m}", file=sys.stderr))
            if not result.legal:
                print(f"{label}: illegal on {cluster.name}: {result.reason}", file=sys.stderr)
                continue
            table += rows(label, name, result)
            extra = {k: v for k, v in result.breakdown.items() if k.startswith(("bench_tp", "analytic_tp"))}
            if extra:
                print(f"  {label} TP collectives: {extra}")
            if result.reason:
                print(f"  {label} ({name}): {result.reason}")
    if args.json:
        for row in table:
            print(json.dumps(dict(zip(COLUMNS, row))))
        return 0
    widths = [max(len(c), *(len(fmt(r[i])) for r in table)) for i, c in enumerate(COLUMNS)]
    print("  ".join(c.rjust(w) for c, w in zip(COLUMNS, widths)))
    for row in table:
        print("  ".join(fmt(v).rjust(w) for v, w in zip(row, widths)))
    print("model = simulate's projection of the same layer at the measured shapes (compute only, no "
          "communication); iter ms = anchored iteration, simulated = analytic iteration.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
