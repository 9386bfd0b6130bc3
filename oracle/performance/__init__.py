"""The performance half of the oracle: projected time of one training iteration of one layout.

`simulate(model, cfg, cluster)` -> `PerfEstimate` (iteration ms, tokens/s/GPU, model TFLOP/s per GPU,
MFU against the dense peak of the GEMM precision, and a per-component breakdown). Model FLOPs follow
`flops.py` (no recompute, causal attention = half the s² term). Constants: `calibration.yaml`.
"""

from .flops import model_flops_per_token
from .gemm import gemm_backend
from .simulate import PerfEstimate, simulate

__all__ = ["PerfEstimate", "gemm_backend", "model_flops_per_token", "simulate"]
