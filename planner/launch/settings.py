"""The winner's knobs as one stack spells them: every knob explicit, off included, plus the arguments
the stack needs beside them (each with the stack's rule that requires it)."""

from __future__ import annotations

from paratune.oracle.specs import EffectiveConfig, ModelArch
from paratune.oracle.specs.knobs import KNOB_SPECS, MOE_KNOBS, knob_available
from paratune.oracle.stacks import Stack


def knob_values(cfg: EffectiveConfig, model: ModelArch, stack: Stack, vendor: str) -> dict[str, object]:
    """knob -> value of every registry knob `stack` has on `vendor` GPUs (None: the feature off / unset)."""
    out: dict[str, object] = {}
    for name, spec in KNOB_SPECS.items():
        if spec.arg(stack) is None or not knob_available(name, stack, vendor):
            continue
        if name in MOE_KNOBS and not model.is_moe:
            continue
        out[name] = getattr(cfg, name)
    if cfg.recompute_granularity != "full":
        out["recompute_method"] = out["recompute_num_layers"] = None
    if cfg.recompute_granularity != "selective":
        out["recompute_modules"] = None
    # the layout string fixes VPP itself (Megatron refuses both, arguments.py); VPP 1 means none
    if cfg.pp_layout or out.get("vpp") == 1:
        out["vpp"] = None
    return out


def primus_extras(cfg: EffectiveConfig) -> dict[str, object]:
    """Primus keys the winner's Primus-Turbo and schedule knobs need beside them (Primus fd1eeab)."""
    turbo = cfg.use_turbo_deepep or cfg.sync_free_stage > 0
    out: dict[str, object] = {
        # rocm_arg_validation.py: sync-free stages and Turbo DeepEP need Primus-Turbo on
        "enable_primus_turbo": turbo,
        # stage 2-3 require PrimusTurboGroupedLinear, which refuses the legacy grouped GEMM
        "use_turbo_grouped_gemm": cfg.sync_free_stage >= 2,
        # the workload's own (its experiment file may say otherwise); stages 2-3 need it off (legality)
        "moe_use_legacy_grouped_gemm": cfg.moe_use_legacy_grouped_gemm,
        # zero-bubble patches: ZB-H1 = patch_zero_bubble; ZB-V adds the V schedule (zero_bubble.yaml)
        "patch_zero_bubble": cfg.pp_schedule in ("zb", "zbv"),
        "zero_bubble_v_schedule": cfg.pp_schedule == "zbv",
    }
    if cfg.use_turbo_deepep:  # DeepEP asserts an fp32 router and no shared-expert overlap
        out |= {"moe_router_dtype": "fp32", "moe_shared_expert_overlap": False}
    if cfg.use_torch_fsdp2:  # Megatron-LM arguments.py: FSDP2 refuses gradient-accumulation fusion
        out["gradient_accumulation_fusion"] = False
    return out


# Settings the projection reads that are not search knobs, by their Megatron-LM dest, with the
# Megatron-LM flag and the Megatron-Bridge path (Primus keys are the dests: trainer_base.yaml,
# language_model.yaml).
COMPANIONS = {
    "data_parallel_sharding_strategy": ("--data-parallel-sharding-strategy", "ddp.data_parallel_sharding_strategy"),
    "moe_grouped_gemm": ("--moe-grouped-gemm", "model.moe_grouped_gemm"),
    # Megatron-Bridge 067f987 has no such path (its megatron-core dropped the legacy GroupedMLP), so a Bridge
    # workload never sets it and it is written only where on
    "moe_use_legacy_grouped_gemm": ("--moe-use-legacy-grouped-gemm", "model.moe_use_legacy_grouped_gemm"),
    "use_precision_aware_optimizer": ("--use-precision-aware-optimizer", "optimizer.use_precision_aware_optimizer"),
    "main_grads_dtype": ("--main-grads-dtype", "optimizer.main_grads_dtype"),
    "main_params_dtype": ("--main-params-dtype", "optimizer.main_params_dtype"),
    "exp_avg_dtype": ("--exp-avg-dtype", "optimizer.exp_avg_dtype"),
    "exp_avg_sq_dtype": ("--exp-avg-sq-dtype", "optimizer.exp_avg_sq_dtype"),
    "cuda_graph_scope": ("--cuda-graph-scope", "model.cuda_graph_scope"),
    "microbatch_group_size_per_vp_stage": ("--microbatch-group-size-per-virtual-pipeline-stage",
                                           "model.microbatch_group_size_per_vp_stage"),
}


def companions(cfg: EffectiveConfig, model: ModelArch, vendor: str) -> dict[str, object]:
    """dest -> value of the non-knob settings the projection depends on, where they apply."""
    out: dict[str, object] = {}
    if cfg.use_megatron_fsdp:
        out["data_parallel_sharding_strategy"] = cfg.data_parallel_sharding_strategy
    if model.is_moe:
        out["moe_grouped_gemm"] = cfg.moe_grouped_gemm
        if cfg.moe_grouped_gemm and cfg.moe_use_legacy_grouped_gemm:
            out["moe_use_legacy_grouped_gemm"] = True
    if cfg.use_precision_aware_optimizer or cfg.optimizer_cpu_offload:  # offload requires it (arguments.py)
        out |= {"use_precision_aware_optimizer": True, "main_grads_dtype": cfg.main_grads_dtype,
                "main_params_dtype": cfg.main_params_dtype, "exp_avg_dtype": cfg.exp_avg_dtype,
                "exp_avg_sq_dtype": cfg.exp_avg_sq_dtype}
    if cfg.cuda_graph_impl != "none" and cfg.cuda_graph_scope and vendor == "nvidia":
        out["cuda_graph_scope"] = cfg.cuda_graph_scope
    if cfg.vpp > 1 and cfg.microbatch_group_size_per_vp_stage:
        out["microbatch_group_size_per_vp_stage"] = cfg.microbatch_group_size_per_vp_stage
    return out
