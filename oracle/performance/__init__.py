"""The performance half of the oracle: projected time of one training iteration of one layout.

`simulate(model, cfg, cluster)` -> `PerfEstimate` (iteration ms, tokens/s/GPU, model TFLOP/s per GPU,
MFU against the dense peak of the GEMM precision, and a per-component breakdown). Model FLOPs follow
`flops.py` (no recompute, causal attention = half the s² term). Constants: `calibration.yaml`.
`iteration_bound(model, cfg, cluster)` bounds the iteration of every feature-knob variant of a layout
from below (bound.py), so searches can skip layouts without simulating them.
"""

from .bound import iteration_bound
from .flops import model_flops_per_token
from .gemm import gemm_backend
from .simulate import PerfEstimate, simulate, tokens_per_s_per_gpu

__all__ = ["PerfEstimate", "gemm_backend", "iteration_bound", "model_flops_per_token", "simulate",
           "tokens_per_s_per_gpu"]
