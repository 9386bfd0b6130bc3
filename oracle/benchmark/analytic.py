"""The analytic model's own figures for the layer benchmark mode measures: compute time by pass,
stored activation bytes, and one TP all-gather — at exactly the layout that was measured."""

from __future__ import annotations

from dataclasses import dataclass

from ..layout import layout_facts
from ..memory.activations import layer_acts
from ..memory.geometry import geometry
from ..performance.arch import arch_of
from ..performance.calibration import constants
from ..performance.comm import Net
from ..performance.context import E_BYTES
from ..performance.layers import transformer_layer
from ..performance.params import layer_params

# _ctx: the per-layer context exactly as simulate builds it for this layout
from ..performance.simulate import COMPUTE, _ctx
from ..specs import ClusterSpec, EffectiveConfig, ModelArch


@dataclass(frozen=True)
class LayerProjection:
    fwd_ms: float  # compute (GEMM, attention, elementwise, overhead) of the forward
    bwd_ms: float  # ... of the input-grad and weight-grad passes
    act_bytes: float  # activations stored for backward, one micro-batch


def project_layer(model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec, moe: bool) -> LayerProjection:
    """Analytic compute time and stored activations of one dense or MoE layer on one rank. The measured
    layer runs full causal SDPA (`layers.py`), so the analytic one is projected with full attention too:
    their ratio then scales the windowed or chunked projection like for like."""
    a = arch_of(model.model_copy(update={"window_size": None, "attention_chunk_size": None}))
    facts = layout_facts(model, cfg, cluster.world_size)
    ctx = _ctx(a, cfg, cluster, constants(cluster.gpu), facts)
    work = transformer_layer(ctx, moe, layer_params(a, ctx.tp, ctx.ep, ctx.etp, moe))
    acts = layer_acts(geometry(model), cfg.tp, facts.sp, cfg.use_flash_attn, (), cfg.seq_length, cfg.etp,
                      cfg.fp8 is not None)
    tokens = facts.tokens
    return LayerProjection(fwd_ms=sum(work.f[i] for i in COMPUTE),
                           bwd_ms=sum(work.b[i] + work.w[i] for i in COMPUTE),
                           act_bytes=(acts.moe if moe else acts.dense) * tokens)


def tp_bytes(model: ModelArch, cfg: EffectiveConfig) -> int:
    """Bytes of one gathered TP activation [tokens, hidden] (the buffer each SP all-gather fills)."""
    return cfg.mbs * cfg.seq_length // cfg.cp * model.hidden_size * E_BYTES


def project_all_gather(cluster: ClusterSpec, nbytes: int, group: int) -> float:
    """Analytic ms of one all-gather (or reduce-scatter) of `nbytes` over `group` adjacent GPUs."""
    return Net.of(cluster.gpu, cluster.gpus_per_node, constants(cluster.gpu)).all_gather(nbytes, group, 1)
