"""Legality as code: per-axis legal sets and `validate`, every rule derived from model and cluster.

The rules are megatron-core 0.16.1's (`oracle.pipeline_split.MEGATRON_CORE_VERSION`): the layer
split (`oracle.pipeline_split`), the dense and expert grids (`parallel_state.py`), the interleaved
schedule's micro-batch groups (`pipeline_parallel/schedules.py`), EP with TP needing sequence
parallelism (`transformer/moe/moe_layer.py`), the precision-aware optimizer
(`optimizer/optimizer_config.py`), recompute modules, EP all-to-all overlap and MoE biases at ETP 1
(`transformer/transformer_config.py`), and Megatron-LM's `arguments.py` for torch-FSDP2 (PP = 1,
EP = 1, no distributed optimizer) and TP communication overlap (sequence parallelism). Zero-bubble
and ZBV rules are Primus's (`primus/backends/megatron/patches`), the sync-free, Turbo-DeepEP and
ROCm flex-dispatcher rules too (`patches/args/rocm_arg_validation.py`, Primus-Turbo's DeepEP
buffer configs). Which knobs a cluster's stack has is the knob registry's (`oracle.specs.knobs`) and
`oracle.constraints`'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import get_args

from pydantic import BaseModel, ConfigDict

from .identity_cache import by_identity
from .layout import ALLGATHER, DEEPEP, FLEX_BACKENDS, HYBRIDEP, TURBO_DEEPEP, LayoutFacts, layout_facts
from .pipeline_split import Stage, candidate_splits
from .specs import ClusterSpec, EffectiveConfig, ModelArch, Violation
from .specs.training import (
    Dispatcher,
    FlexBackend,
    Fp8Recipe,
    PipelineSchedule,
    RecomputeGranularity,
)
from .specs.trusted import trusted

SCHEDULES: tuple[str, ...] = get_args(PipelineSchedule)  # the schedules TrainingArgs accepts
MAX_SYNC_FREE_STAGE = 3
# EP group sizes Primus-Turbo's DeepEP has dispatch/combine configs for (primus_turbo deep_ep/buffer.py @a6a16cd).
TURBO_DEEPEP_RANKS = frozenset({2, 4, 8, 16, 24, 32, 64, 128, 144, 160})


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


class LegalAxes(BaseModel):
    """The values each knob may take on its own; cross-axis rules are `validate`'s job."""

    model_config = ConfigDict(frozen=True)

    tp: list[int]
    pp: list[int]
    cp: list[int]
    ep: list[int]
    etp: list[int]
    vpp: list[int]
    mbs: list[int]
    pp_schedule: list[str]
    recompute_granularity: list[str]
    fp8: list[str]
    use_distributed_optimizer: list[bool]
    use_torch_fsdp2: list[bool]
    use_turbo_deepep: list[bool]
    sync_free_stage: list[int]
    moe_token_dispatcher_type: list[str]
    moe_flex_dispatcher_backend: list[str]
    tp_comm_overlap: list[bool]
    overlap_moe_expert_parallel_comm: list[bool]
    world_size: int


def _tp_ok(model: ModelArch, tp: int) -> bool:
    dims = (model.num_attention_heads, model.groups, model.hidden_size, model.ffn)
    return all(d % tp == 0 for d in dims)


def _max_tp(cluster: ClusterSpec) -> int:
    return cluster.world_size if cluster.allow_cross_node_tp else cluster.gpus_per_node


def legal_axes(model: ModelArch, cluster: ClusterSpec, *, seq_length: int, gbs: int) -> LegalAxes:
    """Per-axis legal values for this model on this cluster."""
    world = cluster.world_size
    ws = _divisors(world)
    L, mtp = model.num_layers, model.mtp_num_layers
    pp = [p for p in ws if candidate_splits(L, mtp, p, 1)]
    moe = model.is_moe
    return LegalAxes(
        tp=[t for t in ws if t <= _max_tp(cluster) and _tp_ok(model, t)],
        pp=pp,
        cp=[c for c in ws if c == 1 or seq_length % (2 * c) == 0],
        ep=[e for e in ws if (model.num_experts or 0) % e == 0] if moe else [1],
        etp=[t for t in ws if t <= _max_tp(cluster) and model.expert_ffn % t == 0] if moe and not
        model.add_bias_linear else [1],
        vpp=sorted({1} | {v for p in pp if p > 1 for v in range(2, (L + 2 + mtp) // p + 1)
                          if candidate_splits(L, mtp, p, v)}),
        mbs=[m for m in _divisors(gbs) if m <= 16],
        pp_schedule=list(SCHEDULES),
        recompute_granularity=["none", *get_args(RecomputeGranularity)],
        fp8=["none", *get_args(Fp8Recipe)] if cluster.gpu.has_fp8 else ["none"],
        use_distributed_optimizer=[False, True],
        use_torch_fsdp2=[False, True],
        use_turbo_deepep=[False, True] if moe else [False],
        sync_free_stage=list(range(MAX_SYNC_FREE_STAGE + 1)) if moe else [0],
        moe_token_dispatcher_type=list(get_args(Dispatcher)) if moe else ["allgather"],
        moe_flex_dispatcher_backend=list(get_args(FlexBackend)) if moe else ["deepep"],
        tp_comm_overlap=[False, True],
        overlap_moe_expert_parallel_comm=[False, True] if moe else [False],
        world_size=world,
    )


@dataclass(frozen=True, slots=True)
class _Limits:
    """What the rules read of a model and a cluster, as plain numbers (built once per pair)."""

    world: int
    max_tp: int
    gpus_per_node: int
    tp_dims: tuple[tuple[int, str], ...]  # sizes TP must divide, with their argument names
    tp_gcd: int  # their greatest common divisor: TP divides all of them iff it divides this
    is_moe: bool
    moe_bias: bool  # a MoE model with linear biases: experts run only at ETP 1
    num_experts: int
    expert_ffn: int
    shared_experts: bool  # a MoE model with shared experts (moe_shared_expert_intermediate_size set)
    num_layers: int
    has_fp8: bool
    gpu_name: str
    mla: bool
    amd: bool
    mtp: int


@by_identity()
def _limits(model: ModelArch, cluster: ClusterSpec) -> _Limits:
    tp_dims = ((model.num_attention_heads, "num_attention_heads"), (model.groups, "num_query_groups"),
               (model.hidden_size, "hidden_size"), (model.ffn, "ffn_hidden_size"))
    return _Limits(
        world=cluster.world_size, max_tp=_max_tp(cluster), gpus_per_node=cluster.gpus_per_node,
        tp_dims=tp_dims, tp_gcd=math.gcd(*(dim for dim, _ in tp_dims)),
        is_moe=model.is_moe, moe_bias=model.is_moe and model.add_bias_linear, num_experts=model.num_experts or 0,
        expert_ffn=model.expert_ffn,
        shared_experts=model.is_moe and model.moe_shared_expert_intermediate_size is not None,
        num_layers=model.num_layers, has_fp8=cluster.gpu.has_fp8, gpu_name=cluster.gpu.name,
        mla=model.multi_latent_attention, amd=cluster.gpu.vendor == "amd", mtp=model.mtp_num_layers,
    )


def _violation(code: str, message: str) -> Violation:
    return trusted(Violation, {"code": code, "message": message})


def validate(model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec) -> list[Violation]:
    """Every rule this layout breaks, each with a stable code and a sentence, group by group (called one by one:
    this runs for every point of a search); empty when legal."""
    lim, c = _limits(model, cluster), cfg.__dict__  # plain reads: this runs for every point of a search
    facts = layout_facts(model, cfg, lim.world)
    out: list[Violation] = []
    _grid_rules(lim, c, facts, out)
    _expert_rules(lim, c, facts, out)
    _split_rules(lim, c, facts, out)
    _pipeline_rules(lim, c, facts, out)
    _optimizer_rules(lim, c, facts, out)
    _recompute_module_rules(lim, c, facts, out)
    _dispatch_rules(lim, c, facts, out)
    _overlap_rules(lim, c, facts, out)
    _precision_rules(lim, c, facts, out)
    _recompute_layer_rules(lim, c, facts, out)
    _legacy_grouped_gemm_rules(lim, c, facts, out)
    _shared_overlap_rules(lim, c, facts, out)
    return out


def _grid_rules(lim: _Limits, c: dict, facts: LayoutFacts, out: list[Violation]) -> None:
    """The dense and expert grids fill the world (parallel_state.py); TP divides the sizes it splits, within a
    node unless the cluster allows more; CP halves each sequence chunk (load-balanced causal attention)."""
    world, tp, pp, cp, ep, etp = lim.world, c["tp"], c["pp"], c["cp"], c["ep"], c["etp"]
    if not facts.dp:
        out.append(_violation("world_attention", f"world size {world} is not divisible by TP*PP*CP = {tp}*{pp}*{cp}"))
    if not facts.edp:
        out.append(_violation("world_expert", f"world size {world} is not divisible by ETP*EP*PP = {etp}*{ep}*{pp}"))
    if lim.tp_gcd % tp:  # one test for the common case; the loop names each size TP misses
        for dim, name in lim.tp_dims:
            if dim % tp:
                out.append(_violation(f"tp_{name}", f"TP={tp} does not divide {name}={dim}"))
    if tp > lim.max_tp:
        out.append(_violation("tp_node", f"TP={tp} exceeds {lim.gpus_per_node} GPUs per node "
                              "(cluster sets no allow_cross_node_tp)"))
    if cp > 1 and c["seq_length"] % (2 * cp):
        out.append(_violation("cp_seq", f"CP={cp} needs seq_length divisible by 2*CP={2 * cp}, got {c['seq_length']}"))


def _expert_rules(lim: _Limits, c: dict, facts: LayoutFacts, out: list[Violation]) -> None:
    """A MoE model's EP and ETP: they divide the experts and the expert FFN, ETP within a node (and 1 with
    biases), and EP with TP needs sequence parallelism."""
    if not lim.is_moe:
        return
    tp, ep, etp = c["tp"], c["ep"], c["etp"]
    if lim.num_experts % ep:
        out.append(_violation("ep_experts", f"EP={ep} does not divide num_experts={lim.num_experts}"))
    if lim.expert_ffn % etp:
        out.append(_violation("etp_moe_ffn", f"ETP={etp} does not divide moe_ffn_hidden_size={lim.expert_ffn}"))
    if etp > lim.max_tp:
        out.append(_violation("etp_node", f"ETP={etp} exceeds {lim.gpus_per_node} GPUs per node"))
    if lim.moe_bias and etp != 1:
        out.append(_violation("etp_moe_bias", f"ETP={etp} with add_bias_linear: megatron-core supports bias "
                              "in MoE only at ETP=1 (transformer_config.py: \"Bias in Moe is only supported "
                              "when ETP==1\")"))
    if ep > 1 and tp > 1 and not c["sequence_parallel"]:
        out.append(_violation("ep_tp_needs_sp", f"EP={ep} with TP={tp} needs sequence parallelism "
                              "(megatron-core moe_layer.py refuses it in training)"))


@by_identity(maxsize=4096)
def _decoders(stages: tuple[Stage, ...]) -> int:
    """Decoder layers a split builds, once per stages object (the split cache shares them across layouts)."""
    return sum(s.decoders for s in stages)


def _split_rules(lim: _Limits, c: dict, facts: LayoutFacts, out: list[Violation]) -> None:
    """The layer split Megatron accepts (`oracle.pipeline_split`), and GBS in whole micro-batches per DP rank."""
    if facts.split_error is not None:
        out.append(_violation(facts.split_error.code, facts.split_error.message))
    elif _decoders(facts.stages) != lim.num_layers:
        out.append(_violation("split_decoders", f"the split builds {_decoders(facts.stages)} decoder "
                              f"layers, num_layers is {lim.num_layers}"))
    if facts.dp and not facts.microbatches:
        out.append(_violation("gbs_mbs_dp", f"global batch {c['gbs']} is not divisible by MBS*DP = "
                              f"{c['mbs']}*{facts.dp}"))


def _legacy_grouped_gemm_rules(lim: _Limits, c: dict, facts: LayoutFacts, out: list[Violation]) -> None:
    """What megatron-core's legacy GroupedMLP (`moe_grouped_gemm` with `moe_use_legacy_grouped_gemm`) refuses:
    bias and moe_act recompute under FP8 (megatron-core 0.16.1 transformer/moe/experts.py GroupedMLP.__init__),
    and Primus-Turbo's grouped GEMM, which sync-free stages 2-3 need (Primus fd1eeab
    patches/args/rocm_arg_validation.py; transformer_engine_spec_provider.py `grouped_mlp_modules`)."""
    if not (lim.is_moe and c["moe_grouped_gemm"] and c["moe_use_legacy_grouped_gemm"]):
        return
    if lim.moe_bias:
        out.append(_violation("legacy_gg_bias", "the legacy GroupedMLP has no bias (experts.py: \"bias not supported "
                              "in Grouped GEMM yet\"); unset moe_use_legacy_grouped_gemm or add_bias_linear"))
    if c["fp8"] and "moe_act" in (c["recompute_modules"] or ()):
        out.append(_violation("legacy_gg_moe_act_fp8", "moe_act recompute under FP8 \"cannot work with the legacy "
                              "GroupedMLP\" (megatron-core experts.py)"))
    if c["sync_free_stage"] >= 2:
        out.append(_violation("legacy_gg_turbo", "sync-free stages 2-3 need Primus-Turbo's grouped GEMM, which "
                              "\"is incompatible with moe_use_legacy_grouped_gemm=True\" (Primus "
                              "rocm_arg_validation.py); set moe_use_legacy_grouped_gemm false"))


def _shared_overlap_rules(lim: _Limits, c: dict, facts: LayoutFacts, out: list[Violation]) -> None:
    """What megatron-core refuses of `moe_shared_expert_overlap` on a model with shared experts
    (Megatron-LM d98e8a6 transformer/transformer_config.py `__post_init__`): the allgather dispatcher ("only
    works with alltoall or flex token dispatcher"), the `shared_experts` recompute module ("cannot work with
    --moe-shared-expert-overlap") and EP all-to-all overlap ("disable moe_shared_expert_overlap when enabling
    overlap_moe_expert_parallel_comm")."""
    if not (lim.shared_experts and c["moe_shared_expert_overlap"]):
        return
    if facts.dispatch == ALLGATHER:
        out.append(_violation("shared_overlap_dispatcher", "moe_shared_expert_overlap only works with the "
                              "alltoall or flex token dispatcher"))
    if "shared_experts" in facts.recompute.modules:
        out.append(_violation("shared_overlap_recompute", "the shared_experts recompute module cannot work with "
                              "moe_shared_expert_overlap"))
    if c["overlap_moe_expert_parallel_comm"]:
        out.append(_violation("shared_overlap_ep_overlap", "moe_shared_expert_overlap is refused with "
                              "overlap_moe_expert_parallel_comm"))


def _pipeline_rules(lim: _Limits, c: dict, facts: LayoutFacts, out: list[Violation]) -> None:
    """The schedules' rules: interleaving's VPP and micro-batch groups (schedules.py), zero-bubble's PP, VPP and
    no recompute (Primus's zero-bubble patches)."""
    pp, vpp, schedule, m = c["pp"], c["vpp"], c["pp_schedule"], facts.microbatches
    if schedule == "interleaved":
        if vpp == 1:
            out.append(_violation("interleaved_vpp", "the interleaved schedule needs VPP>1"))
        group = c["microbatch_group_size_per_vp_stage"] or pp  # megatron-core default: PP
        if m and pp > 1 and not (pp <= group <= m):
            out.append(_violation("interleaved_microbatches", f"interleaving needs PP={pp} <= micro-batch group "
                                  f"{group} <= micro-batches {m} (microbatch_group_size_per_vp_stage)"))
        elif m and pp > 1 and m % group and m % group < pp:
            out.append(_violation("interleaved_microbatches", f"interleaving needs the micro-batch count ({m}) "
                                  f"divisible by the group {group}, or a last group of at least PP={pp}"))
    if schedule in ("zb", "zbv"):
        if pp == 1:
            out.append(_violation(f"{schedule}_needs_pp", f"the {schedule} schedule needs PP>1"))
        if c["recompute_granularity"] is not None:
            out.append(_violation(f"{schedule}_recompute", f"the {schedule} schedule excludes activation recompute"))
    if schedule == "zb" and vpp != 1:
        out.append(_violation("zb_vpp", "zero-bubble (ZB-H1) runs without virtual stages (VPP=1)"))
    if schedule == "zbv" and vpp != 2:
        out.append(_violation("zbv_vpp", f"ZBV needs VPP=2, got {vpp}"))


def _overlap_rules(lim: _Limits, c: dict, facts: LayoutFacts, out: list[Violation]) -> None:
    """CUDA graphs, EP and TP overlap: their rules, when any of them is on (most points have none)."""
    if c["overlap_moe_expert_parallel_comm"] or c["tp_comm_overlap"] or c["cuda_graph_impl"] != "none":
        _graph_rules(lim, c, facts, out)
        _ep_overlap_rules(lim, c, facts, out)
        _tp_overlap_rules(lim, c, facts, out)


def _graph_rules(lim: _Limits, c: dict, facts: LayoutFacts, out: list[Violation]) -> None:
    """CUDA graphs allow full recompute only as one full-iteration graph (megatron-core transformer_config.py
    `__post_init__`)."""
    if c["cuda_graph_impl"] != "none" and facts.recompute.full and not (
            c["cuda_graph_impl"] == "local" and "full_iteration" in (c["cuda_graph_scope"] or ())):
        out.append(_violation("cuda_graph_recompute", "CUDA graphs allow full recompute only with a local "
                              "full-iteration graph (cuda_graph_scope full_iteration)"))


def _ep_overlap_rules(lim: _Limits, c: dict, facts: LayoutFacts, out: list[Violation]) -> None:
    """overlap_moe_expert_parallel_comm (megatron-core transformer_config.py `__post_init__`; under PP it runs
    in the interleaved schedule's combined 1F1B)."""
    if not c["overlap_moe_expert_parallel_comm"]:
        return
    if not (lim.is_moe and c["ep"] > 1):
        out.append(_violation("ep_overlap_ep", "EP all-to-all overlap needs a MoE model with EP>1"))
    if facts.dispatch == ALLGATHER:
        out.append(_violation("ep_overlap_dispatcher",
                              "EP all-to-all overlap needs the alltoall or flex dispatcher"))
    if c["pp"] > 1 and c["vpp"] == 1:
        out.append(_violation("ep_overlap_vpp", "EP all-to-all overlap with PP>1 needs virtual pipeline stages"))
    elif c["pp"] > 1 and c["pp_schedule"] != "interleaved":
        out.append(_violation("ep_overlap_schedule", "EP all-to-all overlap with PP>1 runs in Megatron's "
                              "interleaved schedule (combined_1f1b.py), not under zero-bubble"))
    if facts.recompute.full or "moe" in facts.recompute.modules:
        out.append(_violation("ep_overlap_recompute", "EP all-to-all overlap excludes full recompute and the "
                              "moe recompute module"))
    if lim.mtp > 1:
        out.append(_violation("ep_overlap_mtp", "EP all-to-all overlap supports at most one MTP layer"))


def _tp_overlap_rules(lim: _Limits, c: dict, facts: LayoutFacts, out: list[Violation]) -> None:
    """tp_comm_overlap needs sequence parallelism (Megatron-LM arguments.py); Primus's ROCm port skips FP8 with
    its default reduce-scatter overlaps (te_patches/tp_overlap_patches.py)."""
    if not c["tp_comm_overlap"]:
        return
    if not (c["tp"] > 1 and c["sequence_parallel"]):
        out.append(_violation("tp_overlap_sp", "tp_comm_overlap needs TP>1 with sequence parallelism"))
    if lim.amd and c["fp8"]:
        out.append(_violation("tp_overlap_fp8_rocm", "Primus's ROCm tp_comm_overlap does not run under FP8 "
                              "with its default reduce-scatter overlaps"))


def _optimizer_rules(lim: _Limits, c: dict, facts: LayoutFacts, out: list[Violation]) -> None:
    """DP sharding and the optimizer: torch FSDP2 needs PP = EP = 1 and excludes the distributed optimizer and
    Megatron-FSDP (Megatron-LM arguments.py); the precision-aware optimizer and optimizer CPU offload need the
    distributed optimizer, and other state dtypes need the precision-aware one (optimizer_config.py)."""
    torch_fsdp = c["use_torch_fsdp2"]
    if torch_fsdp and c["use_distributed_optimizer"]:
        out.append(_violation("fsdp_distopt", "torch FSDP2 excludes the distributed optimizer"))
    if torch_fsdp and c["pp"] > 1:
        out.append(_violation("fsdp2_pp", "torch FSDP2 needs PP=1 (Megatron-LM arguments.py)"))
    if torch_fsdp and c["ep"] > 1:
        out.append(_violation("fsdp2_ep", "torch FSDP2 needs EP=1 (Megatron-LM arguments.py); Megatron-FSDP "
                              "(use_megatron_fsdp) supports EP"))
    if torch_fsdp and c["use_megatron_fsdp"]:
        out.append(_violation("fsdp_both", "use_torch_fsdp2 and use_megatron_fsdp exclude each other"))
    if c["use_precision_aware_optimizer"] and not c["use_distributed_optimizer"]:
        out.append(_violation("precision_aware_distopt", "the precision-aware optimizer needs the distributed "
                              "optimizer (megatron-core optimizer_config.py)"))
    if not c["use_precision_aware_optimizer"] and (
            c["main_grads_dtype"], c["main_params_dtype"], c["exp_avg_dtype"], c["exp_avg_sq_dtype"]) != ("fp32",) * 4:
        out.append(_violation("optimizer_dtypes", "main_grads/main_params/exp_avg/exp_avg_sq dtypes other than "
                              "fp32 need use_precision_aware_optimizer"))
    if c["optimizer_cpu_offload"] and not c["use_distributed_optimizer"]:
        out.append(_violation("offload_distopt", "optimizer CPU offload needs the distributed optimizer"))


def _recompute_module_rules(lim: _Limits, c: dict, facts: LayoutFacts, out: list[Violation]) -> None:
    """Selective-recompute modules the layout can run (megatron-core transformer_config.py)."""
    modules = facts.recompute.modules
    if "moe_act" in modules and not c["moe_grouped_gemm"]:
        out.append(_violation("recompute_moe_act", "recompute module moe_act needs moe_grouped_gemm"))
    if c["fp8"] and c["fp8_recipe"] == "delayed" and ("moe_act" in modules or "layernorm" in modules):
        out.append(_violation("recompute_fp8_delayed", "FP8 delayed scaling does not support the moe_act and "
                              "layernorm recompute modules (megatron-core transformer_config.py)"))
    if "mla_up_proj" in modules and not lim.mla:
        out.append(_violation("recompute_mla_up_proj", "recompute module mla_up_proj needs multi-latent attention"))


def _dispatch_rules(lim: _Limits, c: dict, facts: LayoutFacts, out: list[Violation]) -> None:
    """The MoE dispatch backend (`LayoutFacts.dispatch`) and Primus's sync-free stages: the flex dispatcher
    needs ETP*EP > 1 and, on ROCm, is Primus-Turbo's DeepEP, whose EP sizes are its buffer configs'."""
    moe_ep = lim.is_moe and c["ep"] > 1
    turbo = facts.dispatch == TURBO_DEEPEP
    if lim.is_moe and facts.dispatch in FLEX_BACKENDS and c["etp"] * c["ep"] == 1:
        out.append(_violation("flex_tp_ep", "the flex token dispatcher requires ETP*EP > 1 (megatron-core "
                              "token_dispatcher.py MoEFlexTokenDispatcher)"))
    if turbo and not moe_ep:
        out.append(_violation("deepep_moe", "DeepEP needs a MoE model with EP>1"))
    stage = c["sync_free_stage"]
    if stage > MAX_SYNC_FREE_STAGE:
        out.append(_violation("sync_free_range", f"sync_free_stage must be in 0..{MAX_SYNC_FREE_STAGE}, got {stage}"))
    elif stage and not moe_ep:
        out.append(_violation("sync_free_moe", "sync-free MoE stages need a MoE model with EP>1"))
    elif stage >= 2 and c["etp"] != 1:
        out.append(_violation("sync_free_etp", "sync-free stages 2-3 run Primus-Turbo grouped GEMMs, which need "
                              "ETP=1 (Primus primus_turbo.py PrimusTurboGroupedLinear)"))
    if turbo and moe_ep and c["etp"] * c["ep"] not in TURBO_DEEPEP_RANKS:
        out.append(_violation("turbo_deepep_ranks", f"Primus-Turbo DeepEP runs on ETP*EP in "
                              f"{sorted(TURBO_DEEPEP_RANKS)} ranks, got {c['etp'] * c['ep']} "
                              "(primus_turbo deep_ep/buffer.py)"))
    if lim.amd and facts.dispatch in (DEEPEP, HYBRIDEP):
        out.append(_violation("flex_rocm", "Megatron's flex dispatcher backends (DeepEP, HybridEP) are CUDA "
                              "libraries; on ROCm the flex path is Primus-Turbo's DeepEP (use_turbo_deepep)"))


def _precision_rules(lim: _Limits, c: dict, facts: LayoutFacts, out: list[Violation]) -> None:
    if c["fp8"] and not lim.has_fp8:
        out.append(_violation("fp8_gpu", f"{lim.gpu_name} has no FP8 tensor cores"))


def _recompute_layer_rules(lim: _Limits, c: dict, facts: LayoutFacts, out: list[Violation]) -> None:
    """Which layers full recompute takes: Primus's recompute_layer_ids (validate_specified_recompute_layers,
    recompute_layer_patches.py @fd1eeab) and recompute_num_layers within a chunk."""
    ids = c["recompute_layer_ids"]
    if ids:
        top = lim.num_layers + lim.mtp - 1
        if not facts.recompute.full:
            out.append(_violation("recompute_layer_ids_full", "recompute_layer_ids needs recompute_granularity full "
                                  f"(Primus recompute_layer_patches.py), got {c['recompute_granularity']}"))
        if ids[-1] > top:
            out.append(_violation("recompute_layer_ids_range", f"recompute layer id {ids[-1]} is past the last "
                                  f"layer {top} (decoder layers, then MTP depths; Primus recompute_layer_patches.py)"))
    n_rec = c["recompute_num_layers"]
    if n_rec and facts.recompute.full and facts.split_error is None:
        per_chunk = max(s.decoders for s in facts.stages)
        if n_rec > per_chunk:
            out.append(_violation("recompute_num_layers", f"recompute_num_layers={n_rec} exceeds the "
                                  f"{per_chunk} layers per stage{' chunk' if c['vpp'] > 1 else ''}"))
