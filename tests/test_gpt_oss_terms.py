"""GPT-OSS-120B's own terms, derived by hand from the code Megatron runs for it: YaRN's unfused rotary
(Megatron-LM training/arguments.py and Megatron-Bridge utils/fusions.py keep RoPE fusion for plain RoPE only;
megatron-core rope_utils.py `_apply_rotary_pos_emb_bshd`) and the experts' fc2 bias outside TE's op fuser
(megatron-core experts.py `TEGroupedMLP._apply_bias`).

Layout: one node of 8 H100s, TP 1, EP 8, MBS 1, seq 4096, BF16, the all-to-all dispatcher with TE's grouped
GEMM (Megatron-Bridge's H100 preset without its PP). GPT-OSS-120B: H 2880, 64 query heads and 8 key/value
groups of 64, 128 experts (16 per rank), top-4, a bias on every linear, YaRN positions."""

from __future__ import annotations

import pytest

from paratune.oracle.catalog import gpu, model_card
from paratune.oracle.layout import layout_facts
from paratune.oracle.model_shape import model_shape
from paratune.oracle.performance.calibration import constants
from paratune.oracle.performance.constants import EXPERT_BIAS_BYTES, ROPE_UNFUSED_MOVES
from paratune.oracle.performance.host_issue import host_forward_ms
from paratune.oracle.performance.layers import transformer_layer
from paratune.oracle.performance.moe_layer import routed_rows
from paratune.oracle.performance.pipeline import block_weights, layer_context
from paratune.oracle.performance.work import ELEM
from paratune.oracle.specs import ClusterSpec, ModelArch, TrainingArgs, Workload

H100 = gpu("h100-sxm")
C = constants(H100)
T, H, HEADS, GROUPS, DIM, LOCAL = 4096, 2880, 64, 8, 64, 128 // 8


def _layer(model_update: dict | None = None, **training):
    model = ModelArch(**(model_card("gpt-oss-120b") | (model_update or {})))
    args = dict(seq_length=T, global_batch_size=64, micro_batch_size=1, expert_model_parallel_size=8,
                moe_token_dispatcher_type="alltoall", moe_grouped_gemm=True, moe_permute_fusion=True,
                use_distributed_optimizer=True) | training
    cfg = Workload(name="gpt-oss", model=model, training=TrainingArgs(**args)).effective()
    cluster = ClusterSpec(name="h100", num_nodes=1, gpus_per_node=8, gpu=H100, hbm_capacity_gb=80)
    shape = model_shape(model)
    ctx = layer_context(shape, cfg, cluster, C, layout_facts(model, cfg, cluster.world_size))
    return ctx, transformer_layer(ctx, True, block_weights(shape, 1, 1, 8, False, T)[1])


def test_the_model_card_is_the_layer_the_derivation_assumes():
    ctx, _ = _layer()
    a = ctx.shape
    assert (a.h, a.heads, a.groups, a.qk_dim, a.experts, a.bias, a.rotary) == (H, HEADS, GROUPS, DIM, 128, True, True)
    assert not a.rope_fused  # position_embedding_type: yarn
    assert model_shape(ModelArch(**model_card("llama3-8b"))).rope_fused  # plain RoPE keeps TE's fused kernel


def test_yarn_rotary_moves_q_and_k_more_than_the_fused_kernel():
    """Q and K hold T·(64 + 8)·64 = 18,874,368 elements. Unfused, the forward moves each 12 times (t·cos 2,
    negated half 1, its cat 2, ·sin 2, sum 3, final cat 2) against the fused kernel's 2; the backward 14
    (grad·sin 2, negated half 1, chunk's cat 2, grad·cos 2, sum 3, the empty pass-through's zero gradient 1
    and its sum 3) against 4: 10 and 10 extra moves of 2 bytes."""
    yarn, yarn_layer = _layer()
    rope, rope_layer = _layer({"position_embedding_type": "rope"})
    elements = T * (HEADS + GROUPS) * DIM
    assert elements == 18_874_368
    assert yarn_layer.f[ELEM] - rope_layer.f[ELEM] == pytest.approx(10 * elements * 2 / yarn.hbm, rel=1e-9)
    assert yarn_layer.b[ELEM] - rope_layer.b[ELEM] == pytest.approx(10 * elements * 2 / yarn.hbm, rel=1e-9)
    # 12 launches per call (cos, ·mscale, cast, sin, ·mscale, cast and the six above) for Q and for K, where
    # the fused kernel is one launch each: 22 more
    assert host_forward_ms(yarn, True) - host_forward_ms(rope, True) == pytest.approx(22 * C.launch_us * 1e-3)


def test_expert_bias_outside_the_op_fuser_by_hand():
    """R routed rows of H: forward b·p written (2 B), the sum read 2 + 2 and written 2, the cat read and written
    (4): 12 B per element; backward bias grad (grad·p 2 + 2, its row sum 2), probs grad (6), split's cat (4):
    16 B. Under the op fuser the bias rides in fc2's grouped GEMM: none of it. Launches: b·p and the sum for
    each of the 16 local experts and one cat: 33."""
    eager, eager_layer = _layer()
    fused, fused_layer = _layer(use_transformer_engine_op_fuser=True)
    assert eager.unfused_expert_bias and not fused.unfused_expert_bias
    n = routed_rows(eager) * H
    assert eager_layer.f[ELEM] - fused_layer.f[ELEM] == pytest.approx(12 * n / eager.hbm, rel=1e-9)
    assert eager_layer.b[ELEM] - fused_layer.b[ELEM] == pytest.approx(16 * n / eager.hbm, rel=1e-9)
    assert host_forward_ms(eager, True) - host_forward_ms(fused, True) == pytest.approx(
        (2 * LOCAL + 1) * C.launch_us * 1e-3)


def test_no_expert_bias_no_bias_term():
    """A model without linear biases (Qwen3-30B-A3B) pays nothing for it on the same eager path."""
    model = ModelArch(**model_card("qwen3-30b-a3b"))
    cfg = Workload(name="q", model=model, training=TrainingArgs(
        seq_length=T, global_batch_size=64, micro_batch_size=1, expert_model_parallel_size=8,
        moe_token_dispatcher_type="alltoall", moe_grouped_gemm=True, use_distributed_optimizer=True)).effective()
    cluster = ClusterSpec(name="h100", num_nodes=1, gpus_per_node=8, gpu=H100, hbm_capacity_gb=80)
    ctx = layer_context(model_shape(model), cfg, cluster, C, layout_facts(model, cfg, 8))
    assert not ctx.unfused_expert_bias


# ---- the byte counts on megatron-core's own code ---------------------------------------------------------------
# megatron-core 0.16.1 (the tests' pinned wheel) holds the same `_apply_rotary_pos_emb_bshd` and
# `TEGroupedMLP._apply_bias` as 2edffadb52, which Megatron-Bridge's 26.04.01 H100 run used. Every aten op they
# run, forward and backward, is intercepted and the bytes of the full-size tensors it reads and writes summed
# (views move nothing).
_VIEWS = {"view", "_unsafe_view", "slice", "split", "split_with_sizes", "chunk", "narrow", "expand", "unsqueeze",
          "squeeze", "t", "transpose", "permute", "alias", "detach", "as_strided", "select", "unbind", "reshape"}


def _bytes_moved(run, smallest: int) -> int:
    """Bytes read and written by the aten ops `run()` issues, over tensors of at least `smallest` elements."""
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class Moves(TorchDispatchMode):
        total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.overloadpacket.__name__ not in _VIEWS:
                tensors = [x for x in tree_leaves((args, kwargs, out)) if isinstance(x, torch.Tensor)]
                Moves.total += sum(x.numel() * x.element_size() for x in tensors if x.numel() >= smallest)
            return out

    with Moves():
        run()
    return Moves.total


def test_unfused_rotary_moves_on_megatron_core():
    torch = pytest.importorskip("torch")
    rope_utils = pytest.importorskip("megatron.core.models.common.embeddings.rope_utils")
    t = torch.randn(64, 1, 32, 64, dtype=torch.bfloat16, requires_grad=True)  # [s, b, heads, dim]
    freqs = torch.randn(64, 1, 1, 64)
    out: list = []
    fwd = _bytes_moved(lambda: out.append(rope_utils._apply_rotary_pos_emb_bshd(t, freqs, mscale=1.35)),
                       t.numel() // 2)
    grad = torch.randn_like(out[0])
    bwd = _bytes_moved(lambda: out[0].backward(grad), t.numel() // 2)
    assert (fwd / (2 * t.numel()), bwd / (2 * t.numel())) == ROPE_UNFUSED_MOVES


def test_expert_bias_bytes_on_megatron_core():
    torch = pytest.importorskip("torch")
    experts = pytest.importorskip("megatron.core.transformer.moe.experts")
    counts, h = [40, 24, 64], 2048
    rows = sum(counts)
    x = torch.randn(rows, h, dtype=torch.bfloat16, requires_grad=True)
    bias = [torch.randn(h, dtype=torch.bfloat16, requires_grad=True) for _ in counts]
    probs = torch.rand(rows, 1, dtype=torch.bfloat16, requires_grad=True)  # the logits' dtype (router_dtype unset)
    out: list = []
    fwd = _bytes_moved(lambda: out.append(experts.TEGroupedMLP._apply_bias(x, bias, counts, probs)), min(counts) * h)
    grad = torch.randn_like(out[0])
    bwd = _bytes_moved(lambda: out[0].backward(grad), min(counts) * h)
    assert (fwd / (rows * h), bwd / (rows * h)) == EXPERT_BIAS_BYTES
