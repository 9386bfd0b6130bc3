"""`simulate`: projected time of one training iteration of one layout, and what it is made of.

Per virtual pipeline stage, the forward (F), input-grad backward (B, plus recompute) and weight-grad
(W) times of one micro-batch come from the per-layer work; the schedule simulation turns them into
each pipeline rank's finish time; then each rank pays the data-parallel gradient/parameter traffic
that backward and forward could not hide, and its optimizer step. The iteration is the slowest rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..layout import LayoutFacts, layout_facts
from ..memory.state_bytes import grad_bytes
from ..pipeline_split import PipelineSplit, stages_or_spread
from ..specs import ClusterSpec, EffectiveConfig, ModelArch
from .arch import Arch, arch_of
from .calibration import Constants, constants
from .comm import Net
from .context import E_BYTES, Ctx
from .flops import model_flops_per_token
from .layers import embedding, mtp_module, output_head, transformer_layer
from .params import layer_params, vocab_params
from .schedule import rank_end_times, rank_of, virtual_stages
from .work import ATTN, COMPONENTS, ELEM, GEMM, OVH, RECOMPUTE_MODULES, ZERO, Work, vadd

ADAM_BYTES_PER_PARAM = 34.0  # fp32 grad, master, m, v read; master, m, v written; bf16 copy; grad norm
COMPUTE = (GEMM, ATTN, ELEM, OVH)  # the components of a layer's compute (benchmark mode measures these)


@dataclass(frozen=True)
class PerfEstimate:
    iteration_ms: float
    tokens_per_s_per_gpu: float  # GBS·seq / iteration / world
    tflops_per_gpu: float  # model FLOPs (flops.py convention) per GPU per second / 1e12
    mfu: float  # tflops_per_gpu / the GPU's dense peak for the GEMM precision (FP8 peak under FP8)
    breakdown: dict[str, float]  # ms per iteration on the slowest pipeline rank


@dataclass(frozen=True)
class _Chunk:
    """One virtual stage: its layers, those fully recomputed, and whether it holds embedding / head."""

    dense: int
    moe: int
    recompute_dense: int
    recompute_moe: int
    first: bool
    last: bool


@lru_cache(maxsize=4096)
def _chunks(pattern: tuple[int, ...], mtp: int, pp: int, vpp: int, split: PipelineSplit, full: bool,
            block: int | None) -> tuple[_Chunk, ...]:
    """Virtual stages of a model with layer types `pattern` (1 = MoE), as Megatron's split places the
    layers over PP x VPP stages (`stages_or_spread`)."""
    stages = stages_or_spread(len(pattern), mtp, pp, vpp if vpp > 1 else None, split)
    out, start = [], 0
    for k, st in enumerate(stages):
        layers = pattern[start:start + st.decoders]
        start += st.decoders
        redo = (layers if block is None else layers[:block]) if full else ()
        out.append(_Chunk(st.decoders - sum(layers), sum(layers), len(redo) - sum(redo), sum(redo), k == 0,
                          k == len(stages) - 1))
    return tuple(out)


def shards_weights(cfg: EffectiveConfig) -> bool:
    """Whether the weights are sharded and gathered per layer: torch FSDP2, or Megatron-FSDP with
    `optim_grads_params` (ZeRO-3; megatron-core distributed_data_parallel_config.py)."""
    return cfg.use_torch_fsdp2 or (cfg.use_megatron_fsdp and cfg.data_parallel_sharding_strategy == "optim_grads_params")


def _ctx(a: Arch, cfg: EffectiveConfig, cluster: ClusterSpec, c: Constants, facts: LayoutFacts) -> Ctx:
    """What the per-layer work of this layout depends on (not PP, VPP, GBS or recompute); DP, expert-DP
    and SP come from the layout facts, derived once (`oracle/layout.py`)."""
    sharded = shards_weights(cfg)
    dp, edp = facts.dp_or_1, facts.edp_or_1
    return Ctx(
        arch=a, mbs=cfg.mbs, seq=cfg.seq_length, tp=cfg.tp, cp=cfg.cp, ep=cfg.ep if a.experts else 1,
        etp=cfg.etp if a.experts else 1, sp=facts.sp, fp8=cfg.fp8 is not None,
        flash=cfg.use_flash_attn, ce_fusion=cfg.cross_entropy_loss_fusion,
        deepep=cfg.use_turbo_deepep or cfg.moe_token_dispatcher_type == "flex",
        allgather=cfg.moe_token_dispatcher_type == "allgather" and not cfg.use_turbo_deepep,
        tp_overlap=cfg.tp_comm_overlap and cfg.tp > 1, ep_overlap=cfg.overlap_moe_expert_parallel_comm and cfg.ep > 1,
        fsdp=dp * cfg.cp if sharded else 0, fsdp_expert=edp if sharded else 0, grad_bytes=grad_bytes(cfg), gpu=cluster.gpu,
        gpus_per_node=cluster.gpus_per_node, c=c,
    )


@dataclass(frozen=True)
class _Block:
    """A block's work with its per-pass totals, and the weights it holds (dense-sharded, expert)."""

    work: Work
    f: float
    b: float
    w: float
    rec: tuple[float, ...]  # forward ms of each selective-recompute module (RECOMPUTE_MODULES order)
    params: tuple[float, float]

    @classmethod
    def of(cls, work: Work, params: tuple[float, float]) -> "_Block":
        return cls(work, sum(work.f), sum(work.b), sum(work.w), work.rec, params)

    def recompute_ms(self, modules: tuple[int, ...]) -> float:
        """Forward time selective recompute of `modules` (indices) adds to the backward."""
        return sum(self.rec[i] for i in modules)


@lru_cache(maxsize=4096)
def _blocks(ctx: Ctx, mtp: int, last_moe: bool, output_copy: bool) -> tuple[_Block, _Block, _Block, _Block]:
    """(dense layer, MoE layer, embedding, output head + MTP modules) of one micro-batch on one rank."""
    a = ctx.arch
    dense_p = layer_params(a, ctx.tp, ctx.ep, ctx.etp, False)
    moe_p = layer_params(a, ctx.tp, ctx.ep, ctx.etp, True) if a.experts else dense_p
    dense = _Block.of(transformer_layer(ctx, False, dense_p), dense_p)
    moe = _Block.of(transformer_layer(ctx, True, moe_p), moe_p) if a.experts else dense
    vocab = vocab_params(a, ctx.tp)
    head, head_p = output_head(ctx), (vocab if output_copy else 0.0, 0.0)
    if mtp:
        body_p = moe_p if last_moe else dense_p
        head = head + mtp_module(ctx, last_moe, body_p).scaled(mtp)
        head_p = (head_p[0] + mtp * (body_p[0] + 2 * a.h * a.h / ctx.tp), mtp * body_p[1])
    return dense, moe, _Block.of(embedding(ctx), (vocab, 0.0)), _Block.of(head, head_p)


def _rescaled(block: _Block, fwd: float, bwd: float) -> _Block:
    """`block` with its compute components scaled: forward (and its recompute) by `fwd`, backward by `bwd`."""
    def scale(v: tuple[float, ...], k: float) -> tuple[float, ...]:
        return tuple(x * k if i in COMPUTE else x for i, x in enumerate(v))

    w = block.work
    return _Block.of(Work(scale(w.f, fwd), scale(w.b, bwd), scale(w.w, bwd), tuple(x * fwd for x in w.rec)),
                     block.params)


def _coefficients(ch: _Chunk) -> tuple[int, int, int, int]:
    """How many of each block (dense layer, MoE layer, embedding, head) a chunk holds."""
    return ch.dense, ch.moe, int(ch.first), int(ch.last)


def _dp_and_optimizer(ctx: Ctx, cfg: EffectiveConfig, dense: float, expert: float, dp: int, edp: int,
                      fwd: float, bwd: float) -> tuple[float, float]:
    """(exposed data-parallel communication, optimizer step) of one rank, ms per iteration.

    Gradients (FP32, or BF16 with grad_reduce_in_fp32 off) are reduce-scattered (distributed optimizer) or all-reduced over DP·CP for dense
    weights and expert-DP for expert weights; with overlap_grad_reduce the buckets go out during the
    last micro-batch's backward and only what that backward cannot cover (at least the last bucket)
    is exposed; the hidden part still costs `overlap_cost` of its time. The distributed optimizer
    all-gathers BF16 weights, hidden likewise behind the next forward. FSDP moves weights per layer
    (in the layer work) and keeps the optimizer sharded."""
    net, c = ctx.net, ctx.c
    dgroup, egroup = dp * cfg.cp, edp
    if ctx.fsdp:
        return 0.0, _optimizer_ms(ctx, dense, expert, dp, edp, sharded=True)
    distopt = cfg.use_distributed_optimizer or (cfg.use_megatron_fsdp and cfg.data_parallel_sharding_strategy != "no_shard")
    collective = net.reduce_scatter if distopt else net.all_reduce
    g = ctx.grad_bytes  # fp32 or bf16 gradient reduce
    grads = collective(dense * g, dgroup, cfg.tp) + collective(expert * g, egroup, ctx.etp * ctx.ep)
    params = (net.all_gather(dense * 2, dgroup, cfg.tp) + net.all_gather(expert * 2, egroup, ctx.etp * ctx.ep)
              if distopt else 0.0)
    if cfg.overlap_grad_reduce:
        bucket = min(1.0, c.grad_bucket_params / max(1.0, dense + expert))
        exposed = max(bucket * grads, grads - bwd) + max(bucket * params, params - fwd)
        exposed += c.overlap_cost * (grads + params - exposed)
    else:
        exposed = grads + params
    return exposed, _optimizer_ms(ctx, dense, expert, dp, edp, sharded=distopt)


def _optimizer_ms(ctx: Ctx, dense: float, expert: float, dp: int, edp: int, *, sharded: bool) -> float:
    """Adam step of one rank: its dense weights sharded over DP·CP and expert weights over expert-DP
    (distributed optimizer, FSDP), or all of them (plain DDP)."""
    params = dense / (dp * ctx.cp) + expert / edp if sharded else dense + expert
    return params * ADAM_BYTES_PER_PARAM / ctx.hbm


def _p2p(ctx: Ctx, cfg: EffectiveConfig, world: int, schedule: str, V: int) -> tuple[float, ...]:
    """Send/recv time across each virtual-stage boundary (activations, sharded over TP)."""
    return _p2p_times(ctx.net, ctx.tokens * ctx.arch.h * E_BYTES / cfg.tp, world // cfg.pp, ctx.gpus_per_node,
                      schedule, cfg.pp, V)


@lru_cache(maxsize=4096)
def _p2p_times(net: Net, nbytes: float, stride: int, gpn: int, schedule: str, p: int, V: int) -> tuple[float, ...]:
    """`_p2p` of `nbytes` per transfer, pipeline ranks `stride` apart."""
    out = []
    for k in range(V - 1):
        r1, r2 = rank_of(schedule, p, k), rank_of(schedule, p, k + 1)
        out.append(0.0 if r1 == r2 else net.p2p(nbytes, (r1 * stride) // gpn != (r2 * stride) // gpn))
    return tuple(out)


@dataclass(frozen=True)
class _Pipeline:
    """A layout's data-parallel sizes, micro-batches and pipeline shape (v chunks per rank, V stages)."""

    dp: int
    edp: int
    m: int
    schedule: str
    p: int
    v: int
    V: int

    @classmethod
    def of(cls, facts: LayoutFacts, cfg: EffectiveConfig) -> "_Pipeline":
        schedule, p = cfg.pp_schedule, cfg.pp
        v = 2 if schedule == "zbv" else facts.vpp
        return cls(facts.dp_or_1, facts.edp_or_1, facts.microbatches_or_1, schedule, p, v, virtual_stages(schedule, p, v))


def _layout_blocks(model: ModelArch, ctx: Ctx, piped: bool) -> tuple[_Block, _Block, _Block, _Block]:
    """`_blocks` of this model's layers, MTP modules and head, with or without pipeline parallelism."""
    return _blocks(ctx, ctx.arch.mtp_layers, bool(model.moe_layer_pattern[-1]), ctx.arch.untied or piped)


def recompute_indices(cfg: EffectiveConfig) -> tuple[int, ...]:
    """The selective-recompute modules of a layout, as indices into RECOMPUTE_MODULES."""
    return tuple(RECOMPUTE_MODULES.index(m) for m in cfg.recompute_modules or ())


def _stage_times(chunks: tuple[_Chunk, ...], blocks: tuple[_Block, ...],
                 modules: tuple[int, ...]) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
    """Per virtual stage, the F, B (with recompute) and W ms of one micro-batch."""
    times = {ch: _chunk_times(ch, blocks, modules) for ch in set(chunks)}  # chunks repeat: each once
    f, b, w = zip(*(times[ch] for ch in chunks))
    return f, b, w


def _chunk_times(ch: _Chunk, blocks: tuple[_Block, ...], modules: tuple[int, ...]) -> tuple[float, float, float]:
    """F, B (with recompute) and W ms of one micro-batch through one virtual stage."""
    coef = _coefficients(ch)
    f = sum(k * x.f for k, x in zip(coef, blocks))
    b = (sum(k * (x.b + x.recompute_ms(modules)) for k, x in zip(coef, blocks))
         + ch.recompute_dense * blocks[0].f + ch.recompute_moe * blocks[1].f)
    return f, b, sum(k * x.w for k, x in zip(coef, blocks))


def _pipeline_ends(ctx: Ctx, cfg: EffectiveConfig, world: int, pl: _Pipeline, m: int, f: tuple[float, ...],
                   b: tuple[float, ...], w: tuple[float, ...]) -> tuple[float, ...]:
    """When each pipeline rank finishes `m` micro-batches (ms): the schedule simulation, or plain
    back-to-back work without PP."""
    if pl.p == 1:
        return (m * (sum(f) + sum(b) + sum(w)),)
    return rank_end_times(pl.schedule, pl.p, pl.v, m, f, b, w, _p2p(ctx, cfg, world, pl.schedule, pl.V))


@lru_cache(maxsize=4096)
def _rank_params(chunks: tuple[_Chunk, ...], params: tuple[tuple[float, float], ...],
                 ranks: tuple[tuple[int, ...], ...]) -> tuple[tuple[float, float], ...]:
    """(dense-sharded, expert) weights of each rank, from each block's (`params`) and each rank's stages."""
    return tuple((sum(k * x[0] for i in mine for k, x in zip(_coefficients(chunks[i]), params)),
                  sum(k * x[1] for i in mine for k, x in zip(_coefficients(chunks[i]), params))) for mine in ranks)


def simulate(model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec, consts: Constants | None = None, *,
             compute_scale: tuple[tuple[float, float], tuple[float, float]] | None = None) -> PerfEstimate:
    """Projected iteration time, throughput and breakdown of a (legal) layout.

    `compute_scale` ((dense fwd, dense bwd), (MoE fwd, MoE bwd)) multiplies the compute of each
    transformer-layer kind (benchmark mode: measured / analytic); communication stays as projected."""
    world = cluster.world_size
    facts = layout_facts(model, cfg, world)
    pl = _Pipeline.of(facts, cfg)
    ctx = _ctx(arch_of(model), cfg, cluster, consts or constants(cluster.gpu), facts)
    full = cfg.recompute_granularity == "full"
    block = cfg.recompute_num_layers if full and cfg.recompute_method == "block" else None
    chunks = _chunks(model.moe_layer_pattern, model.mtp_num_layers, cfg.pp, pl.v, facts.split, full, block)
    blocks = _layout_blocks(model, ctx, pl.p > 1)
    if compute_scale is not None:
        dense, moe = compute_scale
        blocks = (_rescaled(blocks[0], *dense), _rescaled(blocks[1], *moe), blocks[2], blocks[3])
    modules = recompute_indices(cfg)
    f, b, w = _stage_times(chunks, blocks, modules)
    m = pl.m
    ends = _pipeline_ends(ctx, cfg, world, pl, m, f, b, w)
    best = None
    ranks = _rank_chunks(pl.schedule, pl.p, pl.V)
    for r, (mine, (dense, expert)) in enumerate(zip(ranks, _rank_params(chunks, _params(blocks), ranks))):
        fwd = sum(f[i] for i in mine)
        bwd = sum(b[i] + w[i] for i in mine)
        dp_exposed, opt = _dp_and_optimizer(ctx, cfg, dense, expert, pl.dp, pl.edp, fwd, bwd)
        total = ends[r] + dp_exposed + opt
        if best is None or total > best[0]:
            best = (total, mine, dp_exposed, opt, ends[r] - m * (fwd + bwd))
    iteration, mine, dp_exposed, opt, bubble = best
    breakdown = _breakdown([chunks[i] for i in mine], blocks, modules, m, dp_exposed, opt, bubble)
    return _estimate(model, cfg, cluster, iteration, breakdown)


def _params(blocks: tuple[_Block, ...]) -> tuple[tuple[float, float], ...]:
    """Each block's (dense-sharded, expert) weights."""
    return tuple(x.params for x in blocks)


@lru_cache(maxsize=1024)
def _rank_chunks(schedule: str, p: int, V: int) -> tuple[tuple[int, ...], ...]:
    """Virtual stages held by each pipeline rank."""
    return tuple(tuple(k for k in range(V) if rank_of(schedule, p, k) == r) for r in range(p))


def _breakdown(chunks: list[_Chunk], blocks: tuple[_Block, ...], modules: tuple[int, ...], m: int, dp_exposed: float,
               opt: float, bubble: float) -> dict[str, float]:
    """Per-iteration ms by component on one rank (compute = gemm + attention + elementwise + overhead)."""
    total, recompute = ZERO, 0.0
    for ch in chunks:
        for k, x in zip(_coefficients(ch), blocks):
            if k:
                total = vadd(total, vadd(vadd(x.work.f, x.work.b), x.work.w), k)
                recompute += k * x.recompute_ms(modules)
        recompute += ch.recompute_dense * blocks[0].f + ch.recompute_moe * blocks[1].f
    parts = dict(zip(COMPONENTS, (m * x for x in total)))
    compute = parts["gemm"] + parts["attention"] + parts["elementwise"] + parts["overhead"]
    return {
        "compute": compute, "recompute": m * recompute, "tp_comm": parts["tp_comm"], "cp_comm": parts["cp_comm"],
        "ep_comm": parts["ep_comm"], "fsdp_comm": parts["fsdp_comm"], "dp_comm_exposed": dp_exposed,
        "pp_bubble": max(0.0, bubble), "optimizer": opt, "gemm": parts["gemm"], "attention": parts["attention"],
        "elementwise": parts["elementwise"], "overhead": parts["overhead"],
    }


def _estimate(model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec, iteration_ms: float,
              breakdown: dict[str, float]) -> PerfEstimate:
    tokens = tokens_per_s_per_gpu(cfg, cluster.world_size, iteration_ms)
    tflops = tokens * model_flops_per_token(model, cfg.seq_length) / 1e12
    return PerfEstimate(iteration_ms, tokens, tflops, tflops / cluster.gpu.peak_tflops(cfg.fp8 is not None), breakdown)


def tokens_per_s_per_gpu(cfg: EffectiveConfig, world: int, iteration_ms: float) -> float:
    """GBS·seq / iteration / world."""
    return cfg.gbs * cfg.seq_length / (max(iteration_ms, 1e-9) / 1e3) / world
