"""Pipeline assembly: the pieces `simulate`, `iteration_bound` and benchmark mode share to turn one
layout into per-stage and per-rank times.

A layout's per-layer context (`layer_context`), its blocks (dense layer, MoE layer, embedding,
output head with the MTP modules) with the weights each holds (`oracle.param_count`), its virtual
stages (the layout facts' `chunks` with the recompute plan applied), the per-stage F/B/W times, the
schedule simulation's per-rank ends, and each rank's data-parallel traffic and optimizer step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np

from ..identity_cache import by_identity
from ..layout import LayoutFacts, RecomputePlan, Sharding, StageLayers, layout_facts
from ..memory.state_bytes import grad_bytes
from ..model_shape import ModelShape, model_shape
from ..param_count import edge_params, layer_params
from ..specs import ClusterSpec, EffectiveConfig, ModelArch
from .attention_rates import dpa_dtype
from .calibration import Constants, constants
from .comm import Net
from .constants import ADAM_BYTES_PER_PARAM, BF16_BYTES, E_BYTES
from .context import Ctx
from .host_issue import captured
from .layers import embedding, mtp_module, output_head, transformer_layer
from .schedule import rank_end_times, rank_of, virtual_stages
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

    @property
    def counts(self) -> tuple[int, ...]:
        """`coefficients`, then the fully recomputed dense and MoE layers."""
        return *self.coefficients, self.recompute_dense, self.recompute_moe


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


def layer_context(a: ModelShape, cfg: EffectiveConfig, cluster: ClusterSpec, c: Constants, facts: LayoutFacts, *,
                  fsdp: bool = True) -> Ctx:
    """What the per-layer work of this layout depends on (not PP, VPP, GBS or recompute); DP, expert-DP,
    SP and tokens per rank come from the layout facts, derived once (`oracle/layout.py`). `fsdp=False`: as
    if the weights were not sharded per layer (the search's bound). Equal contexts are one object
    (`_context`), so what a context derives (its GEMM backend, network, the caches keyed on it) is derived
    once however many layouts share it."""
    sharded = fsdp and facts.sharding.weights  # gathered per layer: torch FSDP2, or Megatron-FSDP's optim_grads_params
    dp, edp = facts.dp_or_1, facts.edp_or_1
    legacy = cfg.moe_grouped_gemm and cfg.moe_use_legacy_grouped_gemm
    # the legacy GroupedMLP runs one CUTLASS grouped GEMM on NVIDIA, and one hipBLASLt GEMM per local expert
    # on ROCm (Primus fd1eeab docs/04-technical-guides/moe-training.md: "legacy multi-stream grouped GEMM path")
    per_expert = not cfg.moe_grouped_gemm or (legacy and cluster.gpu.vendor == "amd")
    return _context(
        shape=a, mbs=cfg.mbs, seq=cfg.seq_length, tokens=int(facts.tokens), tp=cfg.tp, cp=cfg.cp,
        ep=cfg.ep if a.experts else 1, etp=cfg.etp if a.experts else 1, sp=facts.sp, fp8=cfg.fp8 is not None,
        mxfp8=cfg.fp8 is not None and cfg.fp8_recipe == "mxfp8", dpa=dpa_dtype(cfg),
        flash=cfg.use_flash_attn, ce_fusion=cfg.cross_entropy_loss_fusion,
        dispatch=facts.dispatch, deepep_sms=cfg.moe_deepep_num_sms, hybridep_sms=cfg.moe_hybridep_num_sms,
        grouped_gemm=not per_expert, legacy_grouped=legacy,
        permute_fusion=cfg.moe_permute_fusion, op_fuser=cfg.use_transformer_engine_op_fuser,
        shared_overlap=facts.overlaps.shared_experts,
        sync_free=cfg.sync_free_stage > 0, graphed=captured(cfg.cuda_graph_impl, cfg.cuda_graph_scope),
        tp_overlap=facts.overlaps.tp, ep_overlap=facts.overlaps.ep,
        fsdp=dp * cfg.cp if sharded else 0, fsdp_expert=edp if sharded else 0, grad_bytes=grad_bytes(cfg),
        gpu=cluster.gpu, gpus_per_node=cluster.gpus_per_node, c=c,
    )


_context = lru_cache(maxsize=4096, typed=True)(Ctx)  # one object per distinct context (`layer_context`)


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
    """A block's work with its per-pass totals, and the weights it holds (dense-sharded, expert); `solo`: its
    work where it runs without a combined-1F1B partner (EP overlap: the exchanges exposed; `schedule.py`
    module doc), its forward and backward totals `fs`, `bs`."""

    work: Work
    f: float
    b: float
    w: float
    rec: tuple[float, ...]  # forward ms of each selective-recompute module (RECOMPUTE_MODULES order)
    params: Weights
    solo: Work
    fs: float
    bs: float

    @classmethod
    def of(cls, work: Work, params: Weights, solo: Work | None = None) -> Block:
        alone = work if solo is None else solo
        return cls(work, sum(work.f), sum(work.b), sum(work.w), work.rec, params, alone, sum(alone.f), sum(alone.b))

    def recompute_ms(self, modules: tuple[int, ...]) -> float:
        """Forward time selective recompute of `modules` (indices) adds to the backward."""
        return sum(self.rec[i] for i in modules)

    def rescaled(self, fwd: float, bwd: float) -> Block:
        """This block with its compute components scaled: forward (and its recompute) by `fwd`, backward by `bwd`."""
        def scale(w: Work) -> Work:
            def by(v: tuple[float, ...], k: float) -> tuple[float, ...]:
                return tuple(x * k if i in COMPUTE else x for i, x in enumerate(v))

            return Work(by(w.f, fwd), by(w.b, bwd), by(w.w, bwd), tuple(x * fwd for x in w.rec))

        return Block.of(scale(self.work), self.params, scale(self.solo))


def _works(ctx: Ctx, last_moe: bool, piped: bool) -> tuple[tuple[Work, Weights], ...]:
    """Each block's (work, weights) in context `ctx` (`_blocks`)."""
    a = ctx.shape
    dense_p, moe_p, emb_p, head_p = block_weights(a, ctx.tp, ctx.etp, ctx.ep, piped, ctx.seq)
    if a.experts:
        moe = transformer_layer(ctx, True, moe_p), moe_p
        # A MoE model without dense layers (Mixtral; MTP modules repeat the last layer's kind) has no dense block
        # to time: its slot holds the MoE block, which no stage counts (every `Chunk.dense` is 0): no sum moves.
        dense = (transformer_layer(ctx, False, dense_p), dense_p) if 0 in a.pattern else moe
    else:
        dense = moe = transformer_layer(ctx, False, dense_p), dense_p
    head = output_head(ctx)
    if a.mtp_layers:
        head = head + mtp_module(ctx, last_moe, moe_p if last_moe else dense_p).scaled(a.mtp_layers)
    return dense, moe, (embedding(ctx), emb_p), (head, head_p)


@lru_cache(maxsize=4096)
def _blocks(ctx: Ctx, last_moe: bool, piped: bool) -> tuple[Block, Block, Block, Block]:
    paired = _works(ctx, last_moe, piped)
    solo = _works(replace(ctx, ep_overlap=False), last_moe, piped) if ctx.ep_overlap else paired
    dense, moe, emb, head = (Block.of(work, params, alone) for (work, params), (alone, _) in zip(paired, solo))
    return moe if paired[0] is paired[1] else dense, moe, emb, head  # one block where one layer kind (`_works`)


def paired_passes(ctx: Ctx, piped: bool) -> tuple[tuple[float, float, float], ...]:
    """Each block's F, B and W ms (`Block.f`, `.b`, `.w`) in context `ctx`, without the solo passes `blocks` also
    times under the EP overlap (the search's bound times every op as paired, `bound.py`)."""
    return tuple((sum(x.f), sum(x.b), sum(x.w)) for x, _ in _works(ctx, ctx.shape.mtp_is_moe, piped))


def blocks(ctx: Ctx, piped: bool) -> tuple[Block, Block, Block, Block]:
    """(dense layer, MoE layer, embedding, output head + MTP modules) of one micro-batch on one rank,
    with or without pipeline parallelism (`piped`: the tied output copy on the last stage); under the EP
    overlap each also timed solo, without a combined-1F1B partner (`Block.solo`)."""
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
    paired: bool  # overlap_moe_expert_parallel_comm: Megatron's combined 1F1B (solo warm-up, cool-down: schedule.py)

    @classmethod
    def of(cls, facts: LayoutFacts, cfg: EffectiveConfig) -> Pipeline:
        schedule, p, v = cfg.pp_schedule, cfg.pp, facts.vpp
        return cls(facts.dp_or_1, facts.edp_or_1, facts.microbatches_or_1, schedule, p, v,
                   virtual_stages(schedule, p, v), facts.sharding, facts.overlaps.grad_reduce, facts.overlaps.ep)


def recompute_indices(facts: LayoutFacts) -> tuple[int, ...]:
    """The selective-recompute modules of a layout, as indices into RECOMPUTE_MODULES."""
    return _module_indices(facts.recompute.modules)


@lru_cache(maxsize=256)
def _module_indices(modules: tuple[str, ...]) -> tuple[int, ...]:
    return tuple(RECOMPUTE_MODULES.index(m) for m in modules)


def chunk_times(chunks: tuple[Chunk, ...], f: Sequence[Any], b: Sequence[Any], w: Sequence[Any]
                ) -> tuple[tuple[Any, ...], tuple[Any, ...], tuple[Any, ...]]:
    """Per virtual stage, the F, B and W ms of one micro-batch from each block's (`f`, `b` with its selective
    recompute, `w`): `pass_times` per distinct chunk (chunks repeat: each is timed once)."""
    distinct, index = _distinct_chunks(chunks)
    times = [pass_times(counts, f, b, w) for counts in distinct]
    fs, bs, ws = zip(*(times[i] for i in index))
    return fs, bs, ws


def pass_times(counts: Sequence[Any] | np.ndarray, f: Sequence[Any] | np.ndarray, b: Sequence[Any] | np.ndarray,
               w: Sequence[Any] | np.ndarray) -> tuple[Any, Any, Any]:
    """(F, B, W) ms of one micro-batch through a chunk that holds `counts` (dense, MoE, embedding, head, fully
    recomputed dense, fully recomputed MoE; `Chunk`) of blocks whose passes take `f`, `b` (with its selective
    recompute), `w` (numbers, or numpy arrays with one element per layout): each pass is the sum over the
    blocks of the count times the block's time, left to right; B then adds the recomputed layers' forwards."""
    d, m, e, h, rd, rm = counts
    (fd, fm, fe, fh), (bd, bm, be, bh), (wd, wm, we, wh) = f, b, w
    return (d * fd + m * fm + e * fe + h * fh,
            d * bd + m * bm + e * be + h * bh + rd * fd + rm * fm,
            d * wd + m * wm + e * we + h * wh)


@by_identity(maxsize=4096)
def _distinct_chunks(chunks: tuple[Chunk, ...]) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
    """(each distinct chunk's `counts`, each stage's index into them) of a layout's stages (`chunks` returns one
    cached object per plan, so this runs once per object)."""
    index: dict[Chunk, int] = {}
    order = tuple(index.setdefault(ch, len(index)) for ch in chunks)
    return tuple(ch.counts for ch in index), order


@by_identity(maxsize=4096)
def stage_counts(chunks: tuple[Chunk, ...]) -> np.ndarray:
    """Each `Chunk.counts` (rows) of each virtual stage (columns) of a layout, as floats."""
    return np.array([ch.counts for ch in chunks], dtype=np.float64).T


def pipeline_ends(ctx: Ctx, cfg: EffectiveConfig, world: int, pl: Pipeline, m: int, f: tuple[float, ...],
                  b: tuple[float, ...], w: tuple[float, ...]) -> tuple[float, ...]:
    """When each pipeline rank finishes `m` micro-batches (ms): the schedule simulation, or plain
    back-to-back work without PP."""
    if pl.p == 1:
        return (m * (sum(f) + sum(b) + sum(w)),)
    return rank_end_times(pl.schedule, pl.p, pl.v, m, f, b, w, p2p_times(ctx, cfg, world, pl))


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


@by_identity(maxsize=4096)
def rank_params(chunks: tuple[Chunk, ...], params: tuple[Weights, ...], ranks: tuple[tuple[int, ...], ...]
                ) -> tuple[Weights, ...]:
    """(dense-sharded, expert) weights of each rank, from each block's (`params`) and each rank's stages: once
    per object triple (`chunks`, `block_weights` and `rank_chunks` return one object per plan, sharding and
    pipeline shape; hashing the stages and weights cost more than a search's hits saved)."""
    return tuple((stage_weights(chunks, [x[0] for x in params], mine),
                  stage_weights(chunks, [x[1] for x in params], mine)) for mine in ranks)


def stage_weights(chunks: tuple[Chunk, ...], params: Sequence[Any], mine: tuple[int, ...]) -> Any:
    """Weights held by the stages `mine`, from each block's (`params`): `held`."""
    return held([chunks[i].coefficients for i in mine], params)


def held(counts: Sequence[Sequence[Any]] | np.ndarray, params: Sequence[Any] | np.ndarray) -> Any:
    """Weights held by stages that hold `counts` (per stage, per block: `Chunk.coefficients`) of blocks that
    hold `params` each: counts times weights, summed stage by stage, block by block, left to right.

    On numbers, or on numpy arrays (`counts` (stage, block, ...) times `params` (block, ...), one element per
    layout in the trailing axes) in one pass (`ordered_sum`: the same bits as the sum on numbers; a numpy call
    per term cost a batch of one about 100 calls)."""
    if isinstance(counts, np.ndarray):
        terms = counts * params
        return ordered_sum(terms.reshape(-1, *terms.shape[2:]))
    return sum(k * x for ks in counts for k, x in zip(ks, params))


def ordered_sum(terms: np.ndarray) -> np.ndarray:
    """The sum of `terms` over their first axis, left to right: the last running sum (`np.cumsum`), which adds
    in the order Python's `sum` does (numpy's own sum may pair the terms), so the two give the same bits."""
    return np.cumsum(terms, axis=0)[-1]


def rank_weights(model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec) -> tuple[Weights, ...]:
    """(dense-sharded, expert) weights each pipeline rank holds, through the same context, block weights
    (`block_weights`, as `blocks` holds them) and stages `simulate` builds (its DP traffic and optimizer step
    read these)."""
    facts = layout_facts(model, cfg, cluster.world_size)
    pl = Pipeline.of(facts, cfg)
    ctx = layer_context(model_shape(model), cfg, cluster, constants(cluster.gpu), facts)
    weights = block_weights(ctx.shape, ctx.tp, ctx.etp, ctx.ep, pl.p > 1, ctx.seq)
    return rank_params(chunks(model, facts), weights, rank_chunks(pl.schedule, pl.p, pl.V))


@lru_cache(maxsize=65536)
def dp_traffic(net: Net, distopt: bool, grad_bytes: int, dense: float, expert: float, dgroup: int, tp: int,
               egroup: int, estride: int) -> tuple[float, float]:
    """(gradient reduction, parameter all-gather) ms of one rank's data-parallel traffic per iteration, before
    any overlap: gradients (FP32, or BF16 with grad_reduce_in_fp32 off: `grad_bytes`) are reduce-scattered
    (optimizer state sharded, `distopt`, `LayoutFacts.sharding`) or all-reduced over DP·CP (`dgroup`, stride
    TP) for dense weights and expert-DP (`egroup`, stride ETP·EP) for expert weights; the distributed optimizer
    all-gathers the BF16 weights back."""
    collective = net.reduce_scatter if distopt else net.all_reduce
    grads = collective(dense * grad_bytes, dgroup, tp) + collective(expert * grad_bytes, egroup, estride)
    params = (net.all_gather(dense * BF16_BYTES, dgroup, tp)
              + net.all_gather(expert * BF16_BYTES, egroup, estride) if distopt else 0.0)
    return grads, params


def dp_exposed(grads: Any, params: Any, dense: Any, expert: Any, fwd: Any, bwd: Any, c: Constants) -> Any:
    """The part of one rank's data-parallel traffic (`dp_traffic`) that overlap_grad_reduce leaves exposed, ms
    per iteration (numbers, or numpy arrays with one element per layout): the gradient buckets go out during
    the last micro-batch's backward (`bwd`) and only what it cannot cover (at least the last bucket) is
    exposed; the parameter all-gather hides likewise behind the next forward (`fwd`); the hidden part still
    costs `overlap_cost` of its time. Without the overlap all of it is exposed; FSDP moves weights per layer
    (in the layer work) and has none."""
    bucket = np.minimum(1.0, c.grad_bucket_params / np.maximum(1.0, dense + expert))
    exposed = np.maximum(bucket * grads, grads - bwd) + np.maximum(bucket * params, params - fwd)
    return exposed + c.overlap_cost * (grads + params - exposed)


def optimizer_ms(ctx: Ctx, dense: Any, expert: Any, pl: Pipeline, *, sharded: bool) -> Any:
    """Adam step of one rank: its dense weights sharded over DP·CP and expert weights over expert-DP
    (distributed optimizer, FSDP), or all of them (plain DDP)."""
    return adam_ms(dense, expert, pl.dp * ctx.cp, pl.edp, ctx.hbm, sharded)


def adam_ms(dense: Any, expert: Any, dp_cp: Any, edp: Any, hbm: Any, sharded: bool) -> Any:
    """`optimizer_ms` of weights `dense`, `expert` (numbers, or numpy arrays with one element per layout)
    sharded over `dp_cp` and `edp` or not, at HBM bandwidth `hbm` (bytes per ms)."""
    params = dense / dp_cp + expert / edp if sharded else dense + expert
    return params * ADAM_BYTES_PER_PARAM / hbm
