"""How to run the winner: Primus-style env exports and a ready launch command."""

from __future__ import annotations

import shlex

from oracle.specs import EffectiveConfig

# PRIMUS_* variable -> EffectiveConfig field
ENV_NAMES = {
    "PRIMUS_TP": "tp", "PRIMUS_PP": "pp", "PRIMUS_EP": "ep", "PRIMUS_CP": "cp", "PRIMUS_ETP": "etp",
    "PRIMUS_VPP": "vpp", "PRIMUS_PP_LAYOUT": "pp_layout", "PRIMUS_MBS": "mbs", "PRIMUS_GBS": "gbs", "PRIMUS_PP_SCHEDULE": "pp_schedule",
    "PRIMUS_RECOMPUTE_GRANULARITY": "recompute_granularity", "PRIMUS_RECOMPUTE_METHOD": "recompute_method",
    "PRIMUS_RECOMPUTE_LAYERS": "recompute_num_layers", "PRIMUS_FP8": "fp8",
    "PRIMUS_DIST_OPT": "use_distributed_optimizer", "PRIMUS_FSDP2": "use_torch_fsdp2",
    "PRIMUS_TURBO_DEEPEP": "use_turbo_deepep", "PRIMUS_SYNC_FREE_MOE_STAGE": "sync_free_stage",
}


def _text(value: object) -> str:
    return "null" if value is None else str(value)


def env_exports(cfg: EffectiveConfig) -> list[str]:
    """`export PRIMUS_TP=...` lines for every knob of the layout."""
    return [f"export {name}={shlex.quote(_text(getattr(cfg, field)))}" for name, field in ENV_NAMES.items()]


def megatron_args(cfg: EffectiveConfig) -> list[str]:
    """The Megatron/Primus command-line overrides that reproduce the layout."""
    args = {
        "tensor_model_parallel_size": cfg.tp, "pipeline_model_parallel_size": cfg.pp,
        "context_parallel_size": cfg.cp, "expert_model_parallel_size": cfg.ep,
        "expert_tensor_parallel_size": cfg.etp, "micro_batch_size": cfg.mbs, "global_batch_size": cfg.gbs,
        "use_distributed_optimizer": cfg.use_distributed_optimizer, "use_torch_fsdp2": cfg.use_torch_fsdp2,
        "overlap_grad_reduce": cfg.overlap_grad_reduce, "cross_entropy_loss_fusion": cfg.cross_entropy_loss_fusion,
    }
    if cfg.pp_layout:  # the layout string sets VPP itself (megatron-core transformer_config.py)
        args["pipeline_model_parallel_layout"] = cfg.pp_layout
    elif cfg.vpp > 1:  # Megatron-LM's VPP flag (arguments.py); there is no --virtual-pipeline-model-parallel-size
        args["num_virtual_stages_per_pipeline_rank"] = cfg.vpp
    if cfg.pp_first_layers:
        args["decoder_first_pipeline_num_layers"] = cfg.pp_first_layers
    if cfg.pp_last_layers:
        args["decoder_last_pipeline_num_layers"] = cfg.pp_last_layers
    if cfg.pp_embedding_in_split:
        args["account_for_embedding_in_pipeline_split"] = True
    if cfg.pp_loss_in_split:
        args["account_for_loss_in_pipeline_split"] = True
    if cfg.recompute_granularity == "selective":
        args["recompute_modules"] = " ".join(cfg.recompute_modules or ())
    if not cfg.grad_reduce_in_fp32:
        args["grad_reduce_in_bf16"] = True
    if cfg.fp8 and cfg.fp8_param_gather:
        args["fp8_param_gather"] = True
    if cfg.use_megatron_fsdp:
        args |= {"use_megatron_fsdp": True, "data_parallel_sharding_strategy": cfg.data_parallel_sharding_strategy}
    if cfg.optimizer_cpu_offload:
        args |= {"optimizer_cpu_offload": True, "optimizer_offload_fraction": cfg.optimizer_offload_fraction}
    if cfg.ep > 1:
        args["moe_token_dispatcher_type"] = cfg.moe_token_dispatcher_type
        if cfg.moe_token_dispatcher_type == "flex":
            args["moe_flex_dispatcher_backend"] = cfg.moe_flex_dispatcher_backend
    if cfg.recompute_granularity:
        args["recompute_granularity"] = cfg.recompute_granularity
    if cfg.recompute_granularity == "full":
        args |= {"recompute_method": cfg.recompute_method, "recompute_num_layers": cfg.recompute_num_layers}
    if cfg.fp8:
        args["fp8"] = cfg.fp8
    if cfg.use_turbo_deepep:
        args |= {"enable_primus_turbo": True, "use_turbo_deepep": True,
                 "turbo_sync_free_moe_stage": cfg.sync_free_stage}
    if cfg.pp_schedule in ("zb", "zbv"):
        args |= {"patch_zero_bubble": True, "enable_zero_bubble": True}
    if cfg.pp_schedule == "zbv":
        args["zero_bubble_v_schedule"] = True
    return [f"--{k} {shlex.quote(_text(v))}" for k, v in args.items()]


def launch_command(cfg: EffectiveConfig, workload_file: str) -> str:
    """A Primus launch line for the layout (run from a Primus checkout)."""
    return f"EXP={shlex.quote(workload_file)} bash examples/run_pretrain.sh " + " ".join(megatron_args(cfg))
