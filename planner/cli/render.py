"""Readable terminal tables for evaluation results."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from paratune.oracle.performance.calibration import calibrated
from paratune.oracle.specs import ClusterSpec, EvalResult, Workload


def print_result(result: EvalResult, workload: Workload, cluster: ClusterSpec) -> None:
    """Header, verdict, headline figures and the full breakdown of one EvalResult."""
    console = Console()
    cfg = result.config
    console.print(f"[bold]{workload.name}[/] on [bold]{cluster.name}[/] ({cluster.world_size} x {cluster.gpu.name})")
    console.print("layout: " + " ".join(f"{k}={cfg[k]}" for k in ("tp", "pp", "cp", "ep", "etp", "vpp", "mbs", "gbs")))
    console.print("knobs:  " + " ".join(
        f"{k}={cfg[k]}" for k in ("pp_schedule", "recompute_granularity", "fp8", "use_distributed_optimizer",
                                  "use_torch_fsdp2", "moe_token_dispatcher_type", "use_turbo_deepep",
                                  "overlap_moe_expert_parallel_comm", "tp_comm_overlap")))
    console.print(f"stack:  {cluster.stack_text}")
    if not calibrated(cluster.gpu):
        console.print(f"[yellow]{cluster.gpu.name} is uncalibrated[/]: no published training rows of it were fitted; "
                      f"it runs on the {cluster.gpu.family} family's constants (oracle/performance/calibration.yaml)")
    if not result.legal:
        console.print("[red]illegal[/]:")
        for v in result.violations:
            console.print(f"  [{v.code}] {v.message}")
        return
    verdict = "[green]fits[/]" if result.fits else f"[red]does not fit[/]: {result.reason}"
    console.print(f"legal, {verdict}")
    table = Table(show_header=True, header_style="bold")
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = [("memory per GPU (GiB)", result.memory_per_gpu_gb), ("  cap (GiB)", result.memory_cap_gb),
            ("  params + optimizer (GiB)", result.param_optimizer_gb), ("  activations (GiB)", result.activation_gb),
            ("iteration (ms)", result.iteration_ms), ("tokens/s/GPU", result.tokens_per_s_per_gpu),
            ("TFLOP/s/GPU (model)", result.tflops_per_gpu), ("MFU", result.mfu), ("DP", result.derived_dp)]
    for name, value in rows:
        if value is not None:
            table.add_row(name, f"{value:,.3f}" if isinstance(value, float) else str(value))
    for name, value in result.breakdown.items():
        table.add_row(f"  {name}", f"{value:,.3f}")
    console.print(table)
    if result.error is not None and result.tokens_per_s_per_gpu is not None:
        lo, hi = (result.tokens_per_s_per_gpu * (1 + s * result.error) for s in (-1, 1))
        console.print(f"tokens/s/GPU {result.tokens_per_s_per_gpu:,.1f}, stated range {lo:,.0f}-{hi:,.0f}: "
                      f"±{100 * result.error:.1f}%, the accuracy report's MAPE on {result.error_family} published runs")
