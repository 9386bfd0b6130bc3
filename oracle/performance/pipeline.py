"""Pipeline assembly: the pieces `simulate`, `iteration_bound` and benchmark mode share to turn one
layout into per-stage and per-rank times.

A layout's per-layer context (`layer_context`), its blocks (dense layer, MoE layer, embedding,
output head with the MTP modules) with the weights each holds (`oracle.param_count`), its virtual
stages (the layout facts' `chunks` with the recompute plan applied), the per-stage F/B/W times, the
schedule simulation's per-rank ends, and each rank's data-parallel traffic and optimizer step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from ..identity_cache import by_identity
from ..layout import LayoutFacts, RecomputePlan, Sharding, StageLayers, layout_facts
from ..memory.state_bytes import grad_bytes
from ..model_shape import ModelShape, model_shape
from ..param_count import edge_params, layer_params
from ..specs import ClusterSpec, EffectiveConfig, ModelArch
from .calibration import Constants, constants
from .comm import Net
from .constants import ADAM_BYTES_PER_PARAM, BF16_BYTES, E_BYTES
from .context import Ctx
from .host_issue import captured
from .layers import embedding, mtp_module, output_head, transformer_layer
from .schedule import rank_end_times, rank_end_times_many, rank_of, timeline_inputs, virtual_stages
from .work import ATTN, ELEM, GEMM, OVH, RECOMPUTE_MODULES, Work

COMPUTE = (GEMM, ATTN, ELEM, OVH)  # the components of a layer's compute (benchmark mode measures these)
Weights = tuple[float, float]  # (dense-sharded, expert) parameters


@dataclass(frozen=True)
class Chunk:
    """One virtual stage as the time model runs it: its layers, those fully recomputed, and whether
    it holds the embedding and the output head."""

    dense: int
    moe: int
    recompute_dense: int
    recompute_moe: int
    first: bool
    last: bool

    @property
    def coefficients(self) -> tuple[int, int, int, int]:
        """How many of each block (dense layer, MoE layer, embedding, head) the chunk holds."""
        return self.dense, self.moe, int(self.first), int(self.last)


@lru_cache(maxsize=4096)
def _chunks(stages: tuple[StageLayers, ...], pattern: tuple[int, ...], rec: RecomputePlan) -> tuple[Chunk, ...]:
    out = []
    for st in stages:
        redo = rec.chunk(pattern, st.start, st.layers)
        out.append(Chunk(st.dense, st.moe, redo.dense, redo.moe, st.has_embedding, st.has_output))
    return tuple(out)


_NO_RECOMPUTE = RecomputePlan(False, None, 0, ())


def chunks(model: ModelArch, facts: LayoutFacts, *, recompute: bool = True) -> tuple[Chunk, ...]:
    """The virtual stages of a layout (the layout facts' stages) with its full-recompute plan applied
    (`RecomputePlan.chunk`: uniform every layer, block the first `recompute_num_layers` of each chunk,
    Primus's recompute_layer_ids the listed ones), or without
    any recompute (`recompute=False`: the search's lower bound)."""
    return _chunks(facts.chunks, model.moe_layer_pattern, facts.recompute if recompute else _NO_RECOMPUTE)


def layer_context(a: ModelShape, cfg: EffectiveConfig, cluster: ClusterSpec, c: Constants, facts: LayoutFacts) -> Ctx:
    """What the per-layer work of this layout depends on (not PP, VPP, GBS or recompute); DP, expert-DP,
    SP and tokens per rank come from the layout facts, derived once (`oracle/layout.py`)."""
    sharded = facts.sharding.weights  # gathered per layer: torch FSDP2, or Megatron-FSDP's optim_grads_params
    dp, edp = facts.dp_or_1, facts.edp_or_1
    legacy = cfg.moe_grouped_gemm and cfg.moe_use_legacy_grouped_gemm
    # the legacy GroupedMLP runs one CUTLASS grouped GEMM on NVIDIA, and one hipBLASLt GEMM per local expert
    # on ROCm (Primus fd1eeab docs/04-technical-guides/moe-training.md: "legacy multi-stream grouped GEMM path")
    per_expert = not cfg.moe_grouped_gemm or (legacy and cluster.gpu.vendor == "amd")
    return Ctx(
        shape=a, mbs=cfg.mbs, seq=cfg.seq_length, tokens=int(facts.tokens), tp=cfg.tp, cp=cfg.cp,
        ep=cfg.ep if a.experts else 1, etp=cfg.etp if a.experts else 1, sp=facts.sp, fp8=cfg.fp8 is not None,
        flash=cfg.use_flash_attn, ce_fusion=cfg.cross_entropy_loss_fusion,
        dispatch=facts.dispatch, grouped_gemm=not per_expert, legacy_grouped=legacy,
        permute_fusion=cfg.moe_permute_fusion, shared_overlap=facts.overlaps.shared_experts,
        sync_free=cfg.sync_free_stage > 0, graphed=captured(cfg.cuda_graph_impl, cfg.cuda_graph_scope),
        tp_overlap=facts.overlaps.tp, ep_overlap=facts.overlaps.ep,
        fsdp=dp * cfg.cp if sharded else 0, fsdp_expert=edp if sharded else 0, grad_bytes=grad_bytes(cfg),
        gpu=cluster.gpu, gpus_per_node=cluster.gpus_per_node, c=c,
    )


@lru_cache(maxsize=4096)
def block_weights(a: ModelShape, tp: int, etp: int, ep: int, piped: bool, seq: int) -> tuple[Weights, ...]:
    """(dense layer, MoE layer, embedding, output head + MTP modules) weights on one rank, from the one
    parameter count (`oracle.param_count`) memory also reads: the head holds the output layer (its own,
    or the tied copy under PP), the final norm, the MTP modules and their embedding copy."""
    dense_l, moe_l = layer_params(a, tp, etp, ep)
    dense = (dense_l.dense, dense_l.expert)
    moe = (moe_l.dense, moe_l.expert) if a.experts else dense
    edge = edge_params(a, tp, etp, ep, piped, seq)
    head = (edge.output + edge.final_norm + edge.mtp.dense + edge.mtp_embedding, edge.mtp.expert)
    return dense, moe, (edge.embedding, 0.0), head


@dataclass(frozen=True)
class Block:
    """A block's work with its per-pass totals, and the weights it holds (dense-sharded, expert)."""

    work: Work
    f: float
    b: float
    w: float
    rec: tuple[float, ...]  # forward ms of each selective-recompute module (RECOMPUTE_MODULES order)
    params: Weights

    @classmethod
    def of(cls, work: Work, params: Weights) -> Block:
        return cls(work, sum(work.f), sum(work.b), sum(work.w), work.rec, params)

    def recompute_ms(self, modules: tuple[int, ...]) -> float:
        """Forward time selective recompute of `modules` (indices) adds to the backward."""
        return sum(self.rec[i] for i in modules)

    def rescaled(self, fwd: float, bwd: float) -> Block:
        """This block with its compute components scaled: forward (and its recompute) by `fwd`, backward by `bwd`."""
        def scale(v: tuple[float, ...], k: float) -> tuple[float, ...]:
            return tuple(x * k if i in COMPUTE else x for i, x in enumerate(v))

        w = self.work
        return Block.of(Work(scale(w.f, fwd), scale(w.b, bwd), scale(w.w, bwd), tuple(x * fwd for x in w.rec)),
                        self.params)


@lru_cache(maxsize=4096)
def _blocks(ctx: Ctx, last_moe: bool, piped: bool) -> tuple[Block, Block, Block, Block]:
    a = ctx.shape
    dense_p, moe_p, emb_p, head_p = block_weights(a, ctx.tp, ctx.etp, ctx.ep, piped, ctx.seq)
    dense = Block.of(transformer_layer(ctx, False, dense_p), dense_p)
    moe = Block.of(transformer_layer(ctx, True, moe_p), moe_p) if a.experts else dense
    head = output_head(ctx)
    if a.mtp_layers:
        head = head + mtp_module(ctx, last_moe, moe_p if last_moe else dense_p).scaled(a.mtp_layers)
    return dense, moe, Block.of(embedding(ctx), emb_p), Block.of(head, head_p)


def blocks(ctx: Ctx, piped: bool) -> tuple[Block, Block, Block, Block]:
    """(dense layer, MoE layer, embedding, output head + MTP modules) of one micro-batch on one rank,
    with or without pipeline parallelism (`piped`: the tied output copy on the last stage)."""
    return _blocks(ctx, ctx.shape.mtp_is_moe, piped)


@dataclass(frozen=True)
class Pipeline:
    """A layout's data-parallel sizes and sharding, micro-batches and pipeline shape (v chunks per rank, V
    stages)."""

    dp: int
    edp: int
    m: int
    schedule: str
    p: int
    v: int
    V: int
    sharding: Sharding
    grad_overlap: bool  # overlap_grad_reduce

    @classmethod
    def of(cls, facts: LayoutFacts, cfg: EffectiveConfig) -> Pipeline:
        schedule, p, v = cfg.pp_schedule, cfg.pp, facts.vpp
        return cls(facts.dp_or_1, facts.edp_or_1, facts.microbatches_or_1, schedule, p, v,
                   virtual_stages(schedule, p, v), facts.sharding, facts.overlaps.grad_reduce)


def recompute_indices(facts: LayoutFacts) -> tuple[int, ...]:
    """The selective-recompute modules of a layout, as indices into RECOMPUTE_MODULES."""
    return tuple(RECOMPUTE_MODULES.index(m) for m in facts.recompute.modules)


def stage_times(chunks: tuple[Chunk, ...], blocks: tuple[Block, ...], modules: tuple[int, ...]
                ) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
    """Per virtual stage, the F, B (with recompute) and W ms of one micro-batch: per distinct chunk (chunks
    repeat: each is timed once), each pass is the sum over the blocks of the chunk's count times the block's
    time, left to right; B adds each block's selective recompute and then the chunk's fully recomputed
    layers' forwards. The search times every point of a layout this way, so the per-block sums are taken
    once per call, not once per chunk."""
    distinct, index = _distinct_chunks(chunks)
    (fd, fm, fe, fh), (wd, wm, we, wh) = ([x.f for x in blocks], [x.w for x in blocks])
    bd, bm, be, bh = [x.b + x.recompute_ms(modules) for x in blocks]
    times = [(d * fd + m * fm + e * fe + h * fh,
              d * bd + m * bm + e * be + h * bh + rd * fd + rm * fm,
              d * wd + m * wm + e * we + h * wh) for d, m, e, h, rd, rm in distinct]
    f, b, w = zip(*(times[i] for i in index))
    return f, b, w


@by_identity(maxsize=4096)
def _distinct_chunks(chunks: tuple[Chunk, ...]) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
    """(each distinct chunk's block counts and fully recomputed dense and MoE layers, each stage's index into
    them) of a layout's stages (`chunks` returns one cached object per plan, so this runs once per object)."""
    index: dict[Chunk, int] = {}
    order = tuple(index.setdefault(ch, len(index)) for ch in chunks)
    return tuple((*ch.coefficients, ch.recompute_dense, ch.recompute_moe) for ch in index), order


def pipeline_ends(ctx: Ctx, cfg: EffectiveConfig, world: int, pl: Pipeline, m: int, f: tuple[float, ...],
                  b: tuple[float, ...], w: tuple[float, ...]) -> tuple[float, ...]:
    """When each pipeline rank finishes `m` micro-batches (ms): the schedule simulation, or plain
    back-to-back work without PP."""
    if pl.p == 1:
        return (m * (sum(f) + sum(b) + sum(w)),)
    return rank_end_times(pl.schedule, pl.p, pl.v, m, f, b, w, p2p_times(ctx, cfg, world, pl))


def pipeline_ends_batch(world: int, layouts: Sequence[tuple[Ctx, EffectiveConfig, Pipeline, tuple[float, ...],
                                                             tuple[float, ...], tuple[float, ...]]]
                        ) -> list[tuple[float, ...]]:
    """`pipeline_ends` of many layouts (each `(ctx, cfg, pl, f, b, w)`, its own micro-batches): the timelines of
    the layouts that share a program (schedule, PP, VPP, micro-batches) run together over arrays
    (`schedule.rank_end_times_many`)."""
    out: list[tuple[float, ...]] = [()] * len(layouts)
    shared: dict[tuple[str, int, int, int], list[int]] = {}
    for i, (ctx, cfg, pl, f, b, w) in enumerate(layouts):
        if pl.p == 1:
            out[i] = pipeline_ends(ctx, cfg, world, pl, pl.m, f, b, w)
        else:
            shared.setdefault((pl.schedule, pl.p, pl.v, pl.m), []).append(i)
    for (schedule, p, v, m), rows in shared.items():
        inputs = [timeline_inputs(schedule, *layouts[i][3:], p2p_times(*layouts[i][:2], world, layouts[i][2]))
                  for i in rows]
        for i, ends in zip(rows, rank_end_times_many(schedule, p, v, m, inputs)):
            out[i] = ends
    return out


def p2p_times(ctx: Ctx, cfg: EffectiveConfig, world: int, pl: Pipeline) -> tuple[float, ...]:
    """Send/recv time across each virtual-stage boundary (activations, sharded over TP)."""
    return _p2p_times(ctx.net, ctx.tokens * ctx.shape.h * E_BYTES / cfg.tp, world // cfg.pp, ctx.gpus_per_node,
                      pl.schedule, cfg.pp, pl.V)


@lru_cache(maxsize=4096)
def _p2p_times(net: Net, nbytes: float, stride: int, gpn: int, schedule: str, p: int, V: int) -> tuple[float, ...]:
    """`_p2p` of `nbytes` per transfer, pipeline ranks `stride` apart."""
    out = []
    for k in range(V - 1):
        r1, r2 = rank_of(schedule, p, k), rank_of(schedule, p, k + 1)
        out.append(0.0 if r1 == r2 else net.p2p(nbytes, (r1 * stride) // gpn != (r2 * stride) // gpn))
    return tuple(out)


@lru_cache(maxsize=1024)
def rank_chunks(schedule: str, p: int, V: int) -> tuple[tuple[int, ...], ...]:
    """Virtual stages held by each pipeline rank."""
    return tuple(tuple(k for k in range(V) if rank_of(schedule, p, k) == r) for r in range(p))


@lru_cache(maxsize=4096)
def rank_params(chunks: tuple[Chunk, ...], params: tuple[Weights, ...], ranks: tuple[tuple[int, ...], ...]
                ) -> tuple[Weights, ...]:
    """(dense-sharded, expert) weights of each rank, from each block's (`params`) and each rank's stages."""
    return tuple((sum(k * x[0] for i in mine for k, x in zip(chunks[i].coefficients, params)),
                  sum(k * x[1] for i in mine for k, x in zip(chunks[i].coefficients, params))) for mine in ranks)


def block_params(parts: tuple[Block, ...]) -> tuple[Weights, ...]:
    """Each block's (dense-sharded, expert) weights."""
    return tuple(x.params for x in parts)


def rank_weights(model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec) -> tuple[Weights, ...]:
    """(dense-sharded, expert) weights each pipeline rank holds, through the same context, blocks and
    stages `simulate` builds (its DP traffic and optimizer step read these)."""
    facts = layout_facts(model, cfg, cluster.world_size)
    pl = Pipeline.of(facts, cfg)
    ctx = layer_context(model_shape(model), cfg, cluster, constants(cluster.gpu), facts)
    parts = blocks(ctx, pl.p > 1)
    return rank_params(chunks(model, facts), block_params(parts), rank_chunks(pl.schedule, pl.p, pl.V))


def dp_and_optimizer(ctx: Ctx, cfg: EffectiveConfig, dense: float, expert: float, pl: Pipeline,
                     fwd: float, bwd: float) -> tuple[float, float]:
    """(exposed data-parallel communication, optimizer step) of one rank, ms per iteration.

    Gradients (FP32, or BF16 with grad_reduce_in_fp32 off) are reduce-scattered (optimizer state sharded,
    `LayoutFacts.sharding`) or all-reduced over DP·CP for dense weights and expert-DP for expert weights; with
    overlap_grad_reduce the buckets go out during the last micro-batch's backward and only what that
    backward cannot cover (at least the last bucket) is exposed; the hidden part still costs
    `overlap_cost` of its time. The distributed optimizer all-gathers BF16 weights, hidden likewise
    behind the next forward. FSDP moves weights per layer (in the layer work) and keeps the optimizer
    sharded."""
    net, c = ctx.net, ctx.c
    dgroup, egroup = pl.dp * cfg.cp, pl.edp
    if ctx.fsdp:
        return 0.0, optimizer_ms(ctx, dense, expert, pl, sharded=True)
    distopt = pl.sharding.optimizer
    collective = net.reduce_scatter if distopt else net.all_reduce
    g = ctx.grad_bytes  # fp32 or bf16 gradient reduce
    grads = collective(dense * g, dgroup, cfg.tp) + collective(expert * g, egroup, ctx.etp * ctx.ep)
    params = (net.all_gather(dense * BF16_BYTES, dgroup, cfg.tp)
              + net.all_gather(expert * BF16_BYTES, egroup, ctx.etp * ctx.ep) if distopt else 0.0)
    if pl.grad_overlap:
        bucket = min(1.0, c.grad_bucket_params / max(1.0, dense + expert))
        exposed = max(bucket * grads, grads - bwd) + max(bucket * params, params - fwd)
        exposed += c.overlap_cost * (grads + params - exposed)
    else:
        exposed = grads + params
    return exposed, optimizer_ms(ctx, dense, expert, pl, sharded=distopt)


def optimizer_ms(ctx: Ctx, dense: float, expert: float, pl: Pipeline, *, sharded: bool) -> float:
    """Adam step of one rank: its dense weights sharded over DP·CP and expert weights over expert-DP
    (distributed optimizer, FSDP), or all of them (plain DDP)."""
    params = dense / (pl.dp * ctx.cp) + expert / pl.edp if sharded else dense + expert
    return params * ADAM_BYTES_PER_PARAM / ctx.hbm
