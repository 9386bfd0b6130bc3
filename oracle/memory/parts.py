"""A point's memory inputs in two parts, so that a block of points is a table of layouts and one of feature
settings (issue 26): what the parallel layout decides (`layout_part`: sizes, tokens, parameter counts,
DeepEP and CUDA-graph buffers) and what the feature setting decides (`setting_part`: DP sharding, state
bytes, FP8, dispatch backend, recompute plan). The two meet in the activations (`act_entry`: a layer's
stored bytes per token need both the TP/SP/ETP of the layout and the recompute modules and FP8 of the
setting) and in the pipeline plans (`plan_entry`: the layout's chunks and schedule under the setting's
recompute and EP overlap), each computed once per distinct pair of keys and cached.

Each part reads only its fields (`LAYOUT_FIELDS`, `SETTING_FIELDS`, besides the model and cluster): a
batch of configs shares the part of every config with the same values of those fields
(`estimate.estimate_memory_batch`). Everything is derived from the layout facts (`oracle.layout`) and the
memory model's own functions; nothing here is a formula of its own.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from ..identity_cache import by_identity
from ..layout import ALLGATHER, FLEX_BACKENDS, LayoutFacts, RecomputePlan, StageLayers, layout_facts
from ..model_shape import ModelShape, model_shape
from ..param_count import edge_params, layer_params
from ..specs import ClusterSpec, EffectiveConfig, ModelArch
from .activations import edge_acts, layer_acts
from .constants import ACT_BYTES
from .inflight import DevicePlan, device_plans, saturated_microbatches
from .overheads import cuda_graph_sample_bytes, deepep_buffers
from .state_bytes import grad_bytes, optimizer_bytes

# The config fields each part reads (with the model and the cluster).
LAYOUT_FIELDS = ("tp", "pp", "cp", "ep", "etp", "mbs", "vpp", "pp_schedule", "pp_layout", "pp_first_layers",
                 "pp_last_layers", "pp_embedding_in_split", "pp_loss_in_split", "gbs", "seq_length",
                 "sequence_parallel", "use_flash_attn", "cuda_graph_impl", "cuda_graph_scope")
SETTING_FIELDS = ("fp8", "fp8_param_gather", "recompute_granularity", "recompute_method", "recompute_num_layers",
                  "recompute_modules", "recompute_layer_ids", "moe_token_dispatcher_type",
                  "moe_flex_dispatcher_backend", "use_turbo_deepep", "use_torch_fsdp2", "use_megatron_fsdp",
                  "data_parallel_sharding_strategy", "use_distributed_optimizer", "grad_reduce_in_fp32",
                  "use_precision_aware_optimizer", "main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype",
                  "optimizer_cpu_offload", "optimizer_offload_fraction", "overlap_moe_expert_parallel_comm",
                  "cross_entropy_loss_fusion")

# Columns of `LayoutPart.nums` and `SettingPart.nums`, in the order `estimate._row` unpacks them.
LAYOUT_WIDTH, SETTING_WIDTH = 24, 9


class LayoutPart(NamedTuple):
    """What a point's layout decides: `LAYOUT_WIDTH` numbers (`layout_part`), and the layout's half of the
    keys of its activations (`act_entry`) and its pipeline plans (`plan_entry`)."""

    nums: tuple[float, ...]
    acts: tuple[int, bool, bool, int, int]  # TP, SP, flash attention, sequence length, ETP
    plans: tuple[tuple[StageLayers, ...], int, int, str, int, bool]  # chunks, PP, VPP, schedule, micro-batches,
    # whether EP overlap would add a warm-up forward here (EP > 1 under interleaving)


class SettingPart(NamedTuple):
    """What a point's feature setting decides: `SETTING_WIDTH` numbers (`setting_part`, flags 0.0 / 1.0, as
    `estimate._terms` multiplies by them), and the setting's half of the two keys."""

    nums: tuple[float, ...]
    acts: tuple[tuple[str, ...], bool, bool, bool]  # selective modules, FP8, MTP recomputed, fused loss
    plans: tuple[RecomputePlan, bool]  # recompute plan, EP overlap asked for


def layout_part(model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec, facts: LayoutFacts | None = None
                ) -> LayoutPart:
    """The layout's part of `cfg`'s memory (`facts`: its layout facts, if the caller has them): it reads
    `LAYOUT_FIELDS` only."""
    g = model_shape(model)
    c = cfg.__dict__  # plain dict reads: pydantic attribute access is the slow part of a call
    facts = facts or layout_facts(model, cfg, cluster.world_size)
    tp, pp, cp, ep, etp, vpp = c["tp"], c["pp"], c["cp"], c["ep"], c["etp"], facts.vpp
    sp = facts.sp
    tokens = facts.tokens  # tokens of one micro-batch on this rank's CP slice
    dense_l, moe_l = layer_params(g, tp, etp, ep)
    edge = edge_params(g, tp, etp, ep, pp > 1, c["seq_length"])
    graph_impl = c["cuda_graph_impl"]
    graph_token = graph_sample = 0.0
    if graph_impl != "none":
        graph_token = ACT_BYTES * g.h * (tokens / tp if sp else tokens)
        graph_mask = c["mbs"] * (c["seq_length"] / cp) * c["seq_length"]  # one byte per boolean mask entry
        graph_sample = cuda_graph_sample_bytes(c["cuda_graph_scope"], graph_token, graph_mask)
    # Data-parallel sizes; an illegal layout has none (0): treat it as 1.
    nums = (tp, pp, cp, ep, etp, facts.dp_or_1, facts.edp_or_1, float(sp), tokens,
            deepep_buffers(g, ep, etp, cluster.gpus_per_node),  # counted where the setting runs DeepEP
            dense_l.dense, dense_l.linear, moe_l.dense, moe_l.expert, moe_l.linear,
            edge.embedding, edge.output + edge.final_norm, edge.mtp_embedding, edge.mtp.dense, edge.mtp.expert,
            edge.mtp.linear, float(graph_impl != "none"), graph_sample, graph_token)
    return LayoutPart(nums, (tp, sp, c["use_flash_attn"], c["seq_length"], etp),
                      (facts.chunks, pp, vpp, c["pp_schedule"], facts.microbatches_or_1, ep > 1 and vpp > 1 and pp > 1))


def setting_part(model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec, facts: LayoutFacts | None = None
                 ) -> SettingPart:
    """The feature setting's part of `cfg`'s memory (`facts` as in `layout_part`): it reads `SETTING_FIELDS` only.

    Bytes per parameter (state_bytes.py): bf16 weight, fp32 or bf16 main grad, optimizer state. The
    distributed optimizer shards the optimizer state over the gradient-reduction group, which is DP x CP
    for dense parameters (Megatron's data-parallel group "with context parallel"; the 6 + 12/DP of
    theoretical_memory_usage.py assumes CP = 1) and expert-DP for expert parameters. Torch FSDP2 shards
    weights, gradients and optimizer state over the same groups; Megatron-FSDP shards what its
    data_parallel_sharding_strategy names (optim, optim_grads, optim_grads_params). FP8 primary weights:
    the linear weights have no bf16 copy, only the FP8 one (state_bytes.py)."""
    c = cfg.__dict__
    facts = facts or layout_facts(model, cfg, cluster.world_size)
    rec = facts.recompute
    fp8 = c["fp8"] is not None
    w_sharded, g_sharded, o_sharded = map(float, facts.sharding)
    flex = facts.dispatch in FLEX_BACKENDS  # the flex dispatcher's buffers (DeepEP, HybridEP, Turbo DeepEP)
    nums = (w_sharded, g_sharded, o_sharded, grad_bytes(cfg), optimizer_bytes(cfg),
            float(fp8 and c["fp8_param_gather"]), float(fp8), float(flex), float(facts.dispatch == ALLGATHER))
    return SettingPart(nums, (rec.modules, fp8, rec.recomputes_mtp(model.num_layers), c["cross_entropy_loss_fusion"]),
                       (rec, c["overlap_moe_expert_parallel_comm"]))


@lru_cache(maxsize=8192)
def act_entry(g: ModelShape, layout: tuple, setting: tuple) -> tuple[float, ...]:
    """Stored bytes per token of a layout (`LayoutPart.acts`) under a setting (`SettingPart.acts`): a dense
    layer, an MoE layer, a layer's input, the W stashes (`layer_acts`), the MTP block, the embedding and
    the logits (`edge_acts`). Under full recompute that includes the MTP block, it keeps its input only."""
    tp, sp, flash, seq, etp = layout
    modules, fp8, mtp_full, fused_ce = setting
    acts = layer_acts(g, tp, sp, flash, modules, seq, etp, fp8)
    eacts = edge_acts(g, tp, sp, fused_ce)
    mtp_body = (acts.layer_input if mtp_full else (acts.moe if g.mtp_is_moe else acts.dense)) + eacts.mtp_extra
    return (acts.dense, acts.moe, acts.layer_input, acts.dense_wgrad, acts.moe_wgrad, g.mtp_layers * mtp_body,
            eacts.embedding, eacts.logits)


@lru_cache(maxsize=16384)
def plan_entry(g: ModelShape, layout: tuple, setting: tuple) -> tuple[tuple[float, ...], ...]:
    """The candidate GPUs' plan columns (`plan_columns`) of a layout (`LayoutPart.plans`) under a setting
    (`SettingPart.plans`). EP all-to-all overlap runs one more warm-up forward under interleaving
    (megatron-core 0.16.1 schedules.py)."""
    chunks, pp, vpp, schedule, microbatches, overlap_adds = layout
    rec, ep_overlap = setting
    extra = int(ep_overlap and overlap_adds)
    nmb = saturated_microbatches(schedule, pp, vpp, microbatches, extra)
    return plan_columns(device_plans(g, chunks, pp, vpp, schedule, nmb, rec, extra))


@by_identity(maxsize=16384)
def plan_columns(plans: tuple[DevicePlan, ...]) -> tuple[tuple[float, ...], ...]:
    """`estimate.PLAN_WIDTH` numbers per candidate GPU, once per plans object (`device_plans` is cached): a
    recompute group counts through the most layers it recomputes at once, per layer type (the transient
    of the largest group, `estimate._terms`); flags are 0.0 / 1.0, as `_terms` multiplies by them."""
    return tuple((p.index, p.dense_layers, p.moe_layers, float(p.has_embedding), float(p.has_output),
                  float(p.has_mtp), p.dense_full_mb, p.moe_full_mb, p.dense_input_mb, p.moe_input_mb, p.embedding_mb,
                  p.mtp_mb, max((n for n, has_d, _ in p.recompute_groups if has_d), default=0.0),
                  max((n for n, _, has_m in p.recompute_groups if has_m), default=0.0),
                  p.wgrad_dense_mb, p.wgrad_moe_mb, p.inflight, float(p.dense_layers > 0), float(p.moe_layers > 0))
                 for p in plans)
