"""`simulate`: projected time of one training iteration of one layout, and what it is made of.

Per virtual pipeline stage, the forward (F), input-grad backward (B, plus recompute) and weight-grad
(W) times of one micro-batch come from the per-layer work; the schedule simulation turns them into
each pipeline rank's finish time; then each rank pays the data-parallel gradient/parameter traffic
that backward and forward could not hide, and its optimizer step. The iteration is the slowest rank.
The pieces are `pipeline.py`'s, shared with `iteration_bound` and benchmark mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ..layout import layout_facts
from ..model_shape import model_shape
from ..specs import ClusterSpec, EffectiveConfig, ModelArch
from .calibration import Constants, constants
from .context import Ctx
from .flops import model_flops_per_token
from .pipeline import (
    Block,
    Chunk,
    Pipeline,
    block_params,
    blocks,
    chunks,
    dp_and_optimizer,
    layer_context,
    pipeline_ends,
    pipeline_ends_batch,
    rank_chunks,
    rank_params,
    recompute_indices,
    stage_times,
)
from .work import COMPONENTS, ZERO, vadd


@dataclass(frozen=True)
class PerfEstimate:
    iteration_ms: float
    tokens_per_s_per_gpu: float  # GBS·seq / iteration / world
    tflops_per_gpu: float  # model FLOPs (flops.py convention) per GPU per second / 1e12
    mfu: float  # tflops_per_gpu / the GPU's dense peak for the GEMM precision (FP8 peak under FP8)
    breakdown: dict[str, float]  # ms per iteration on the slowest pipeline rank


def simulate(model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec, consts: Constants | None = None, *,
             compute_scale: tuple[tuple[float, float], tuple[float, float]] | None = None) -> PerfEstimate:
    """Projected iteration time, throughput and breakdown of a (legal) layout.

    `compute_scale` ((dense fwd, dense bwd), (MoE fwd, MoE bwd)) multiplies the compute of each
    transformer-layer kind (benchmark mode: measured / analytic); communication stays as projected."""
    (iteration, mine, dp_exposed, opt, bubble), stages, parts, modules, m = _slowest_rank(
        model, cfg, cluster, consts, compute_scale)
    breakdown = _breakdown([stages[i] for i in mine], parts, modules, m, dp_exposed, opt, bubble)
    return _estimate(model, cfg, cluster, iteration, breakdown)


def simulated_tokens_per_s_per_gpu(model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec) -> float:
    """`simulate(...).tokens_per_s_per_gpu` without the breakdown (the search ranks by this alone)."""
    return tokens_per_s_per_gpu(cfg, cluster.world_size, _slowest_rank(model, cfg, cluster, None, None)[0][0])


def simulated_tokens_per_s_per_gpu_batch(model: ModelArch, cfgs: Sequence[EffectiveConfig],
                                         cluster: ClusterSpec) -> list[float]:
    """`simulated_tokens_per_s_per_gpu` of each layout in `cfgs`: the pipeline timelines of the layouts that
    share one program run together over arrays (`pipeline_ends_batch`); the same operations on each layout
    as on one, so the two agree to the last bit."""
    world = cluster.world_size
    prepared = [_prepared(model, cfg, cluster, None, None) for cfg in cfgs]
    ends = pipeline_ends_batch(world, [(x.ctx, cfg, x.pl, x.f, x.b, x.w) for x, cfg in zip(prepared, cfgs)])
    return [tokens_per_s_per_gpu(cfg, world, _slowest(cfg, x, e)[0]) for cfg, x, e in zip(cfgs, prepared, ends)]


class _Prepared(NamedTuple):
    """A layout's pipeline, layer context, virtual stages, blocks, recompute modules and per-stage F, B, W ms."""

    pl: Pipeline
    ctx: Ctx
    stages: tuple[Chunk, ...]
    parts: tuple[Block, ...]
    modules: tuple[int, ...]
    f: tuple[float, ...]
    b: tuple[float, ...]
    w: tuple[float, ...]


def _prepared(model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec, consts: Constants | None,
              compute_scale: tuple[tuple[float, float], tuple[float, float]] | None) -> _Prepared:
    """Everything of a layout the pipeline timeline and the slowest rank read."""
    facts = layout_facts(model, cfg, cluster.world_size)
    pl = Pipeline.of(facts, cfg)
    ctx = layer_context(model_shape(model), cfg, cluster, consts or constants(cluster.gpu), facts)
    stages = chunks(model, facts)
    parts = blocks(ctx, pl.p > 1)
    if compute_scale is not None:
        dense_scale, moe_scale = compute_scale
        parts = (parts[0].rescaled(*dense_scale), parts[1].rescaled(*moe_scale), parts[2], parts[3])
    modules = recompute_indices(facts)
    f, b, w = stage_times(stages, parts, modules)
    return _Prepared(pl, ctx, stages, parts, modules, f, b, w)


def _slowest_rank(model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec, consts: Constants | None,
                  compute_scale: tuple[tuple[float, float], tuple[float, float]] | None) -> tuple:
    """((iteration ms, the slowest rank's stages, its exposed DP ms, optimizer ms, bubble ms), the stages,
    the blocks, the recompute modules, micro-batches) of a layout."""
    x = _prepared(model, cfg, cluster, consts, compute_scale)
    ends = pipeline_ends(x.ctx, cfg, cluster.world_size, x.pl, x.pl.m, x.f, x.b, x.w)
    return _slowest(cfg, x, ends), x.stages, x.parts, x.modules, x.pl.m


def _slowest(cfg: EffectiveConfig, x: _Prepared, ends: tuple[float, ...]) -> tuple:
    """(iteration ms, the slowest rank's stages, its exposed DP ms, optimizer ms, bubble ms) of a layout whose
    pipeline ranks finish at `ends`: each rank then pays its exposed DP traffic and optimizer step."""
    f, b, w, m = x.f, x.b, x.w, x.pl.m
    best = None
    ranks = rank_chunks(x.pl.schedule, x.pl.p, x.pl.V)
    for r, (mine, (dense, expert)) in enumerate(zip(ranks, rank_params(x.stages, block_params(x.parts), ranks))):
        fwd = sum(f[i] for i in mine)
        bwd = sum(b[i] + w[i] for i in mine)
        dp_exposed, opt = dp_and_optimizer(x.ctx, cfg, dense, expert, x.pl, fwd, bwd)
        total = ends[r] + dp_exposed + opt
        if best is None or total > best[0]:
            best = (total, mine, dp_exposed, opt, ends[r] - m * (fwd + bwd))
    assert best is not None  # every layout has a first pipeline rank
    return best


def _breakdown(chunks: list[Chunk], blocks: tuple[Block, ...], modules: tuple[int, ...], m: int, dp_exposed: float,
               opt: float, bubble: float) -> dict[str, float]:
    """Per-iteration ms by component on one rank (compute = gemm + attention + elementwise + overhead)."""
    total, recompute = ZERO, 0.0
    for ch in chunks:
        for k, x in zip(ch.coefficients, blocks):
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
