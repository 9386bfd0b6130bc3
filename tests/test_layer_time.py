"""One dense layer's time terms on an H100, derived by hand from the model's stated rules (the module
docstrings of oracle/performance/gemm.py and layers.py) and the fitted hopper constants, like the
memory tests derive Korthikanti's terms: Llama-3-8B (h 4096, 32 heads, 8 KV groups of 128, SwiGLU MLP
14336, RMSNorm, RoPE, no dropout, no biases), TP 1, CP 1, MBS 1, seq 4096, flash attention, BF16."""

from __future__ import annotations

from math import ceil

import pytest

from paratune.oracle.catalog import gpu, model_card
from paratune.oracle.layout import layout_facts
from paratune.oracle.model_shape import model_shape
from paratune.oracle.performance.calibration import constants
from paratune.oracle.performance.layers import transformer_layer
from paratune.oracle.performance.pipeline import block_weights, layer_context
from paratune.oracle.performance.work import ATTN, ELEM, GEMM, OVH, TP
from paratune.oracle.specs import ClusterSpec, ModelArch, TrainingArgs, Workload

H100 = gpu("h100-sxm")
C = constants(H100)
T = 4096  # tokens of the micro-batch on the rank: MBS 1 x seq 4096 / CP 1
H, HEADS, GROUPS, HEAD, FFN = 4096, 32, 8, 128, 14336


def _gemm(m: int, n: int, k: int) -> float:
    """ms of one BF16 GEMM of these shapes by the roofline's rule. Every m and n below is a multiple of
    256, so a 256x128 tile (relative efficiency 1) covers the output in m·n/32768 tiles; the 128x128
    tile (0.9) needs twice the tiles, e.g. 1024 for 4096x4096, 8 waves of 16384/0.9 against 4 of 32768,
    and never wins. The tiles run in waves over the 132 SMs, each tile 2·256·128·(K + 256 prologue
    steps) FLOPs at gemm_eff of the dense BF16 peak per SM. Compute dominates the HBM traffic for
    all of them (the worst, fc1's data-grad 4096x4096x28672, moves 0.50 GB: 0.21 ms against 1.64 ms)."""
    waves = ceil(m * n / (256 * 128) / H100.num_sms)
    per_sm = H100.bf16_tflops * 1e12 * C.gemm_eff / H100.num_sms  # FLOP/s
    return waves * 2 * 256 * 128 * (k + C.gemm_k_overhead) / per_sm * 1e3 + C.gemm_latency_us * 1e-3


def _layer(gpu_spec=H100, fp8: str | None = None):
    model = ModelArch(**model_card("llama3-8b"))
    training = TrainingArgs(seq_length=4096, global_batch_size=8, micro_batch_size=1, tensor_model_parallel_size=1,
                            use_flash_attn=True, sequence_parallel=False, fp8=fp8)
    cfg = Workload(name="l8", model=model, training=training).effective()
    cluster = ClusterSpec(name="h100", num_nodes=1, gpus_per_node=8, gpu=gpu_spec, hbm_capacity_gb=80)
    ctx = layer_context(model_shape(model), cfg, cluster, C, layout_facts(model, cfg, cluster.world_size))
    return transformer_layer(ctx, False, block_weights(ctx.shape, 1, 1, 1, False, 4096)[0])


def test_the_model_card_is_the_layer_the_derivation_assumes():
    a = model_shape(ModelArch(**model_card("llama3-8b")))
    assert (a.h, a.heads, a.groups, a.head_dim, a.ffn, a.gated) == (H, HEADS, GROUPS, HEAD, FFN, 2)
    assert a.rms and a.rotary and not a.dropout and not a.bias and not a.qk_norm


def test_gemm_terms_of_one_dense_layer():
    work = _layer()
    qkv_n = (HEADS + 2 * GROUPS) * HEAD  # 6144: Q plus K and V of 8 groups
    # (m, n, k) of each linear's forward; its data-grad is (m, k, n) and its weight-grad (k, n, m)
    linears = [(T, qkv_n, H), (T, H, HEADS * HEAD), (T, 2 * FFN, H), (T, H, FFN)]  # QKV, out, fc1, fc2
    assert work.f[GEMM] == pytest.approx(sum(_gemm(m, n, k) for m, n, k in linears), rel=1e-12)
    assert work.b[GEMM] == pytest.approx(sum(_gemm(m, k, n) for m, n, k in linears), rel=1e-12)
    assert work.w[GEMM] == pytest.approx(sum(_gemm(k, n, m) for m, n, k in linears), rel=1e-12)
    # by hand: QKV forward 6 waves (768 tiles), fc1 forward 28 waves (3584 tiles)
    assert _gemm(T, qkv_n, H) == pytest.approx(
        6 * 2 * 32768 * 4352 / (989.4e12 * C.gemm_eff / 132) * 1e3 + 0.004, rel=1e-12)


def test_fp8_casts_write_a_rowwise_and_a_columnwise_copy():
    """Under FP8 each linear's input and output grad are read once (2 B) and written twice, the row-wise copy
    for their own GEMM and the column-wise (transposed) one for the weight-grad GEMM (TE cast_transpose,
    MXFP8's two scalings): 4 B per element; the weight is read and written once, 3 B. The layer's other
    element-wise work is the BF16 layer's, so the difference is the casts alone, at hbm_eff of the HBM."""
    qkv_n = (HEADS + 2 * GROUPS) * HEAD
    linears = [(T, qkv_n, H), (T, H, HEADS * HEAD), (T, 2 * FFN, H), (T, H, FFN)]  # (m, n, k) forward
    hbm = H100.hbm_tb_s * 1e12 * C.hbm_eff / 1e3  # bytes per ms
    bf16, fp8 = _layer(), _layer(fp8="hybrid")
    assert fp8.f[ELEM] - bf16.f[ELEM] == pytest.approx(sum(4 * m * k + 3 * k * n for m, n, k in linears) / hbm,
                                                       rel=1e-9)
    assert fp8.b[ELEM] - bf16.b[ELEM] == pytest.approx(sum(4 * m * n for m, n, _ in linears) / hbm, rel=1e-9)


def test_attention_core_elementwise_and_overhead_terms_of_one_dense_layer():
    work = _layer()
    # flash attention, causal: each query attends s/2 = 2048 keys on average; QK^T and PV over
    # qk 128 + v 128 per head; backward 2.5x; one kernel latency forward, two backward; one softmax
    # exponential per score each way on the special function units, 989 TFLOPS of matmul against 3.9 TFLOPS
    # of them on H100 SXM5 (FlashAttention-3 §3.1): 256 dense BF16 FLOPs' time each
    scores = 1 * HEADS * 4096 * 2048
    flops = 2 * scores * (HEAD + HEAD)
    rate = H100.bf16_tflops * 1e9 * C.attn_eff  # FLOPs per ms
    exps = scores * 256 / (H100.bf16_tflops * 1e9)
    lat = C.gemm_latency_us * 1e-3
    assert (work.f[ATTN], work.b[ATTN]) == pytest.approx(
        (flops / rate + exps + lat, 2.5 * flops / rate + exps + 2 * lat), rel=1e-12)
    hbm = H100.hbm_tb_s * 1e9 * C.hbm_eff  # bytes per ms
    # forward HBM traffic, 2-byte elements: rotary reads and writes Q and K and V's width (48 heads x 128)
    # once, 2·2 B; two RMSNorms read + write (2·4 B) and two residual adds read two, write one (2·6 B)
    # over T x h; SwiGLU reads gate and up and writes one (3·2 B) over T x ffn
    rotary = T * (HEADS + 2 * GROUPS) * HEAD
    norms_residuals = T * H * (2 * 4 + 2 * 6)
    swiglu = 3 * 2 * T * FFN
    assert work.f[ELEM] == pytest.approx((2 * 2 * rotary + norms_residuals + swiglu) / hbm, rel=1e-12)
    # backward: twice the rotary traffic pair (grad in, grad out of each), twice the norm/residual and
    # activation traffic
    assert work.b[ELEM] == pytest.approx((4 * 2 * rotary + 2 * norms_residuals + 2 * swiglu) / hbm, rel=1e-12)
    assert work.w[ELEM] == 0.0
    # host issue (host_issue.py): attention's 9 and the MLP's 5 launches at launch_us each, twice in the
    # backward; the GPU waits only for what the host takes beyond the layer's own GPU time
    host = (9 + 5) * C.launch_us * 1e-3
    gpu_f, gpu_b = sum(work.f) - work.f[OVH], sum(work.b) + sum(work.w) - work.b[OVH]
    assert (work.f[OVH], work.b[OVH]) == pytest.approx((max(0.0, host - gpu_f), max(0.0, 2 * host - gpu_b)), abs=1e-12)
    assert work.f[TP] == work.b[TP] == 0.0  # TP 1: no collectives


def test_softmax_exponentials_cost_what_each_die_issues():
    """The attention core's exponentials on B200 and B300 (the same dense BF16 peak in the catalog, the same
    constants passed): Blackwell's SMs keep 16 MUFU.EX2 per clock against twice Hopper's tensor rate, 512
    dense FLOPs per exponential; Blackwell Ultra doubles the special function units (NVIDIA blog "Making
    Softmax More Efficient with NVIDIA Blackwell Ultra"), 256. So B200's core takes longer than B300's by
    one exponential per score each way at 256 FLOPs' time: 256 / peak per score. AMD publishes no rate:
    MI355X's core is its FLOPs alone."""
    b200, b300, mi355x = gpu("b200"), gpu("b300"), gpu("mi355x")
    assert b200.bf16_tflops == b300.bf16_tflops
    scores = 1 * HEADS * 4096 * 2048
    extra = scores * (512 - 256) / (b200.bf16_tflops * 1e9)
    w200, w300 = _layer(b200), _layer(b300)
    assert (w200.f[ATTN] - w300.f[ATTN], w200.b[ATTN] - w300.b[ATTN]) == pytest.approx((extra, extra), rel=1e-9)
    amd = _layer(mi355x)
    flops = 2 * scores * (HEAD + HEAD)
    lat = C.gemm_latency_us * 1e-3
    assert amd.f[ATTN] == pytest.approx(flops / (mi355x.bf16_tflops * 1e9 * C.attn_eff) + lat, rel=1e-12)
