"""`simulate`: projected time of one training iteration of one layout, and what it is made of.

Per virtual pipeline stage, the forward (F), input-grad backward (B, plus recompute) and weight-grad
(W) times of one micro-batch come from the per-layer work; the schedule simulation turns them into
each pipeline rank's finish time; then each rank pays the data-parallel gradient/parameter traffic
that backward and forward could not hide, and its optimizer step. The iteration is the slowest rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..layout import data_parallel, expert_data_parallel, num_microbatches, stage_layer_counts
from ..specs import ClusterSpec, EffectiveConfig, ModelArch
from .arch import Arch, arch_of
from .calibration import Constants, constants
from .context import E_BYTES, Ctx
from .flops import model_flops_per_token
from .layers import embedding, mtp_module, output_head, transformer_layer
from .params import layer_params, vocab_params
from .schedule import SPLIT_BACKWARD, rank_end_times, rank_of, virtual_stages
from .work import COMPONENTS, ZERO, Work, vadd

ADAM_BYTES_PER_PARAM = 34.0  # fp32 grad, master, m, v read; master, m, v written; bf16 copy; grad norm


@dataclass(frozen=True)
class PerfEstimate:
    iteration_ms: float
    tokens_per_s_per_gpu: float  # GBS·seq / iteration / world
    tflops_per_gpu: float  # model FLOPs (flops.py convention) per GPU per second / 1e12
    mfu: float  # tflops_per_gpu / the GPU's dense peak for the GEMM precision (FP8 peak under FP8)
    breakdown: dict[str, float]  # ms per iteration on the slowest pipeline rank


@dataclass(frozen=True)
class _Chunk:
    """One virtual stage: its layers and whether it holds the embedding or the output head."""

    dense: int
    moe: int
    recompute_dense: int
    recompute_moe: int
    first: bool
    last: bool


def _chunks(model: ModelArch, cfg: EffectiveConfig, V: int) -> list[_Chunk]:
    pattern = model.moe_layer_pattern
    L = len(pattern)
    counts = stage_layer_counts(L, V) if cfg.vpp == 1 and cfg.pp_schedule != "zbv" else _even(L, V)
    out, start = [], 0
    for k, n in enumerate(counts):
        block = pattern[start:start + n]
        start += n
        moe = sum(block)
        rd, rm = _recomputed(cfg, block)
        out.append(_Chunk(n - moe, moe, rd, rm, k == 0, k == V - 1))
    return out


def _even(layers: int, parts: int) -> tuple[int, ...]:
    """`layers` over `parts` virtual stages as evenly as possible (earlier ones take the remainder)."""
    q, r = divmod(layers, parts)
    return tuple(q + (1 if i < r else 0) for i in range(parts))


def _recomputed(cfg: EffectiveConfig, block: tuple[int, ...]) -> tuple[int, int]:
    """(dense, MoE) layers of a chunk whose whole forward is recomputed (full recompute)."""
    if cfg.recompute_granularity != "full":
        return 0, 0
    if cfg.recompute_method == "block":
        block = block[: cfg.recompute_num_layers or 0]
    moe = sum(block)
    return len(block) - moe, moe


def _ctx(a: Arch, cfg: EffectiveConfig, cluster: ClusterSpec, c: Constants, dp: int) -> Ctx:
    return Ctx(
        arch=a, mbs=cfg.mbs, seq=cfg.seq_length, tp=cfg.tp, cp=cfg.cp, ep=cfg.ep if a.experts else 1,
        etp=cfg.etp if a.experts else 1, sp=cfg.sequence_parallel and cfg.tp > 1, fp8=cfg.fp8 is not None,
        flash=cfg.use_flash_attn, ce_fusion=cfg.cross_entropy_loss_fusion,
        deepep=cfg.use_turbo_deepep, sync_free=cfg.sync_free_stage,
        fsdp=dp * cfg.cp if cfg.use_torch_fsdp2 else 0, gpu=cluster.gpu,
        gpus_per_node=cluster.gpus_per_node, c=c,
    )


def _chunk_work(ctx: Ctx, cfg: EffectiveConfig, ch: _Chunk, mtp: int, last_moe: bool) -> tuple[Work, Work]:
    """(work, recompute work) of one micro-batch through one virtual stage."""
    a = ctx.arch
    dense_p = sum(layer_params(a, cfg.tp, ctx.ep, ctx.etp, False))
    moe_p = sum(layer_params(a, cfg.tp, ctx.ep, ctx.etp, True))
    dense = transformer_layer(ctx, False, dense_p)
    moe = transformer_layer(ctx, True, moe_p) if ch.moe or (ch.last and mtp and last_moe) else dense
    work = dense.scaled(ch.dense) + moe.scaled(ch.moe)
    if ch.first:
        work = work + embedding(ctx)
    if ch.last:
        work = work + output_head(ctx)
        if mtp:
            work = work + mtp_module(ctx, last_moe, moe_p if last_moe else dense_p).scaled(mtp)
    if cfg.recompute_granularity == "selective":
        rc = Work(f=work.sel)
    else:
        rc = Work(f=vadd(vadd(ZERO, dense.f, ch.recompute_dense), moe.f, ch.recompute_moe))
    return work, rc


def _params(a: Arch, cfg: EffectiveConfig, ch: _Chunk, ep: int, etp: int, mtp: int, last_moe: bool) -> tuple[float, float]:
    """(dense-sharded, expert) weights of one virtual stage on one rank."""
    dd, de = layer_params(a, cfg.tp, ep, etp, False)
    md, me = layer_params(a, cfg.tp, ep, etp, True)
    dense = ch.dense * dd + ch.moe * md
    expert = ch.dense * de + ch.moe * me
    if ch.first:
        dense += vocab_params(a, cfg.tp)
    if ch.last and (a.untied or cfg.pp > 1):
        dense += vocab_params(a, cfg.tp)
    if ch.last and mtp:
        dense += mtp * ((md if last_moe else dd) + 2 * a.h * a.h / cfg.tp)
        expert += mtp * (me if last_moe else de)
    return dense, expert


def _dp_and_optimizer(ctx: Ctx, cfg: EffectiveConfig, dense: float, expert: float, dp: int, edp: int,
                      fwd: float, bwd: float) -> tuple[float, float]:
    """(exposed data-parallel communication, optimizer step) of one rank, ms per iteration.

    Gradients (FP32) are reduce-scattered (distributed optimizer) or all-reduced over DP·CP for dense
    weights and expert-DP for expert weights; with overlap_grad_reduce the buckets go out during the
    last micro-batch's backward and only what that backward cannot cover (at least the last bucket)
    is exposed. The distributed optimizer all-gathers BF16 weights, hidden likewise behind the next
    forward. FSDP moves weights per layer (in the layer work) and keeps the optimizer sharded."""
    net, c = ctx.net, ctx.c
    dgroup, egroup = dp * cfg.cp, edp
    if cfg.use_torch_fsdp2:
        exposed = 0.0
        shard = dense / dgroup + expert / egroup
    else:
        distopt = cfg.use_distributed_optimizer
        collective = net.reduce_scatter if distopt else net.all_reduce
        grads = collective(dense * 4, dgroup, cfg.tp) + collective(expert * 4, egroup, ctx.etp * ctx.ep)
        params = (net.all_gather(dense * 2, dgroup, cfg.tp) + net.all_gather(expert * 2, egroup, ctx.etp * ctx.ep)
                  if distopt else 0.0)
        if cfg.overlap_grad_reduce:
            bucket = min(1.0, c.grad_bucket_params / max(1.0, dense + expert))
            exposed = max(bucket * grads, grads - bwd) + max(bucket * params, params - fwd)
        else:
            exposed = grads + params
        shard = dense / dgroup + expert / egroup if distopt else dense + expert
    return exposed, shard * ADAM_BYTES_PER_PARAM / ctx.hbm


def _p2p(ctx: Ctx, cfg: EffectiveConfig, world: int, schedule: str, V: int) -> tuple[float, ...]:
    """Send/recv time across each virtual-stage boundary (activations, sharded over TP)."""
    nbytes = ctx.tokens * ctx.arch.h * E_BYTES / cfg.tp
    stride, gpn = world // cfg.pp, ctx.gpus_per_node
    out = []
    for k in range(V - 1):
        r1, r2 = rank_of(schedule, cfg.pp, k), rank_of(schedule, cfg.pp, k + 1)
        out.append(0.0 if r1 == r2 else ctx.net.p2p(nbytes, (r1 * stride) // gpn != (r2 * stride) // gpn))
    return tuple(out)


def simulate(model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec, consts: Constants | None = None) -> PerfEstimate:
    """Projected iteration time, throughput and breakdown of a (legal) layout."""
    world = cluster.world_size
    c = consts or constants(cluster.gpu)
    a = arch_of(model)
    dp = max(1, data_parallel(cfg, world))
    edp = max(1, expert_data_parallel(cfg, world))
    m = max(1, num_microbatches(cfg, world))
    ctx = _ctx(a, cfg, cluster, c, dp)
    schedule, p = cfg.pp_schedule, cfg.pp
    v = 2 if schedule == "zbv" else cfg.vpp
    V = virtual_stages(schedule, p, v)
    last_moe = bool(model.moe_layer_pattern[-1])
    chunks = _chunks(model, cfg, V)
    works = [_chunk_work(ctx, cfg, ch, a.mtp_layers, last_moe) for ch in chunks]
    f = tuple(sum(w.f) for w, _ in works)
    b = tuple(sum(w.b) + sum(rc.f) for w, rc in works)
    w_ = tuple(sum(w.w) for w, _ in works)
    if p == 1:
        ends = (m * (f[0] + b[0] + w_[0]),)
    else:
        ends = rank_end_times(schedule, p, v, m, f, b, w_, _p2p(ctx, cfg, world, schedule, V))
    best = None
    for r in range(p):
        mine = [k for k in range(V) if rank_of(schedule, p, k) == r]
        dense = expert = 0.0
        for k in mine:
            d, e = _params(a, cfg, chunks[k], ctx.ep, ctx.etp, a.mtp_layers, last_moe)
            dense, expert = dense + d, expert + e
        fwd = sum(f[k] for k in mine)
        bwd = sum(b[k] + w_[k] for k in mine)
        dp_exposed, opt = _dp_and_optimizer(ctx, cfg, dense, expert, dp, edp, fwd, bwd)
        total = ends[r] + dp_exposed + opt
        if best is None or total > best[0]:
            best = (total, r, mine, dp_exposed, opt, ends[r] - m * (fwd + bwd))
    iteration, r, mine, dp_exposed, opt, bubble = best
    breakdown = _breakdown([works[k] for k in mine], m, dp_exposed, opt, bubble)
    return _estimate(model, cfg, cluster, iteration, breakdown)


def _breakdown(works: list[tuple[Work, Work]], m: int, dp_exposed: float, opt: float, bubble: float) -> dict[str, float]:
    total = ZERO
    recompute = 0.0
    for w, rc in works:
        total = vadd(vadd(vadd(total, w.f), w.b), w.w)
        recompute += sum(rc.f)
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
    world = cluster.world_size
    seconds = max(iteration_ms, 1e-9) / 1e3
    tokens = cfg.gbs * cfg.seq_length / seconds / world
    tflops = tokens * model_flops_per_token(model, cfg.seq_length) / 1e12
    return PerfEstimate(iteration_ms, tokens, tflops, tflops / cluster.gpu.peak_tflops(cfg.fp8 is not None), breakdown)
