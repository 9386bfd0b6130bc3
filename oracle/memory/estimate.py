"""Per-GPU memory of points (a parallel layout with its feature setting): every pipeline GPU with a distinct
set of layers, the largest kept.

Written once, over arrays (issue 26): a point is its layout's part and its feature setting's part
(`parts`: columns of numbers, and the keys of the activations and pipeline plans the two decide together),
so a block of points is a table of layouts, a table of settings and two index arrays (`estimate_points`),
with no Python object per point. The points' columns (`_row`) and then one entry per (point, candidate
pipeline GPU) (`_terms`) are numpy arrays, each branch a 0/1 flag times its term; the activations and plans
come once per distinct pair of keys from cached functions. `estimate_memory` is a batch of one on plain
numbers; `estimate_memory_batch` takes configs and shares the parts of those with equal fields; the sweep
passes its layouts and settings directly. The operations run in the order the per-GPU formulas name them,
so a batch and a batch of one agree to the last bit."""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import Any, NamedTuple

import numpy as np

from ..layout import layout_facts
from ..model_shape import ModelShape, model_shape
from ..specs import ClusterSpec, EffectiveConfig, ModelArch
from .constants import (
    FP8_WEIGHT_COPY_BYTES,
    FSDP_UNSHARDED_GRAD_LAYERS,
    FSDP_UNSHARDED_WEIGHT_LAYERS,
    GIB,
    RUNTIME_CONTEXT_GIB,
    WEIGHT_BYTES,
)
from .overheads import allocator_overhead, comm_buffers, cuda_graph_buffers
from .parts import (
    LAYOUT_FIELDS,
    LAYOUT_WIDTH,
    SETTING_FIELDS,
    SETTING_WIDTH,
    LayoutPart,
    SettingPart,
    act_entry,
    layout_part,
    plan_entry,
    setting_part,
)


class MemoryEstimate(NamedTuple):
    """Per-GPU memory of one layout (a named tuple: built for every point of a search)."""

    total_gb: float  # most-loaded pipeline stage, everything included
    param_optimizer_gb: float  # weights + grads + optimizer state (+ FP8 weight copies)
    activation_gb: float  # activations of all micro-batches in flight (+ embedding/logits activations)
    breakdown: dict[str, float]  # every term in GiB, named as in EvalResult (mem_*); NON_GIB_KEYS are counts


# Breakdown entries that are not GiB (the GiB entries sum to total_gb).
NON_GIB_KEYS = frozenset(
    {"mem_stage", "mem_inflight_microbatches", "mem_params_dense_count", "mem_params_expert_count",
     "mem_params_embedding_count"}
)

_RUNTIME = RUNTIME_CONTEXT_GIB * GIB


def estimate_memory(model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec) -> MemoryEstimate:
    """Per-GPU memory (GiB) of `cfg` training `model` on `cluster`, for the most-loaded pipeline GPU: a
    batch of one, its columns plain numbers (`_row` and `_terms` with the builtin `max`; numpy costs more
    than the arithmetic on one layout)."""
    g = model_shape(model)
    facts = layout_facts(model, cfg, cluster.world_size)
    lay, setting = layout_part(model, cfg, cluster, facts), setting_part(model, cfg, cluster, facts)
    row = _row(g, lay.nums, setting.nums, act_entry(g, lay.acts, setting.acts))
    best = None
    for plan in plan_entry(g, lay.plans, setting.plans):
        terms = _terms(row, plan, max)
        if best is None or terms[0] > best[0][0]:  # the first most-loaded GPU
            best = terms, plan
    assert best is not None  # every layout has a first pipeline GPU
    return _estimate(best[0], best[1], row)


def estimate_memory_batch(model: ModelArch, cfgs: Sequence[EffectiveConfig], cluster: ClusterSpec) -> MemoryBatch:
    """Per-GPU memory of every layout in `cfgs` on `cluster`, computed over arrays (`estimate_points`): the
    configs with the same `LAYOUT_FIELDS` share one layout part, those with the same `SETTING_FIELDS` one
    setting part."""
    dicts = [cfg.__dict__ for cfg in cfgs]
    parts: list[list] = []
    index: list[np.ndarray] = []
    for fields, part in ((LAYOUT_FIELDS, layout_part), (SETTING_FIELDS, setting_part)):
        keys = list(map(itemgetter(*fields), dicts))
        firsts: dict[tuple, EffectiveConfig] = {}
        for key, cfg in zip(keys, cfgs):
            if key not in firsts:
                firsts[key] = cfg
        position = {key: i for i, key in enumerate(firsts)}
        parts.append([part(model, cfg, cluster) for cfg in firsts.values()])
        index.append(np.fromiter(map(position.__getitem__, keys), dtype=np.intp, count=len(keys)))
    return estimate_points(model, cluster, parts[0], parts[1], index[0], index[1])


def estimate_points(model: ModelArch, cluster: ClusterSpec, layouts: Sequence[LayoutPart],
                    settings: Sequence[SettingPart], li: np.ndarray, si: np.ndarray) -> MemoryBatch:
    """Per-GPU memory of the points (`layouts[li[k]]`, `settings[si[k]]`), computed over arrays (module doc):
    no Python object per point; the activations and pipeline plans once per distinct pair of keys."""
    if not len(li):
        empty = np.zeros(0)
        return MemoryBatch(empty, empty, empty, np.zeros((_TERMS, 0)), np.zeros((PLAN_WIDTH, 0)),
                           np.zeros((_ROW_WIDTH, 0)))
    g = model_shape(model)
    lay = np.array([p.nums for p in layouts], dtype=float).reshape(-1, LAYOUT_WIDTH)[li].T
    setting = np.array([p.nums for p in settings], dtype=float).reshape(-1, SETTING_WIDTH)[si].T
    pairs, inverse = _pairs([p.acts for p in layouts], [p.acts for p in settings], li, si)
    acts = np.array([act_entry(g, a, s) for a, s in pairs], dtype=float)[inverse].T
    per_point = np.stack(_row(g, lay, setting, acts))
    pairs, inverse = _pairs([p.plans for p in layouts], [p.plans for p in settings], li, si)
    plans = [plan_entry(g, a, s) for a, s in pairs]
    sizes = np.fromiter((len(p) for p in plans), dtype=np.intp, count=len(plans))
    counts = sizes[inverse]  # candidate GPUs of each point
    owner = np.repeat(np.arange(len(li)), counts)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))  # each point's first (point, GPU) pair
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))  # each distinct plan's first row in `table`
    table = np.array([col for p in plans for col in p], dtype=float).reshape(-1, PLAN_WIDTH).T
    per_plan = table[:, offsets[inverse][owner] + np.arange(len(owner)) - starts[owner]]
    per_row = per_point[:, owner]
    terms = np.stack(_terms(per_row, per_plan, np.maximum))
    total = terms[0]
    peak = np.maximum.reduceat(total, starts)
    firsts = np.flatnonzero(total == peak[owner])  # the first most-loaded GPU of each layout, as the loop kept
    chosen = firsts[np.unique(owner[firsts], return_index=True)[1]]
    return MemoryBatch(total[chosen] / GIB, terms[1][chosen] / GIB, terms[2][chosen] / GIB, terms[:, chosen],
                       per_plan[:, chosen], per_row[:, chosen])


def _pairs(layout_keys: Sequence[tuple], setting_keys: Sequence[tuple], li: np.ndarray, si: np.ndarray
           ) -> tuple[list[tuple[tuple, tuple]], np.ndarray]:
    """The distinct (layout key, setting key) pairs of the points, and each point's index into them."""
    codes: tuple[dict[tuple, int], dict[tuple, int]] = ({}, {})
    lc = np.array([codes[0].setdefault(k, len(codes[0])) for k in layout_keys], dtype=np.intp)
    sc = np.array([codes[1].setdefault(k, len(codes[1])) for k in setting_keys], dtype=np.intp)
    width = len(codes[1])
    distinct, inverse = np.unique(lc[li] * width + sc[si], return_inverse=True)
    lk, sk = list(codes[0]), list(codes[1])
    return [(lk[p // width], sk[p % width]) for p in distinct.tolist()], inverse.reshape(-1)


# Columns of one point (`_row`) and of one candidate GPU's plan (`parts.plan_columns`), in the order `_terms`
# unpacks them; the ones read outside `_terms` by name.
_ROW_WIDTH, _COMM, _DEEPEP = 35, 9, 11
PLAN_WIDTH, _P_INDEX, _P_INFLIGHT = 19, 0, 16
_TERMS = 19  # rows of `_terms`


def _row(g: ModelShape, lay: Any, setting: Any, acts: Any) -> tuple:
    """The `_ROW_WIDTH` columns of a point (bytes or counts) that the per-GPU arithmetic (`_terms`) reads, from
    its layout's (`parts.layout_part`), its setting's (`parts.setting_part`) and its activations'
    (`parts.act_entry`) columns: plain numbers, or rows of numpy arrays (one point per element)."""
    (tp, pp, cp, ep, etp, dp, edp, sp, tokens, deepep_buf, dl_dense, dl_lin, ml_dense, ml_exp, ml_lin, emb, out_edge,
     mtp_emb, mtp_dense, mtp_expert, mtp_lin, graphed, graph_sample, graph_token) = lay
    w_sharded, g_sharded, o_sharded, grad_b, opt_b, fp8_primary, fp8, deepep_on, allgather = setting
    act_d, act_m, act_in, stash_d, stash_m, mtp_body, act_emb, act_logits = acts
    comm_nccl, comm_transient = comm_buffers(g, tp, pp, cp, ep, etp, dp, edp, sp, tokens, deepep_on, allgather)
    deepep = deepep_on * deepep_buf
    return (dp * cp, edp, w_sharded, g_sharded, o_sharded, grad_b, opt_b, fp8_primary, fp8,
            comm_nccl + comm_transient, comm_transient, deepep, comm_nccl + comm_transient + deepep + _RUNTIME,
            dl_dense, dl_lin, ml_dense, ml_exp, ml_lin, emb, out_edge, mtp_emb, mtp_dense, mtp_expert, mtp_lin,
            act_d * tokens, act_m * tokens, act_in * tokens, act_emb * tokens, act_logits * tokens,
            mtp_body * tokens, stash_d * tokens, stash_m * tokens, graphed, graph_sample, graph_token)


def _terms(r: Any, p: Any, maximum: Any) -> tuple:
    """Every GiB term of each (layout, candidate GPU) pair, bytes: `r` the layout's columns (`_row`), `p` the
    GPU's (`parts.plan_columns`), as rows of numpy arrays (one pair per element, `maximum` = `np.maximum`) or
    plain numbers (`maximum` = `max`): the formulas are written once for both. A branch is a 0/1 flag
    times its term (`x + flag * y`, `flag * a + (1 - flag) * b`): exact, since the terms are finite, and
    neither a function call per branch on plain numbers nor a `np.where` on arrays. In order: total,
    param+optimizer, activation, then weights, grads, optimizer, FP8 copies, the activation terms
    (dense, MoE, MTP, embedding, logits, recompute transient, W stash), allocator, CUDA graphs, and the
    dense / expert / edge parameter counts."""
    (dense_shard, expert_shard, w_sharded, g_sharded, o_sharded, grad_b, opt_b, fp8_primary, fp8, _, comm_transient,
     _, fixed, dl_dense, dl_lin, ml_dense, ml_exp, ml_lin, emb, out_edge, mtp_emb, mtp_dense, mtp_expert, mtp_lin,
     act_d, act_m, act_in, act_emb, act_logits, act_mtp, stash_d, stash_m, graphed, graph_sample, graph_token) = r
    (_, nd, nm, has_emb, has_out, has_mtp, dense_full, moe_full, dense_in, moe_in, emb_mb, mtp_mb, dense_group,
     moe_group, wgrad_d, wgrad_m, inflight, has_d, has_m) = p
    # ---- parameters ------------------------------------------------------------------------------
    p_edge = has_emb * emb + has_out * out_edge + has_mtp * mtp_emb
    p_dense = nd * dl_dense + nm * ml_dense + has_mtp * mtp_dense + p_edge
    p_expert = nm * ml_exp + has_mtp * mtp_expert
    p_linear = nd * dl_lin + nm * ml_lin + has_mtp * mtp_lin
    local = p_dense / dense_shard + p_expert / expert_shard
    held = p_dense + p_expert
    # the largest layer, unsharded
    big = maximum(has_d * dl_dense, has_m * (ml_dense + ml_exp))
    big_lin = maximum(has_d * dl_lin, has_m * ml_lin)
    # the current and the prefetched layer are gathered at once
    w_params = w_sharded * (local + FSDP_UNSHARDED_WEIGHT_LAYERS * big) + (1 - w_sharded) * held
    lin = w_sharded * (FSDP_UNSHARDED_WEIGHT_LAYERS * big_lin) + (1 - w_sharded) * p_linear
    weights = WEIGHT_BYTES * (w_params - fp8_primary * lin)
    fp8_copies = fp8 * (FP8_WEIGHT_COPY_BYTES * lin)
    grads = grad_b * (g_sharded * (local + FSDP_UNSHARDED_GRAD_LAYERS * big) + (1 - g_sharded) * held)
    optimizer = opt_b * (o_sharded * local + (1 - o_sharded) * held)

    # ---- activations -----------------------------------------------------------------------------
    a_dense = dense_full * act_d + dense_in * act_in
    a_moe = moe_full * act_m + moe_in * act_in
    a_emb = emb_mb * act_emb
    a_logits = has_out * act_logits  # the last chunk runs each backward right after its forward
    a_mtp = has_mtp * (mtp_mb * act_mtp)
    # the backward of a recomputed group holds its full activations for one micro-batch
    a_transient = maximum(dense_group * act_d, moe_group * act_m)
    a_stash = wgrad_d * stash_d + wgrad_m * stash_m
    activation = a_dense + a_moe + a_emb + a_logits + a_mtp + a_transient + a_stash

    param_opt = weights + grads + optimizer + fp8_copies
    graphs = graphed * cuda_graph_buffers(inflight * (nd + nm), graph_sample, graph_token)
    alloc = allocator_overhead(activation + comm_transient)
    total = param_opt + activation + alloc + fixed + graphs
    return (total, param_opt, activation, weights, grads, optimizer, fp8_copies, a_dense, a_moe, a_mtp,
            a_emb, a_logits, a_transient, a_stash, alloc, graphs, p_dense, p_expert, p_edge)


class MemoryBatch(NamedTuple):
    """Per-GPU memory of a batch of layouts (GiB arrays, one entry per layout, in order), and what
    `estimate` needs to give one layout's `MemoryEstimate`."""

    total_gb: np.ndarray
    param_optimizer_gb: np.ndarray
    activation_gb: np.ndarray
    terms: np.ndarray  # `_terms` rows of each layout's most-loaded GPU
    plan: np.ndarray  # its `parts.plan_columns`
    row: np.ndarray  # the layout's `_row` columns

    def estimate(self, i: int) -> MemoryEstimate:
        """Layout `i` as `estimate_memory` returns it, with every term in the breakdown."""
        return _estimate(self.terms[:, i].tolist(), self.plan[:, i].tolist(), self.row[:, i].tolist())


def _estimate(t: Sequence[float], p: Sequence[float], r: Sequence[float]) -> MemoryEstimate:
    """The estimate of one layout from its most-loaded GPU's `_terms` (`t`) and plan columns (`p`), and
    the layout's columns (`r`)."""
    breakdown = {
        "mem_weights": t[3] / GIB,
        "mem_grads": t[4] / GIB,
        "mem_optimizer": t[5] / GIB,
        "mem_fp8_weight_copies": t[6] / GIB,
        "mem_act_dense_layers": t[7] / GIB,
        "mem_act_moe_layers": t[8] / GIB,
        "mem_act_mtp_layers": t[9] / GIB,
        "mem_act_embedding": t[10] / GIB,
        "mem_act_logits_loss": t[11] / GIB,
        "mem_act_recompute_transient": t[12] / GIB,
        "mem_act_wgrad_stash": t[13] / GIB,
        "mem_comm_buffers": r[_COMM] / GIB,
        "mem_deepep_buffers": r[_DEEPEP] / GIB,
        "mem_cuda_graphs": t[15] / GIB,
        "mem_runtime_context": RUNTIME_CONTEXT_GIB,
        "mem_allocator_overhead": t[14] / GIB,
        "mem_inflight_microbatches": float(p[_P_INFLIGHT]),
        "mem_stage": float(p[_P_INDEX]),
        "mem_params_dense_count": t[16],
        "mem_params_expert_count": t[17],
        "mem_params_embedding_count": t[18],
    }
    return MemoryEstimate(t[0] / GIB, t[1] / GIB, t[2] / GIB, breakdown)
