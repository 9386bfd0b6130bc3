"""Attention kernel rates cuDNN publishes for training: its SDPA training benchmark (NVIDIA/cudnn-frontend
v1.23.0, fb682ce, benchmark/sdpa_benchmark_training/results, cuDNN 9.22 on a GB200 and a GB300), batch 2,
4,096 tokens, top-left causal mask, non-deterministic backward. TFLOP/s by the benchmark's own count:
2·(d_qk + d_v) FLOPs per attended key and query forward, 2.5x that backward (its CSV's time and TFLOP/s agree
on it), the count `layers._core_attention` makes.

Two shapes are published: GPT-OSS's sliding window of 128 keys (128 heads of 64 dims, results/gpt_oss) and
Llama 3.1's full causal attention (64 heads of 128 dims, 8 KV groups, results/llama3.1); Hopper's file
(results/h200_919_only_cudnn, cuDNN 9.19) has neither at 4,096 tokens nor FP8, so Hopper keeps the roofline.
A window of 128 keys leaves each 128-query tile two key tiles, mostly masked, so the kernels run at a tenth
of their full-attention rate, and FP8 backward with a window at a quarter of BF16's (the GB200 figures below).
"""

from __future__ import annotations

from ..specs import EffectiveConfig

# The published window: keys a query sees (Megatron's window_size 127 plus the query). A shorter window still runs
# the same two key tiles per query tile, so it takes the published window's time; a longer one is not published.
WINDOW_KEYS = 128
# GPU family -> DPA dtype -> (forward, backward) TFLOP/s. GB200's figures stand for the Blackwell family
# (B200 has the same die), GB300's for Blackwell Ultra.
WINDOW_128_TFLOPS = {  # results/gpt_oss/gb200/gpt_oss_20260424_100011.csv, gb300/gpt_oss_20260424_100022.csv
    "blackwell": {"bf16": (161.0, 182.0), "fp8": (173.0, 49.0), "mxfp8": (161.0, 41.0)},
    "blackwell-ultra": {"bf16": (167.0, 191.0), "fp8": (203.0, 57.0), "mxfp8": (194.0, 45.0)},
}
FULL_TFLOPS = {  # results/llama3.1/gb200/llama3.1_20260424_100750.csv, gb300/llama3.1_20260424_100757.csv
    "blackwell": {"bf16": (1408.0, 1148.0), "fp8": (1805.0, 1178.0), "mxfp8": (1685.0, 1054.0)},
    "blackwell-ultra": {"bf16": (1703.0, 1248.0), "fp8": (2532.0, 1396.0), "mxfp8": (2272.0, 1143.0)},
}


def dpa_dtype(cfg: EffectiveConfig) -> str:
    """The attention core's dtype: BF16 unless `fp8_dot_product_attention` runs it in FP8 under an FP8 recipe;
    an MXFP8 recipe's attention is MXFP8, the others' per-tensor FP8 (TransformerEngine d0067d0
    pytorch/attention/dot_product_attention/dot_product_attention.py, the linear-by-attention recipe table)."""
    if cfg.fp8 is None or not cfg.fp8_dot_product_attention:
        return "bf16"
    return "mxfp8" if cfg.fp8_recipe == "mxfp8" else "fp8"


def window_rates(family: str, dpa: str) -> tuple[float, float] | None:
    """(forward, backward) FLOPs per ms of the attention of a layer with a window of `WINDOW_KEYS` as cuDNN
    measures it, or None where no figure is published (a window is then costed per attended key at the
    full-attention rate, as is any window longer than the published one)."""
    r = WINDOW_128_TFLOPS.get(family, {}).get(dpa)
    return (r[0] * 1e9, r[1] * 1e9) if r else None


def fp8_speedup(family: str, dpa: str) -> tuple[float, float]:
    """(forward, backward) rate of FP8 attention over BF16 on full causal attention, as cuDNN measures it;
    1 where it is not published (or the attention runs in BF16)."""
    rates = FULL_TFLOPS.get(family, {})
    if dpa == "bf16" or dpa not in rates:
        return 1.0, 1.0
    (f8, b8), (f16, b16) = rates[dpa], rates["bf16"]
    return f8 / f16, b8 / b16
