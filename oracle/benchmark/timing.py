"""Time one layer's forward and backward and read what it holds in memory, on GPU or CPU.

GPU: CUDA events around each pass after warm-up, the median over iterations; the peak is
torch.cuda.max_memory_allocated over one forward + backward above what was allocated before it
(stats reset first: activations, transients, weight gradients), and the allocator overhead is max
reserved minus max allocated over that step. CPU: time.perf_counter around each pass on one thread
(tiny shapes: more threads only add contention); no peak or allocator figure. Both: activation
bytes are the unique storages one forward saves for backward (saved_tensors_hooks), weights and
buffers excluded.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from .gate import BenchmarkUnavailable
from .shapes import LayerShape
from .torch_layers import build_layer

WARMUP = {"cuda": 3, "cpu": 1}
ITERS = {"cuda": 10, "cpu": 3}


def _saved_bytes(step: Callable[[], torch.Tensor], exclude: set[int]) -> tuple[torch.Tensor, int]:
    """(output, bytes of the unique non-excluded storages `step` saves for backward)."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in exclude:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = step()
    return out, sum(seen.values())


def timer(device: str) -> tuple[Callable[[], Any], Callable[[Any, Any], float]]:
    """(mark, elapsed ms between two marks) for `device`."""
    if device == "cuda":
        def mark() -> torch.cuda.Event:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event

        def elapsed(a: torch.cuda.Event, b: torch.cuda.Event) -> float:
            b.synchronize()
            return a.elapsed_time(b)

        return mark, elapsed
    return time.perf_counter, lambda a, b: (b - a) * 1e3


def measure_layer(shape: LayerShape, device: str) -> dict[str, float | None]:
    """fwd_ms, bwd_ms (medians), act_bytes, and on GPU peak_bytes and alloc_overhead_bytes of one layer."""
    if device == "cuda":
        try:
            return _measure(shape, device)
        except torch.OutOfMemoryError as exc:
            torch.cuda.empty_cache()
            raise BenchmarkUnavailable(
                f"one {shape.kind} layer at these shapes does not fit this GPU ({exc})") from None
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _measure(shape, device)
    finally:
        torch.set_num_threads(threads)


def _measure(shape: LayerShape, device: str) -> dict[str, float | None]:
    layer, x = build_layer(shape, device)
    grad_out = torch.randn_like(x)
    exclude = {t.untyped_storage().data_ptr() for t in (*layer.parameters(), *layer.buffers())}
    cuda = device == "cuda"

    def clear() -> None:
        layer.zero_grad(set_to_none=True)
        x.grad = None

    for _ in range(WARMUP[device]):
        clear()
        layer(x).backward(grad_out)
    clear()
    peak = overhead = None
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    out, act = _saved_bytes(lambda: layer(x), exclude)
    out.backward(grad_out)
    if cuda:
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        overhead = torch.cuda.max_memory_reserved() - torch.cuda.max_memory_allocated()
    mark, elapsed = timer(device)
    fwd, bwd = [], []
    for _ in range(ITERS[device]):
        clear()
        t0 = mark()
        out = layer(x)
        t1 = mark()
        out.backward(grad_out)
        t2 = mark()
        fwd.append(elapsed(t0, t1))
        bwd.append(elapsed(t1, t2))
    return {"fwd_ms": statistics.median(fwd), "bwd_ms": statistics.median(bwd), "act_bytes": float(act),
            "peak_bytes": None if peak is None else float(peak),
            "alloc_overhead_bytes": None if overhead is None else float(overhead)}
