"""Per-GPU memory of one layout: every pipeline GPU with a distinct set of layers, the largest kept."""

from __future__ import annotations

from typing import NamedTuple

from ..layout import layout_facts
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
from .inflight import device_plans, saturated_microbatches
from .overheads import (
    allocator_overhead,
    comm_buffers,
    cuda_graph_buffers,
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
    """Per-GPU memory (GiB) of `cfg` training `model` on `cluster`, for the most-loaded pipeline GPU."""
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
    extra = int(c["overlap_moe_expert_parallel_comm"] and vpp > 1 and pp > 1)
    nmb = saturated_microbatches(c["pp_schedule"], pp, vpp, facts.microbatches_or_1, extra)

    dense_l, moe_l = layer_params(g, tp, etp, ep)
    edge = edge_params(g, tp, etp, ep, pp > 1, c["seq_length"])
    acts = layer_acts(g, tp, sp, c["use_flash_attn"], rec.modules, c["seq_length"], etp, fp8)
    eacts = edge_acts(g, tp, sp, c["cross_entropy_loss_fusion"])
    full = rec.full
    plans = device_plans(g, facts.chunks, pp, vpp, c["pp_schedule"], nmb, rec, extra)
    tokens = facts.tokens  # tokens of one micro-batch on this rank's CP slice

    # Bytes per parameter (state_bytes.py): bf16 weight, fp32 or bf16 main grad, optimizer state.
    # The distributed optimizer shards the optimizer state over the gradient-reduction group, which
    # is DP x CP for dense parameters (Megatron's data-parallel group "with context parallel"; the
    # 6 + 12/DP of theoretical_memory_usage.py assumes CP = 1) and expert-DP for expert parameters.
    # Torch FSDP2 shards weights, gradients and optimizer state over the same groups; Megatron-FSDP
    # shards what its data_parallel_sharding_strategy names (optim, optim_grads, optim_grads_params).
    dense_shard, expert_shard = dp * cp, edp
    w_sharded, g_sharded, o_sharded = _sharding(c)
    grad_b, opt_b = grad_bytes(cfg), optimizer_bytes(cfg)
    # FP8 primary weights: the linear weights have no bf16 copy, only the FP8 one (state_bytes.py).
    fp8_primary = fp8 and c["fp8_param_gather"]

    deepep_on = c["use_turbo_deepep"] or c["moe_token_dispatcher_type"] == "flex"
    comm_nccl, comm_transient = comm_buffers(g, tp, pp, cp, ep, etp, dp, edp, sp, tokens, deepep_on,
                                             c["moe_token_dispatcher_type"] == "allgather")
    deepep = deepep_buffers(g, ep, etp, gpn) if deepep_on else 0.0
    fixed = comm_nccl + comm_transient + deepep + _RUNTIME
    # Primus recompute_layer_ids address MTP depth d as num_layers + d (recompute_layer_patches.py)
    mtp_full = full and (not rec.layer_ids or max(rec.layer_ids) >= model.num_layers)
    mtp_body = (acts.layer_input if mtp_full else (acts.moe if g.mtp_is_moe else acts.dense)) + eacts.mtp_extra

    # Loop invariants (bytes per layer / per token), hoisted out of the per-GPU loop.
    dl_dense, dl_lin = dense_l.dense, dense_l.linear
    ml_dense, ml_exp, ml_lin = moe_l.dense, moe_l.expert, moe_l.linear
    out_edge = edge.output + edge.final_norm
    act_d, act_m, act_in = acts.dense * tokens, acts.moe * tokens, acts.layer_input * tokens
    act_emb, act_logits = eacts.embedding * tokens, eacts.logits * tokens
    act_mtp = g.mtp_layers * mtp_body * tokens
    stash_d, stash_m = acts.dense_wgrad * tokens, acts.moe_wgrad * tokens
    graph_impl = c["cuda_graph_impl"]
    if graph_impl != "none":
        graph_token = ACT_BYTES * g.h * (tokens / tp if sp else tokens)
        graph_mask = c["mbs"] * (c["seq_length"] / cp) * c["seq_length"]  # one byte per boolean mask entry

    best = None
    for p in plans:
        # ---- parameters --------------------------------------------------------------------------
        nd, nm = p.dense_layers, p.moe_layers
        p_dense = nd * dl_dense + nm * ml_dense
        p_expert = nm * ml_exp
        p_linear = nd * dl_lin + nm * ml_lin
        p_edge = edge.embedding if p.has_embedding else 0.0
        if p.has_output:
            p_edge += out_edge
        if p.has_mtp:
            p_edge += edge.mtp_embedding
            p_dense += edge.mtp.dense
            p_expert += edge.mtp.expert
            p_linear += edge.mtp.linear
        p_dense += p_edge
        local = p_dense / dense_shard + p_expert / expert_shard
        held = p_dense + p_expert
        big = max(dl_dense if nd else 0.0, ml_dense + ml_exp if nm else 0.0)  # largest layer, unsharded
        big_lin = max(dl_lin if nd else 0.0, ml_lin if nm else 0.0)
        if w_sharded:  # the current and the prefetched layer are gathered at once
            w_params, lin = local + FSDP_UNSHARDED_WEIGHT_LAYERS * big, FSDP_UNSHARDED_WEIGHT_LAYERS * big_lin
        else:
            w_params, lin = held, p_linear
        weights = WEIGHT_BYTES * (w_params - (lin if fp8_primary else 0.0))
        fp8_copies = FP8_WEIGHT_COPY_BYTES * lin if fp8 else 0.0
        grads = grad_b * (local + FSDP_UNSHARDED_GRAD_LAYERS * big if g_sharded else held)
        optimizer = opt_b * (local if o_sharded else held)

        # ---- activations -------------------------------------------------------------------------
        a_dense = p.dense_full_mb * act_d + p.dense_input_mb * act_in
        a_moe = p.moe_full_mb * act_m + p.moe_input_mb * act_in
        a_emb = p.embedding_mb * act_emb
        a_logits = act_logits if p.has_output else 0.0  # the last chunk runs each backward right after its forward
        a_mtp = p.mtp_mb * act_mtp if p.has_mtp else 0.0
        a_transient = 0.0
        for layers, has_d, has_m in p.recompute_groups:
            # the backward of a recomputed group holds its full activations for one micro-batch
            biggest = max(act_d if has_d else 0.0, act_m if has_m else 0.0)
            a_transient = max(a_transient, layers * biggest)
        a_stash = p.wgrad_dense_mb * stash_d + p.wgrad_moe_mb * stash_m if p.wgrad_dense_mb or p.wgrad_moe_mb else 0.0
        activation = a_dense + a_moe + a_emb + a_logits + a_mtp + a_transient + a_stash

        param_opt = weights + grads + optimizer + fp8_copies
        graphs = 0.0 if graph_impl == "none" else cuda_graph_buffers(
            graph_impl, c["cuda_graph_scope"], p.inflight * (nd + nm), graph_token, graph_mask)
        alloc = allocator_overhead(activation + comm_transient)
        total = param_opt + activation + alloc + fixed + graphs
        if best is None or total > best[0]:
            best = (
                total, p, param_opt, activation, alloc, graphs,
                (weights, grads, optimizer, fp8_copies),
                (a_dense, a_moe, a_mtp, a_emb, a_logits, a_transient, a_stash),
                (p_dense, p_expert, p_edge),
            )

    assert best is not None  # every layout has a first pipeline GPU
    total, p, param_opt, activation, alloc, graphs, po, ac, counts = best
    breakdown = {
        "mem_weights": po[0] / GIB,
        "mem_grads": po[1] / GIB,
        "mem_optimizer": po[2] / GIB,
        "mem_fp8_weight_copies": po[3] / GIB,
        "mem_act_dense_layers": ac[0] / GIB,
        "mem_act_moe_layers": ac[1] / GIB,
        "mem_act_mtp_layers": ac[2] / GIB,
        "mem_act_embedding": ac[3] / GIB,
        "mem_act_logits_loss": ac[4] / GIB,
        "mem_act_recompute_transient": ac[5] / GIB,
        "mem_act_wgrad_stash": ac[6] / GIB,
        "mem_comm_buffers": (comm_nccl + comm_transient) / GIB,
        "mem_deepep_buffers": deepep / GIB,
        "mem_cuda_graphs": graphs / GIB,
        "mem_runtime_context": RUNTIME_CONTEXT_GIB,
        "mem_allocator_overhead": alloc / GIB,
        "mem_inflight_microbatches": p.inflight,
        "mem_stage": float(p.index),
        "mem_params_dense_count": counts[0],
        "mem_params_expert_count": counts[1],
        "mem_params_embedding_count": counts[2],
    }
    return MemoryEstimate(total / GIB, param_opt / GIB, activation / GIB, breakdown)


def _sharding(c: dict) -> tuple[bool, bool, bool]:
    """Whether (weights, gradients, optimizer state) are sharded over the data-parallel groups."""
    if c["use_torch_fsdp2"]:
        return True, True, True
    if c["use_megatron_fsdp"]:
        strategy = c["data_parallel_sharding_strategy"]
        return (strategy == "optim_grads_params", strategy in ("optim_grads", "optim_grads_params"),
                strategy != "no_shard")
    return False, False, c["use_distributed_optimizer"]
