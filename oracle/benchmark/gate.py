"""Whether benchmark mode can run here, on which device, and in which precision."""

from __future__ import annotations

import importlib.util

from ..specs import ClusterSpec

FP8_CAPABILITY = (8, 9)  # Ada / Hopper and newer: FP8 tensor cores behind torch._scaled_mm


class BenchmarkUnavailable(Exception):
    """Benchmark mode cannot run: the message is the one-line reason."""


def benchmark_device(cluster: ClusterSpec, allow_cpu: bool) -> str:
    """"cuda" when the cluster has a GPU and torch sees one; "cpu" when `allow_cpu`; else raise."""
    if importlib.util.find_spec("torch") is None:
        raise BenchmarkUnavailable("torch is not installed (pip install 'paratune[benchmark]')")
    if not cluster.has_gpu:
        if allow_cpu:
            return "cpu"
        raise BenchmarkUnavailable(f"cluster {cluster.name} says has_gpu: false (available_for_benchmark.has_gpu); "
                                   "use --allow-cpu for a CPU smoke run")
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if allow_cpu:
        return "cpu"
    raise BenchmarkUnavailable(f"torch {torch.__version__} sees no GPU (torch.cuda.is_available() is false)")


def device_label(device: str) -> str:
    """The device and torch build, part of every measurement's cache key."""
    import torch

    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    return f"{name}|torch {torch.__version__}"


def fp8_unsupported(device: str) -> str | None:
    """Why FP8 GEMMs cannot be measured on `device`, or None when they can."""
    import torch

    if device != "cuda":
        return "FP8 skipped on CPU (torch._scaled_mm needs a CUDA GPU); measured in BF16"
    if not hasattr(torch, "_scaled_mm"):
        return f"FP8 skipped: torch {torch.__version__} has no torch._scaled_mm; measured in BF16"
    if torch.cuda.get_device_capability() < FP8_CAPABILITY:
        return f"FP8 skipped: {torch.cuda.get_device_name()} has no FP8 tensor cores; measured in BF16"
    return None
