"""Per-GPU memory of layouts: every pipeline GPU with a distinct set of layers, the largest kept.

Written once, over arrays (issue 26): a batch of layouts becomes a table with one entry per (layout,
candidate pipeline GPU), each term a numpy array and each branch a 0/1 flag times its term; the per-layout parts that
several layouts share (parameter counts, activations per token, the pipeline plans) come from cached
functions. `estimate_memory` is a batch of one; the search checks whole blocks of layouts at once.
The operations run in the order the per-GPU formulas name them, so a batch and a batch of one agree to
the last bit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from ..identity_cache import by_identity
from ..layout import ALLGATHER, FLEX_BACKENDS, layout_facts
from ..model_shape import model_shape
from ..param_count import edge_params, layer_params
from ..specs import ClusterSpec, EffectiveConfig, ModelArch
from .activations import edge_acts, layer_acts
from .constants import (
    ACT_BYTES,
    FP8_WEIGHT_COPY_BYTES,
    FSDP_UNSHARDED_GRAD_LAYERS,
    FSDP_UNSHARDED_WEIGHT_LAYERS,
    GIB,
    RUNTIME_CONTEXT_GIB,
    WEIGHT_BYTES,
)
from .inflight import DevicePlan, device_plans, saturated_microbatches
from .overheads import (
    allocator_overhead,
    comm_buffers,
    cuda_graph_buffers,
    cuda_graph_sample_bytes,
    deepep_buffers,
)
from .state_bytes import grad_bytes, optimizer_bytes


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
    batch of one, its columns plain numbers (`_terms` with the builtin `max`; numpy costs more than the
    arithmetic on one layout)."""
    row, plans = _row(model, cfg, cluster)
    best = None
    for plan in _plan_columns(plans):
        terms = _terms(row, plan, max)
        if best is None or terms[0] > best[0][0]:  # the first most-loaded GPU
            best = terms, plan
    assert best is not None  # every layout has a first pipeline GPU
    return _estimate(best[0], best[1], row)


def estimate_memory_batch(model: ModelArch, cfgs: Sequence[EffectiveConfig], cluster: ClusterSpec) -> MemoryBatch:
    """Per-GPU memory of every layout in `cfgs` on `cluster`, computed over arrays (module doc)."""
    rows = [_row(model, cfg, cluster) for cfg in cfgs]
    if not rows:
        empty = np.zeros(0)
        return MemoryBatch(empty, empty, empty, np.zeros((_TERMS, 0)), np.zeros((_PLAN_WIDTH, 0)),
                           np.zeros((_ROW_WIDTH, 0)))
    plans = [r[1] for r in rows]
    counts = np.fromiter((len(p) for p in plans), dtype=np.intp, count=len(plans))
    owner = np.repeat(np.arange(len(rows)), counts)
    per_row = np.array([r[0] for r in rows], dtype=float).reshape(len(rows), _ROW_WIDTH)[owner].T
    per_plan = np.array([col for p in plans for col in _plan_columns(p)], dtype=float).reshape(-1, _PLAN_WIDTH).T
    terms = np.stack(_terms(per_row, per_plan, np.maximum))
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    total = terms[0]
    peak = np.maximum.reduceat(total, starts)
    firsts = np.flatnonzero(total == peak[owner])  # the first most-loaded GPU of each layout, as the loop kept
    chosen = firsts[np.unique(owner[firsts], return_index=True)[1]]
    return MemoryBatch(total[chosen] / GIB, terms[1][chosen] / GIB, terms[2][chosen] / GIB, terms[:, chosen],
                       per_plan[:, chosen], per_row[:, chosen])


# Columns of one layout (`_row`) and of one candidate GPU's plan (`_plan_columns`), in the order `_terms`
# unpacks them; the ones read outside `_terms` by name.
_ROW_WIDTH, _COMM, _DEEPEP = 35, 9, 11
_PLAN_WIDTH, _P_INDEX, _P_INFLIGHT = 19, 0, 16
_TERMS = 19  # rows of `_terms`


def _row(model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec) -> tuple[tuple, tuple[DevicePlan, ...]]:
    """The layout-wide terms of `cfg` (`_ROW_WIDTH` numbers, bytes or counts) and its candidate GPUs'
    plans: everything the per-GPU arithmetic (`_terms`) reads."""
    g = model_shape(model)
    c = cfg.__dict__  # plain dict reads: pydantic attribute access is the slow part of a call
    gpn = cluster.gpus_per_node
    facts = layout_facts(model, cfg, cluster.num_nodes * gpn)
    tp, pp, cp, vpp = c["tp"], c["pp"], c["cp"], facts.vpp
    etp, ep = c["etp"], c["ep"]
    sp = facts.sp
    rec = facts.recompute
    fp8 = c["fp8"] is not None

    # Data-parallel sizes; an illegal layout has none (0): treat it as 1.
    dp, edp = facts.dp_or_1, facts.edp_or_1
    # EP all-to-all overlap runs one more warm-up forward under interleaving (schedules.py)
    extra = int(facts.overlaps.ep and vpp > 1 and pp > 1)
    nmb = saturated_microbatches(c["pp_schedule"], pp, vpp, facts.microbatches_or_1, extra)

    dense_l, moe_l = layer_params(g, tp, etp, ep)
    edge = edge_params(g, tp, etp, ep, pp > 1, c["seq_length"])
    acts = layer_acts(g, tp, sp, c["use_flash_attn"], rec.modules, c["seq_length"], etp, fp8)
    eacts = edge_acts(g, tp, sp, c["cross_entropy_loss_fusion"])
    plans = device_plans(g, facts.chunks, pp, vpp, c["pp_schedule"], nmb, rec, extra)
    tokens = facts.tokens  # tokens of one micro-batch on this rank's CP slice

    # Bytes per parameter (state_bytes.py): bf16 weight, fp32 or bf16 main grad, optimizer state.
    # The distributed optimizer shards the optimizer state over the gradient-reduction group, which
    # is DP x CP for dense parameters (Megatron's data-parallel group "with context parallel"; the
    # 6 + 12/DP of theoretical_memory_usage.py assumes CP = 1) and expert-DP for expert parameters.
    # Torch FSDP2 shards weights, gradients and optimizer state over the same groups; Megatron-FSDP
    # shards what its data_parallel_sharding_strategy names (optim, optim_grads, optim_grads_params).
    w_sharded, g_sharded, o_sharded = map(float, facts.sharding)  # flags 0.0 / 1.0, as `_terms` multiplies
    # FP8 primary weights: the linear weights have no bf16 copy, only the FP8 one (state_bytes.py).
    fp8_primary = float(fp8 and c["fp8_param_gather"])

    deepep_on = facts.dispatch in FLEX_BACKENDS  # the flex dispatcher's buffers (DeepEP, HybridEP, Turbo DeepEP)
    comm_nccl, comm_transient = comm_buffers(g, tp, pp, cp, ep, etp, dp, edp, sp, tokens, deepep_on,
                                             facts.dispatch == ALLGATHER)
    deepep = deepep_buffers(g, ep, etp, gpn) if deepep_on else 0.0
    mtp_full = rec.recomputes_mtp(model.num_layers)
    mtp_body = (acts.layer_input if mtp_full else (acts.moe if g.mtp_is_moe else acts.dense)) + eacts.mtp_extra
    graph_impl = c["cuda_graph_impl"]
    graph_token = graph_sample = 0.0
    if graph_impl != "none":
        graph_token = ACT_BYTES * g.h * (tokens / tp if sp else tokens)
        graph_mask = c["mbs"] * (c["seq_length"] / cp) * c["seq_length"]  # one byte per boolean mask entry
        graph_sample = cuda_graph_sample_bytes(c["cuda_graph_scope"], graph_token, graph_mask)
    return (dp * cp, edp, w_sharded, g_sharded, o_sharded, grad_bytes(cfg), optimizer_bytes(cfg), fp8_primary,
            float(fp8), comm_nccl + comm_transient, comm_transient, deepep,
            comm_nccl + comm_transient + deepep + _RUNTIME,
            dense_l.dense, dense_l.linear, moe_l.dense, moe_l.expert, moe_l.linear,
            edge.embedding, edge.output + edge.final_norm, edge.mtp_embedding, edge.mtp.dense, edge.mtp.expert,
            edge.mtp.linear, acts.dense * tokens, acts.moe * tokens, acts.layer_input * tokens,
            eacts.embedding * tokens, eacts.logits * tokens, g.mtp_layers * mtp_body * tokens,
            acts.dense_wgrad * tokens, acts.moe_wgrad * tokens, float(graph_impl != "none"), graph_sample,
            graph_token), plans


@by_identity(maxsize=16384)
def _plan_columns(plans: tuple[DevicePlan, ...]) -> tuple[tuple[float, ...], ...]:
    """`_PLAN_WIDTH` numbers per candidate GPU, once per plans object (`device_plans` is cached): a
    recompute group counts through the most layers it recomputes at once, per layer type (the transient
    of the largest group, `_terms`); flags are 0.0 / 1.0, as `_terms` multiplies by them."""
    return tuple((p.index, p.dense_layers, p.moe_layers, float(p.has_embedding), float(p.has_output),
                  float(p.has_mtp), p.dense_full_mb, p.moe_full_mb, p.dense_input_mb, p.moe_input_mb, p.embedding_mb,
                  p.mtp_mb, max((n for n, has_d, _ in p.recompute_groups if has_d), default=0.0),
                  max((n for n, _, has_m in p.recompute_groups if has_m), default=0.0),
                  p.wgrad_dense_mb, p.wgrad_moe_mb, p.inflight, float(p.dense_layers > 0), float(p.moe_layers > 0))
                 for p in plans)


def _terms(r: Any, p: Any, maximum: Any) -> tuple:
    """Every GiB term of each (layout, candidate GPU) pair, bytes: `r` the layout's columns (`_row`), `p` the
    GPU's (`_plan_columns`), as rows of numpy arrays (one pair per element, `maximum` = `np.maximum`) or
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
    plan: np.ndarray  # its `_plan_columns`
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
