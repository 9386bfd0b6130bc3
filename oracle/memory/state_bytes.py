"""Bytes per parameter of the model state, by dtype, as Megatron allocates it.

Sources (megatron-core 0.16.1 and Megatron-LM):
- Weights: bf16/fp16, 2 B (`WEIGHT_BYTES`); with FP8 primary weights (`fp8_param_gather`) the linear
  weights are kept in FP8 only (TE issue #1764; Megatron-Bridge docs/performance-guide.md "Keep
  parameters in FP8"): their 2 B bf16 copy goes, the FP8 data + transpose stay (FP8_WEIGHT_COPY_BYTES).
- Main gradients: fp32, 4 B, when `grad_reduce_in_fp32` (Megatron-LM arguments.py promotes
  `accumulate_allreduce_grads_in_fp32` under --bf16 unless --grad-reduce-in-bf16); bf16, 2 B, when
  off (megatron-core DistributedDataParallelConfig.grad_reduce_in_fp32, whose default is False) or when
  the precision-aware optimizer keeps bf16 main grads (`main_grads_dtype`).
- Optimizer: fp32 master weight + Adam m and v, 4 + 4 + 4 B (theoretical_memory_usage.py). With the
  precision-aware optimizer (optimizer_config.py) m and v take `exp_avg_dtype` / `exp_avg_sq_dtype`,
  and the master weight is the 16-bit remainder of the fp32 value (`store_param_remainders`, default
  True with TE >= 2.1: 2 B) or `main_params_dtype` fp16 (2 B).
- Optimizer CPU offload (`optimizer_cpu_offload`, HybridDeviceOptimizer) moves
  `optimizer_offload_fraction` of the optimizer state to host memory.
"""

from __future__ import annotations

from ..specs import EffectiveConfig

_DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


def grad_bytes(cfg: EffectiveConfig) -> int:
    """Bytes of one main-gradient element (what DP reduces)."""
    c = cfg.__dict__
    bf16_main = c["use_precision_aware_optimizer"] and c["main_grads_dtype"] == "bf16"
    return 4 if c["grad_reduce_in_fp32"] and not bf16_main else 2


def optimizer_bytes(cfg: EffectiveConfig) -> float:
    """Bytes of optimizer state per parameter kept on the GPU (master weight, Adam m and v)."""
    c = cfg.__dict__
    if c["use_precision_aware_optimizer"]:
        state = 2 + _DTYPE_BYTES[c["exp_avg_dtype"]] + _DTYPE_BYTES[c["exp_avg_sq_dtype"]]
    else:
        state = 12
    if c["optimizer_cpu_offload"]:
        state *= 1.0 - c["optimizer_offload_fraction"]
    return float(state)
