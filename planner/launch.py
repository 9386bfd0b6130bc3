"""How to run the winner: Primus-style env exports and a ready launch command."""

from __future__ import annotations

import shlex

from oracle.specs import EffectiveConfig

# PRIMUS_* variable -> EffectiveConfig field
ENV_NAMES = {
    "PRIMUS_TP": "tp", "PRIMUS_PP": "pp", "PRIMUS_EP": "ep", "PRIMUS_CP": "cp", "PRIMUS_ETP": "etp",
    "PRIMUS_VPP": "vpp", "PRIMUS_MBS": "mbs", "PRIMUS_GBS": "gbs", "PRIMUS_PP_SCHEDULE": "pp_schedule",
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
    if cfg.vpp > 1:
        args["virtual_pipeline_model_parallel_size"] = cfg.vpp
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
