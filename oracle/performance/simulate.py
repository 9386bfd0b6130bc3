"""`simulate`: projected time of one training iteration of one layout, and what it is made of.

Per virtual pipeline stage, the forward (F), input-grad backward (B, plus recompute) and weight-grad
(W) times of one micro-batch come from the per-layer work; the schedule simulation turns them into
each pipeline rank's finish time; then each rank pays the data-parallel gradient/parameter traffic
that backward and forward could not hide, and its optimizer step. The iteration is the slowest rank.
The pieces are `pipeline.py`'s, shared with `iteration_bound` and benchmark mode.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

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
    adam_ms,
    blocks,
    chunks,
    dp_exposed,
    dp_traffic,
    held,
    layer_context,
    ordered_sum,
    p2p_times,
    pass_times,
    rank_chunks,
    recompute_indices,
    stage_counts,
)
from .schedule import extrapolated, rank_end_times_arrays, timeline_inputs
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
    """Projected iteration time, throughput and breakdown of a (legal) layout: a batch of one (`_slowest_ranks`).

    `compute_scale` ((dense fwd, dense bwd), (MoE fwd, MoE bwd)) multiplies the compute of each
    transformer-layer kind (benchmark mode: measured / analytic); communication stays as projected."""
    x = _prepared(model, cfg, cluster, consts, compute_scale)
    s = _slowest_ranks([x], cluster.world_size)
    mine = rank_chunks(x.pl.schedule, x.pl.p, x.pl.V)[int(s.rank[0])]
    breakdown = _breakdown([x.stages[i] for i in mine], x.parts, x.modules, x.pl.m, float(s.dp_exposed[0]),
                           float(s.opt[0]), float(s.bubble[0]))
    return _estimate(model, cfg, cluster, float(s.iteration[0]), breakdown)


def simulated_tokens_per_s_per_gpu(model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec) -> float:
    """`simulate(...).tokens_per_s_per_gpu` without the breakdown (the search ranks by this alone): a batch of
    one."""
    return simulated_tokens_per_s_per_gpu_batch(model, [cfg], cluster)[0]


def simulated_tokens_per_s_per_gpu_batch(model: ModelArch, cfgs: Sequence[EffectiveConfig], cluster: ClusterSpec,
                                         same: Sequence[Hashable] | None = None) -> list[float]:
    """`simulate(...).tokens_per_s_per_gpu` of each layout in `cfgs`, computed over arrays (`_slowest_ranks`).

    `same` (the sweep's): one key per layout, equal only where two layouts differ in their recompute knobs
    alone; those share their pipeline, layer context and blocks, built once (none of them reads recompute)."""
    world = cluster.world_size
    shared: dict[Hashable, tuple[Pipeline, Ctx, tuple[Block, ...]]] = {}
    keys = range(len(cfgs)) if same is None else same
    iteration = _slowest_ranks([_prepared(model, cfg, cluster, None, None, shared, k) for cfg, k in zip(cfgs, keys)],
                               world).iteration
    tokens = np.array([cfg.gbs * cfg.seq_length for cfg in cfgs], dtype=np.int64)
    return rate(tokens, world, iteration).tolist()


class _Prepared(NamedTuple):
    """A layout's pipeline, layer context, virtual stages, blocks and recompute modules."""

    pl: Pipeline
    ctx: Ctx
    cfg: EffectiveConfig
    stages: tuple[Chunk, ...]
    parts: tuple[Block, ...]
    modules: tuple[int, ...]


def _prepared(model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec, consts: Constants | None,
              compute_scale: tuple[tuple[float, float], tuple[float, float]] | None,
              shared: dict[Hashable, tuple[Pipeline, Ctx, tuple[Block, ...]]] | None = None, key: Hashable = 0
              ) -> _Prepared:
    """Everything of a layout the pipeline timeline and the slowest rank read; its pipeline, layer context and
    blocks are `shared[key]` where a layout that differs from it in recompute alone has built them."""
    facts = layout_facts(model, cfg, cluster.world_size)
    hit = shared.get(key) if shared is not None else None
    if hit is None:
        pl = Pipeline.of(facts, cfg)
        ctx = layer_context(model_shape(model), cfg, cluster, consts or constants(cluster.gpu), facts)
        parts: tuple[Block, ...] = blocks(ctx, pl.p > 1)
        if compute_scale is not None:
            dense_scale, moe_scale = compute_scale
            parts = (parts[0].rescaled(*dense_scale), parts[1].rescaled(*moe_scale), parts[2], parts[3])
        hit = (pl, ctx, parts)
        if shared is not None:
            shared[key] = hit
    return _Prepared(hit[0], hit[1], cfg, chunks(model, facts), hit[2], recompute_indices(facts))


class _Slowest(NamedTuple):
    """Per layout (arrays): the iteration ms (its slowest rank's), that rank, its exposed DP ms, optimizer ms and
    bubble ms."""

    iteration: np.ndarray
    rank: np.ndarray
    dp_exposed: np.ndarray
    opt: np.ndarray
    bubble: np.ndarray


def _slowest_ranks(xs: Sequence[_Prepared], world: int) -> _Slowest:
    """The slowest pipeline rank of each layout: each rank finishes its timeline (`rank_end_times_arrays`), then
    pays its exposed DP traffic and its optimizer step; the iteration is the slowest rank (the first one of
    equal ends).

    Over arrays: the layouts with one program shape (schedule, PP, VPP: `_Shape`) share their per-stage and
    per-rank sums, taken once per distinct (blocks, stage plan, recompute modules) (`blocks` and `chunks`
    return one object per context and plan); the timelines of one program run together. Every layout takes
    the same operations in the same order as a batch of one, so a batch agrees with `simulate` to the last
    bit."""
    shapes: dict[tuple, list[int]] = {}
    for i, x in enumerate(xs):
        shapes.setdefault((x.pl.schedule, x.pl.p, x.pl.v, x.pl.paired), []).append(i)
    out = np.empty((5, len(xs)))
    todo = [_Shape.of([xs[i] for i in rows], world) for rows in shapes.values()]
    timelines: dict[tuple[str, int, int, bool, int], list[tuple[_Shape, np.ndarray]]] = {}
    for shape in todo:
        for m, us in shape.timelines():
            timelines.setdefault((shape.schedule, shape.p, shape.v, shape.paired, m), []).append((shape, us))
    for (schedule, p, v, paired, m), jobs in timelines.items():
        durations = np.concatenate([shape.durations[:, us] for shape, us in jobs], axis=1)
        edges = np.concatenate([shape.edges[:, us] for shape, us in jobs], axis=1)
        ends = rank_end_times_arrays(schedule, p, v, m, durations, edges, paired)
        at = 0
        for shape, us in jobs:
            shape.ends[m] = np.zeros((p, shape.columns))
            shape.ends[m][:, us] = ends[:, at:at + len(us)]
            at += len(us)
    for rows, shape in zip(shapes.values(), todo):
        out[:, rows] = shape.slowest()
    return _Slowest(out[0], out[1].astype(np.int64), out[2], out[3], out[4])


class _Shape:
    """Layouts with one program shape (schedule, PP, VPP, EP overlap's pairing): the per-stage F, B, W (and the
    solo F, B of the ops without a combined-1F1B partner, `schedule.py`) and per-rank sums of their distinct
    (blocks, stage plan, recompute modules) (columns), and what each layout adds (DP, optimizer)."""

    def __init__(self, xs: Sequence[_Prepared], world: int, reps: list[_Prepared], which: np.ndarray) -> None:
        x = xs[0]
        self.xs, self.which, self.reps, self.columns = xs, which, reps, len(reps)
        self.schedule, self.p, self.v, self.V, self.paired = x.pl.schedule, x.pl.p, x.pl.v, x.pl.V, x.pl.paired
        ranks = np.array(rank_chunks(self.schedule, self.p, self.V))  # the stages of each rank (rows)
        # per block (rows): each column's F, B with its recompute, W, dense weights, expert weights, and solo F, B
        table = np.array([[(b.f, b.b + rec, b.w, *b.params, b.fs, b.bs + rec)
                           for b in y.parts for rec in (b.recompute_ms(y.modules),)] for y in reps]).transpose(1, 2, 0)
        counts = np.array([stage_counts(y.stages) for y in reps]).transpose(1, 2, 0)  # (count, stage, column)
        f, b, w = pass_times(counts, table[:, 0], table[:, 1], table[:, 2])
        self.f, self.b, self.w = tuple(f), tuple(b), tuple(w)
        self.fs, self.bs = self.f, self.b  # without the EP overlap no pass runs solo
        if self.paired:
            fs, bs, _ = pass_times(counts, table[:, 5], table[:, 6], table[:, 2])
            self.fs, self.bs = tuple(fs), tuple(bs)
        mine = ranks.T  # per position on a rank: each rank's stage there
        self.fwd = ordered_sum(f[mine])  # (rank, column): each rank's stages' F, summed position by position
        self.bwd = ordered_sum((b + w)[mine])
        held_counts = counts[:4, mine].transpose(1, 0, 2, 3)  # (position on a rank, block, rank, column)
        self.dense, self.expert = (held(held_counts, table[:, k, None, :]) for k in (3, 4))
        self.m = np.array([y.pl.m for y in xs], dtype=np.int64)
        self.ends: dict[int, np.ndarray] = {}
        self.durations = self.edges = np.empty((0, 0))
        if self.p > 1:  # each column's `timeline_inputs`
            p2p_of: dict[tuple[int, int], tuple[float, ...]] = {}  # per (context, pipeline) object: its p2p times
            for y in reps:
                if (id(y.ctx), id(y.pl)) not in p2p_of:
                    p2p_of[id(y.ctx), id(y.pl)] = p2p_times(y.ctx, y.cfg, world, y.pl)
            p2p = np.array([p2p_of[id(y.ctx), id(y.pl)] for y in reps]).T
            solo = (self.fs, self.bs) if self.paired else None
            durations, edges = timeline_inputs(self.schedule, self.f, self.b, self.w, tuple(p2p), solo)
            self.durations, self.edges = np.empty((len(durations), len(reps))), np.empty((len(edges), len(reps)))
            for into, rows in ((self.durations, durations), (self.edges, edges)):
                for i, row in enumerate(rows):
                    into[i] = row

    @classmethod
    def of(cls, xs: Sequence[_Prepared], world: int) -> _Shape:
        """The shape of `xs` (one schedule, PP and VPP): their distinct (blocks, stage plan, recompute modules)."""
        index: dict[tuple, int] = {}
        reps: list[_Prepared] = []
        which = []
        for x in xs:
            u = index.setdefault((id(x.parts), id(x.stages), x.modules), len(reps))
            if u == len(reps):
                reps.append(x)
            which.append(u)
        return cls(xs, world, reps, np.array(which, dtype=np.int64))

    def timelines(self) -> list[tuple[int, np.ndarray]]:
        """(micro-batches, the columns that run them) of the timelines the layouts need: their own m up to 3p, else
        those of 2p and 3p (`schedule.extrapolated` beyond)."""
        if self.p == 1:
            return []
        p, m, which = self.p, self.m, self.which
        big = m > 3 * p
        runs = {int(k): which[m == k] for k in np.unique(m[~big])}
        if big.any():
            for k in (2 * p, 3 * p):
                runs[k] = np.concatenate([runs.get(k, which[:0]), which[big]])
        return [(k, np.unique(us)) for k, us in runs.items()]

    def rank_ends(self) -> np.ndarray:
        """When each rank (rows) of each layout (columns) finishes its micro-batches (ms): the timelines, or
        plain back-to-back work without PP, where the EP overlap's first forward and last backward run solo
        (combined_1f1b.py `combined_1f1b_schedule_for_no_pipelining`)."""
        p, m, which = self.p, self.m, self.which
        if p == 1:
            ends = m * (sum(self.f) + sum(self.b) + sum(self.w))[which]
            if self.paired:
                ends = ends + (sum(self.fs) - sum(self.f) + sum(self.bs) - sum(self.b))[which]
            return ends[None, :]
        ends = np.empty((p, len(m)))
        big = m > 3 * p
        for k in np.unique(m[~big]).tolist():
            rows = np.flatnonzero(m == k)
            ends[:, rows] = self.ends[k][:, which[rows]]
        if big.any():
            rows = np.flatnonzero(big)
            lo, hi = self.ends[2 * p][:, which[rows]], self.ends[3 * p][:, which[rows]]
            ends[:, rows] = extrapolated(lo, hi, m[rows], p, (self.fwd + self.bwd)[:, which[rows]])
        return ends

    def slowest(self) -> np.ndarray:
        """(iteration ms, slowest rank, its exposed DP ms, optimizer ms, bubble ms) of each layout (columns)."""
        xs, which, m = self.xs, self.which, self.m
        keys = [(u, x.pl.sharding.optimizer, x.pl.dp, x.pl.edp, x.pl.grad_overlap, bool(x.ctx.fsdp))
                for u, x in zip(which.tolist(), xs)]
        traffic: dict[tuple, int] = {}
        t = np.array([traffic.setdefault(k[:4], len(traffic)) for k in keys], dtype=np.int64)
        dense_u, expert_u = self.dense.tolist(), self.expert.tolist()
        table = np.array([[dp_traffic(rep.ctx.net, distopt, rep.ctx.grad_bytes, dense_u[r][u], expert_u[r][u],
                                      dp * rep.ctx.cp, rep.ctx.tp, edp, rep.ctx.etp * rep.ctx.ep)
                           for r in range(self.p)]
                          for u, distopt, dp, edp in traffic for rep in (self.reps[u],)]).reshape(len(traffic),
                                                                                                 self.p, 2)
        _, distopt, dp, edp, overlap, fsdp = np.array(keys, dtype=np.int64).T
        distopt, overlap, fsdp = distopt.astype(bool), overlap.astype(bool), fsdp.astype(bool)
        cp = np.array([rep.ctx.cp for rep in self.reps], dtype=np.int64)[which]
        hbm = np.array([rep.ctx.hbm for rep in self.reps])[which]
        c = xs[0].ctx.c
        ends = self.rank_ends()  # from here on, each rank (rows) of each layout (columns)
        fwd, bwd = self.fwd[:, which], self.bwd[:, which]
        dense, expert = self.dense[:, which], self.expert[:, which]
        grads, params = table[t, :, 0].T, table[t, :, 1].T
        hidden = dp_exposed(grads, params, dense, expert, fwd, bwd, c)
        exposed = np.where(fsdp, 0.0, np.where(overlap, hidden, grads + params))
        opt = np.where(fsdp | distopt, adam_ms(dense, expert, dp * cp, edp, hbm, True),
                       adam_ms(dense, expert, dp * cp, edp, hbm, False))
        totals = ends + exposed + opt
        rank = np.argmax(totals, axis=0)
        at = (rank, np.arange(len(xs)))
        return np.array([totals[at], rank, exposed[at], opt[at], (ends - m * (fwd + bwd))[at]])


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
    return float(rate(cfg.gbs * cfg.seq_length, world, iteration_ms))


def rate(tokens: Any, world: int, iteration_ms: Any) -> Any:
    """Tokens per s per GPU of `tokens` per iteration of `iteration_ms` (numbers, or numpy arrays with one element
    per layout) over `world` GPUs."""
    return tokens / (np.maximum(iteration_ms, 1e-9) / 1e3) / world
