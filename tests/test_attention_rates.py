"""The attention core at the rates cuDNN publishes (oracle/performance/attention_rates.py): GPT-OSS's
sliding-window layers take the time cuDNN's SDPA training benchmark measured for their very shape, and FP8
attention runs at the benchmark's FP8-over-BF16 speed-up. Expected times are the benchmark's `time_ms`
column (NVIDIA/cudnn-frontend fb682ce benchmark/sdpa_benchmark_training/results, cuDNN 9.22), written here
by hand, not the TFLOP/s the oracle reads."""

from __future__ import annotations

import pytest

from paratune.oracle.catalog import gpu, model_card
from paratune.oracle.layout import layout_facts
from paratune.oracle.model_shape import model_shape
from paratune.oracle.performance.calibration import constants
from paratune.oracle.performance.layers import transformer_layer
from paratune.oracle.performance.pipeline import block_weights, layer_context
from paratune.oracle.performance.work import ATTN
from paratune.oracle.specs import ClusterSpec, ModelArch, TrainingArgs, Workload

GB200 = gpu("gb200")
C = constants(GB200)


def _attention(model: str, mbs: int, fp8: str | None, recipe: str, fp8_dpa: bool, **card: object):
    """(forward, backward) ms of the attention core of one layer (MoE for a MoE model) on a GB200, 4,096 tokens,
    TP 1; `card` overrides model-card entries."""
    spec = ModelArch(**{**model_card(model), **card})
    training = TrainingArgs(seq_length=4096, global_batch_size=64 * mbs, micro_batch_size=mbs,
                            tensor_model_parallel_size=1, use_flash_attn=True, fp8=fp8, fp8_recipe=recipe,
                            fp8_dot_product_attention=fp8_dpa)
    cfg = Workload(name="t", model=spec, training=training).effective()
    cluster = ClusterSpec(name="nvl72", num_nodes=16, gpus_per_node=4, gpu=GB200, hbm_capacity_gb=186)
    ctx = layer_context(model_shape(spec), cfg, cluster, constants(cluster.gpu), layout_facts(spec, cfg, 64))
    moe = bool(ctx.shape.experts)
    w = transformer_layer(ctx, moe, block_weights(ctx.shape, 1, 1, 1, False, 4096)[int(moe)])
    return w.f[ATTN], w.b[ATTN]


def _full_attention(heads: int, mbs: int, head_dim: int, speedup: tuple[float, float]) -> tuple[float, float]:
    """ms of one full causal layer's core by the roofline (`layers._core_attention`): s/2 keys a query, QK^T
    and PV, backward 2.5x, one exponential per score each way at Blackwell's 512 FLOPs' time."""
    scores = mbs * heads * 4096 * 2048
    flops = 2 * scores * (2 * head_dim)
    rate = GB200.bf16_tflops * 1e9 * C.attn_eff
    exps = scores * 512 / (GB200.bf16_tflops * 1e9)
    return flops / (rate * speedup[0]) + exps, 2.5 * flops / (rate * speedup[1]) + exps


@pytest.mark.parametrize(("fp8_dpa", "window_ms"), [
    (True, (0.210, 2.080)),  # gpt_oss/gb200 CSV, data_type mxfp8, 4096 tokens: fwd 0.210 ms, bwd 2.080 ms
    (False, (0.210, 0.465)),  # the same CSV, bfloat16: fwd 0.210 ms, bwd 0.465 ms
])
def test_gpt_oss_window_layers_take_cudnns_measured_time(fp8_dpa, window_ms):
    """GPT-OSS-120B (64 heads of 64 dims) at MBS 4 is the benchmark's shape: batch 2 x 128 heads = 4 x 64
    head-sequences of 4,096 tokens, window 128 (Megatron's window_size 127 plus the query itself). Its MoE
    layers alternate window and full attention, 18 each, so a layer's core is the mean of a window layer at
    the measured time and a full layer by the roofline (at MXFP8's measured speed-up when the attention runs
    in MXFP8: the llama3.1/gb200 CSV, fwd 1685 / 1408 and bwd 1054 / 1148 TFLOP/s)."""
    f, b = _attention("gpt-oss-120b", 4, "hybrid", "mxfp8", fp8_dpa)
    speedup = (1685 / 1408, 1054 / 1148) if fp8_dpa else (1.0, 1.0)
    full_f, full_b = _full_attention(64, 4, 64, speedup)
    lat = C.gemm_latency_us * 1e-3
    window_f, window_b = 2 * (f - lat) - full_f, 2 * (b - 2 * lat) - full_b
    # the CSV's times against its own rounded TFLOP/s: within 1 %
    assert (window_f, window_b) == pytest.approx(window_ms, rel=0.01)


def test_fp8_attention_runs_at_cudnns_measured_speed_up():
    """A dense Llama 3 8B layer (32 heads of 128 dims, full causal) on GB200: FP8 attention under the per-tensor
    recipe is faster than BF16 by cuDNN's measured ratio, 1805 / 1408 forward and 1178 / 1148 backward (the
    llama3.1/gb200 CSV at 4,096 tokens), and without fp8_dot_product_attention the FP8 run's attention is
    BF16's."""
    lat = C.gemm_latency_us * 1e-3
    bf16 = _full_attention(32, 1, 128, (1.0, 1.0))
    fp8 = _full_attention(32, 1, 128, (1805 / 1408, 1178 / 1148))
    assert _attention("llama3-8b", 1, "hybrid", "tensorwise", True) == pytest.approx(
        (fp8[0] + lat, fp8[1] + 2 * lat), rel=1e-9)
    assert _attention("llama3-8b", 1, "hybrid", "tensorwise", False) == pytest.approx(
        (bf16[0] + lat, bf16[1] + 2 * lat), rel=1e-9)
    assert _attention("llama3-8b", 1, None, "delayed", True) == _attention("llama3-8b", 1, None, "delayed", False)


def test_a_window_longer_than_the_published_one_is_costed_per_attended_key():
    """cuDNN publishes a 128-key window alone: GPT-OSS's card with a 1,024-key window (window_size 1023) costs
    its window layers like full attention, per attended key (1024 - 1024·1023 / 8192 = 896.1 keys a query at
    4,096 tokens, against 2,048 for the full layers), BF16 attention."""
    f, b = _attention("gpt-oss-120b", 4, "hybrid", "mxfp8", False, window_size=[1023, 0])
    keys = (2048 + (1024 - 1024 * 1023 / 8192)) / 2  # the mean over the two kinds of layer, 18 each
    scores = 4 * 64 * 4096 * keys
    flops = 2 * scores * (64 + 64)
    rate = GB200.bf16_tflops * 1e9 * C.attn_eff
    exps = scores * 512 / (GB200.bf16_tflops * 1e9)
    lat = C.gemm_latency_us * 1e-3
    assert (f, b) == pytest.approx((flops / rate + exps + lat, 2.5 * flops / rate + exps + 2 * lat), rel=1e-9)
