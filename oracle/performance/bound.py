"""`iteration_bound`: a lower bound on `simulate`'s iteration time of a layout under every recompute
mode and, optionally, every legal setting of its other feature knobs (FP8, MoE dispatcher, TP and EP
communication overlap, DP sharding), so a search can skip whole layouts, or points, whose bound
already loses.

It takes simulate's own steps on the fastest version of each piece, and no step can raise it:
- Blocks: recompute only adds backward work: it is left out. Over the other knobs, FSDP only adds its
  traffic (layers.py): it is set off; FP8, the dispatcher (allgather, all-to-all, DeepEP) and the two
  overlaps can go either way: each block's F, B and W is the least over every setting of each. Stage
  times are sums of these.
- Pipeline ends: up to 3p micro-batches (p = PP) they come from the exact timeline (an op starts when
  its rank is free and its dependency has arrived), which cannot end earlier when an op gets longer;
  the EP overlap's solo warm-up and cool-down ops (`schedule.py`) keep the order and are no shorter, so
  the timeline takes every op as paired.
  Beyond, simulate extrapolates lo + k·Δ from the runs of 2p (lo) and 3p (hi) micro-batches,
  k = (m - 2p)/p > 1, Δ = max(hi - lo, p·work) with work the rank's F, B and W per steady-state micro-batch
  (`schedule.extrapolated`). Since lo + Δ >= hi, that is at least hi + (k-1)·p·work, and both hi and work
  only grow with the ops' times: the bound takes them on the fastest blocks.
- Per rank, the exposed DP traffic (>= 0) is left out and the optimizer step taken sharded (its least).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import product
from typing import NamedTuple

from ..identity_cache import by_identity
from ..layout import DISPATCH_BACKENDS, layout_facts
from ..model_shape import model_shape
from ..specs import ClusterSpec, EffectiveConfig, ModelArch
from .calibration import Constants, constants
from .context import Ctx
from .pipeline import (
    Block,
    Chunk,
    Pipeline,
    block_weights,
    blocks,
    chunk_times,
    chunks,
    layer_context,
    optimizer_ms,
    p2p_times,
    paired_passes,
    pipeline_ends,
    rank_chunks,
    rank_params,
)
from .schedule import rank_end_times_batch, rank_work, timeline_inputs

ROUNDING = 1e-9  # relative margin: the bound sums in another order than simulate


@dataclass(frozen=True)
class KnobVariants:
    """The feature-knob settings a layout's bound ranges over: by default every one; a search whose
    rules allow fewer (e.g. FP8 kept off) passes those, which gives a tighter bound that still holds
    for each of its points."""

    fp8: tuple[bool, ...] = (False, True)
    dispatch: tuple[str, ...] = DISPATCH_BACKENDS  # `LayoutFacts.dispatch` values
    tp_overlap: tuple[bool, ...] = (False, True)
    ep_overlap: tuple[bool, ...] = (False, True)


EVERY_VARIANT = KnobVariants()


def iteration_bound(model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec, consts: Constants | None = None,
                    *, any_knobs: bool = True, variants: KnobVariants = EVERY_VARIANT) -> float:
    """A lower bound on `simulate(model, c, cluster, consts).iteration_ms` for every legal `c` that differs
    from `cfg` only in recompute or, with `any_knobs`, in any feature knob (also FP8, MoE backend,
    dispatcher, communication overlaps and DP sharding) within `variants`: a batch of one
    (`iteration_bounds`)."""
    return iteration_bounds(model, (cfg,), cluster, consts, any_knobs=any_knobs, variants=variants)[0]


Times = tuple[tuple[float, float, float], ...]  # per block (dense layer, MoE layer, embedding, head): F, B, W ms


class _Parts(NamedTuple):
    """What the bound of one layout needs besides its pipeline ends."""

    pl: Pipeline
    ctx: Ctx
    cfg: EffectiveConfig
    f: tuple[float, ...]
    b: tuple[float, ...]
    w: tuple[float, ...]
    weights: tuple[tuple[float, float], ...]


def iteration_bounds(model: ModelArch, cfgs: Sequence[EffectiveConfig], cluster: ClusterSpec,
                     consts: Constants | None = None, *, any_knobs: bool = True,
                     variants: KnobVariants = EVERY_VARIANT) -> list[float]:
    """`iteration_bound` of each layout in `cfgs`; the pipeline timelines of the layouts that share one
    (schedule, PP, VPP, micro-batches) run together, over arrays (`schedule.rank_end_times_batch`)."""
    world = cluster.world_size
    parts = [_parts(model, cfg, cluster, consts, any_knobs, variants) for cfg in cfgs]
    ends: list[tuple[float, ...]] = [()] * len(parts)
    timelines: dict[tuple[str, int, int, int], list[int]] = {}
    for i, x in enumerate(parts):
        if x.pl.p == 1:
            ends[i] = pipeline_ends(x.ctx, x.cfg, world, x.pl, x.pl.m, x.f, x.b, x.w)
        else:  # beyond 3p micro-batches, the ends of 3p are extrapolated (module doc)
            timelines.setdefault((x.pl.schedule, x.pl.p, x.pl.v, min(x.pl.m, 3 * x.pl.p)), []).append(i)
    for (schedule, p, v, m), rows in timelines.items():
        inputs = [timeline_inputs(schedule, parts[i].f, parts[i].b, parts[i].w,
                                  p2p_times(parts[i].ctx, parts[i].cfg, world, parts[i].pl)) for i in rows]
        for i, e in zip(rows, rank_end_times_batch(schedule, p, v, m, inputs)):
            x = parts[i]
            ends[i] = e if x.pl.m <= 3 * p else extrapolation_bound(schedule, p, v, x.pl.m, e, x.f, x.b, x.w)
    return [(1 - ROUNDING) * max(end + optimizer_ms(x.ctx, dense, expert, x.pl, sharded=True)
                                 for end, (dense, expert) in zip(e, x.weights)) for x, e in zip(parts, ends)]


class _Setup(NamedTuple):
    """A layout's pipeline, layer context, fastest (or own) block times, stage plan and block weights: what both
    bounds start from."""

    pl: Pipeline
    ctx: Ctx
    times: Times
    stages: tuple[Chunk, ...]
    weights: tuple[tuple[float, float], ...]


def _setup(model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec, consts: Constants | None, any_knobs: bool,
           variants: KnobVariants) -> _Setup:
    """The fastest blocks (with `any_knobs`; else the layout's own) and the stages without recompute (module doc)."""
    facts = layout_facts(model, cfg, cluster.world_size)
    pl = Pipeline.of(facts, cfg)
    # with any knobs FSDP is off; FP8, dispatcher and overlaps are tried in `_fastest_times`
    ctx = layer_context(model_shape(model), cfg, cluster, consts or constants(cluster.gpu), facts, fsdp=not any_knobs)
    times = _fastest_times(ctx, variants) if any_knobs else _block_times(blocks(ctx, pl.p > 1))
    stages = chunks(model, facts, recompute=False)  # recompute only adds work: the bound leaves it out
    weights = block_weights(ctx.shape, ctx.tp, ctx.etp, ctx.ep, pl.p > 1, ctx.seq)  # the blocks' (`pipeline._blocks`)
    return _Setup(pl, ctx, times, stages, weights)


def _parts(model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec, consts: Constants | None, any_knobs: bool,
           variants: KnobVariants) -> _Parts:
    """The fastest blocks' stage times and each rank's weights of one layout (module doc)."""
    pl, ctx, times, stages, weights = _setup(model, cfg, cluster, consts, any_knobs, variants)
    f, b, w = _stage_times(stages, times)
    return _Parts(pl, ctx, cfg, f, b, w, rank_params(stages, weights, rank_chunks(pl.schedule, pl.p, pl.V)))


def mean_rank_bounds(model: ModelArch, cfgs: Sequence[EffectiveConfig], cluster: ClusterSpec,
                     consts: Constants | None = None, *, variants: KnobVariants = EVERY_VARIANT) -> list[float]:
    """A lower bound on `iteration_bounds(..., any_knobs=True)` of each layout that runs no pipeline timeline, for a
    search to rule most layouts out before it takes theirs: the slowest rank's end plus optimizer step is at least
    the ranks' mean, and a rank that runs its ops one at a time ends no earlier than m times its work per
    micro-batch (the floor `schedule.extrapolated` keeps), so the iteration takes at least (m·the blocks' total
    F, B and W + the optimizer step of all the ranks' weights) / p; equal to the timeline's bound without PP."""
    out = []
    for cfg in cfgs:
        pl, ctx, times, stages, weights = _setup(model, cfg, cluster, consts, True, variants)
        counts = _block_counts(stages)
        work = sum(n * (f + b + w) for n, (f, b, w) in zip(counts, times))
        dense = sum(n * x[0] for n, x in zip(counts, weights))
        expert = sum(n * x[1] for n, x in zip(counts, weights))
        out.append((1 - ROUNDING) * (pl.m * work + optimizer_ms(ctx, dense, expert, pl, sharded=True)) / pl.p)
    return out


@by_identity(maxsize=4096)
def _block_counts(stages: tuple[Chunk, ...]) -> tuple[int, ...]:
    """How many of each block (dense layer, MoE layer, embedding, head) all the stages hold together."""
    return tuple(sum(column) for column in zip(*(ch.coefficients for ch in stages)))


@by_identity(maxsize=16384)
def _stage_times(stages: tuple[Chunk, ...], times: Times
                 ) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
    """Per stage, the F, B and W ms of one micro-batch of blocks that take `times` (`chunk_times`, no recompute),
    once per (stage plan, times) object pair (`chunks`, `_fastest_times` and `_block_times` return one object per
    plan, context and blocks; layouts that differ in their schedule, micro-batches or PP alone share them)."""
    f, b, w = zip(*times)
    return chunk_times(stages, f, b, w)


@by_identity(maxsize=4096)
def _block_times(parts: tuple[Block, ...]) -> Times:
    """Each block's F, B and W ms (`Times`), one object per blocks object."""
    return tuple((x.f, x.b, x.w) for x in parts)


@lru_cache(maxsize=4096)
def _fastest_times(ctx: Ctx, variants: KnobVariants) -> Times:
    """Per block, the least F, B and W over the `variants` of FP8, the dispatcher (allgather, all-to-all, DeepEP)
    and the TP and EP overlaps (where they apply) in context `ctx`, no recompute: the same with and without PP
    (which changes the edge blocks' weights alone, `pipeline.block_weights`)."""
    fp8s = tuple(f for f in variants.fp8 if ctx.gpu.has_fp8 or not f) or (False,)
    dispatch = variants.dispatch if ctx.ep > 1 else (ctx.dispatch,)
    tp_overlaps = variants.tp_overlap if ctx.tp > 1 else (False,)
    ep_overlaps = variants.ep_overlap if ctx.ep > 1 else (False,)
    every = [paired_passes(ctx.replaced(fp8=fp8, dispatch=d, tp_overlap=tpo, ep_overlap=epo), False)
             for fp8, d, tpo, epo in product(fp8s, dispatch, tp_overlaps, ep_overlaps)]
    return tuple((min(x[0] for x in versions), min(x[1] for x in versions), min(x[2] for x in versions))
                 for versions in zip(*every))


def extrapolation_bound(schedule: str, p: int, v: int, m: int, hi: tuple[float, ...], f: tuple[float, ...],
                        b: tuple[float, ...], w: tuple[float, ...]) -> tuple[float, ...]:
    """Per rank, a lower bound on `rank_end_times` of m > 3p micro-batches from `hi`, its exact ends of 3p:
    hi + (k-1)·p·work (module docstring; `schedule.extrapolated`), work = the rank's F, B and W per micro-batch."""
    k = (m - 2 * p) / p
    durations, _ = timeline_inputs(schedule, f, b, w, ())
    return tuple(end + (k - 1) * p * work for end, work in zip(hi, rank_work(schedule, p, v, durations)))
