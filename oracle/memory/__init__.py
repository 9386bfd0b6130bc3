"""Per-GPU memory model (GiB = 2**30 bytes) of Megatron-style training, DESIGN §4 "Memory".

`estimate_memory(model, cfg, cluster)` evaluates every pipeline GPU that holds a distinct set of layers
and returns the most loaded one, with every term in `breakdown`. Pure and fast (no I/O, no pydantic
construction); sub-results are cached on the model shape and the sharding.

Modules: `params` (parameter counts per layer type and sharding), `activations` (stored bytes per
token per layer type, Korthikanti et al. 2022 generalised), `inflight` (pipeline chunks per GPU and
micro-batches in flight per schedule), `overheads` (communication, DeepEP, allocator), `constants`
(every fixed number, with its source), `parts` (what a point's layout and its feature setting
each decide), `estimate` (assembly, on one layout or over arrays).
"""

from .estimate import NON_GIB_KEYS, MemoryEstimate, estimate_memory

__all__ = ["NON_GIB_KEYS", "MemoryEstimate", "estimate_memory"]
