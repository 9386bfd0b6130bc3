"""The analytic model's own figures for the layer benchmark mode measures: compute time by pass,
stored activation bytes, and one TP all-gather — at exactly the layout that was measured."""

from __future__ import annotations

from dataclasses import dataclass

from ..layout import layout_facts
from ..memory.activations import layer_acts
from ..model_shape import model_shape
from ..performance.calibration import constants
from ..performance.comm import Net
from ..performance.constants import E_BYTES
from ..performance.layers import transformer_layer
from ..performance.pipeline import COMPUTE, block_weights, layer_context
from ..specs import ClusterSpec, EffectiveConfig, ModelArch


@dataclass(frozen=True)
class LayerProjection:
    fwd_ms: float  # compute (GEMM, attention, elementwise, overhead) of the forward
    bwd_ms: float  # ... of the input-grad and weight-grad passes
    act_bytes: float  # activations stored for backward, one micro-batch


def project_layer(model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec, moe: bool) -> LayerProjection:
    """Analytic compute time and stored activations of one dense or MoE layer on one rank. The measured
    layer runs full causal SDPA (`torch_layers.py`), so the analytic one is projected with full attention too:
    their ratio then scales the windowed or chunked projection like for like."""
    a = model_shape(model.model_copy(update={"window_size": None, "attention_chunk_size": None}))
    facts = layout_facts(model, cfg, cluster.world_size)
    ctx = layer_context(a, cfg, cluster, constants(cluster.gpu), facts)  # exactly as simulate builds it
    work = transformer_layer(ctx, moe, block_weights(a, ctx.tp, ctx.etp, ctx.ep, False, ctx.seq)[int(moe)])
    acts = layer_acts(model_shape(model), cfg.tp, facts.sp, cfg.use_flash_attn, (), cfg.seq_length, cfg.etp,
                      cfg.fp8 is not None)
    tokens = facts.tokens
    return LayerProjection(fwd_ms=sum(work.f[i] for i in COMPUTE),
                           bwd_ms=sum(work.b[i] + work.w[i] for i in COMPUTE),
                           act_bytes=(acts.moe if moe else acts.dense) * tokens)


def tp_bytes(model: ModelArch, cfg: EffectiveConfig, world: int) -> int:
    """Bytes of one gathered TP activation [tokens, hidden] (the buffer each SP all-gather fills)."""
    return int(layout_facts(model, cfg, world).tokens) * model.hidden_size * E_BYTES


def project_all_gather(cluster: ClusterSpec, nbytes: int, group: int) -> float:
    """Analytic ms of one all-gather (or reduce-scatter) of `nbytes` over `group` adjacent GPUs."""
    return Net.of(cluster.gpu, cluster.gpus_per_node, constants(cluster.gpu)).all_gather(nbytes, group, 1)
