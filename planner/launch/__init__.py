"""How to run the winner on the cluster's stack: the command, and the files it reads.

Primus gets an experiment overlay and its `run_pretrain.sh` line; Megatron-LM a `torchrun
pretrain_gpt.py` line; Megatron-Bridge the recipe's Hydra overrides. Every knob is written out,
including those the winner turns off."""

from __future__ import annotations

from pydantic import BaseModel, Field

from paratune.oracle.specs import ClusterSpec, EffectiveConfig, Workload

from . import bridge, megatron_lm, primus


class LaunchPlan(BaseModel):
    """The winner's launch on one stack: its command and the files (name -> text) it needs beside it."""

    stack: str
    where: str  # the checkout the command runs from (launch.sh says so first)
    command: str
    files: dict[str, str] = Field(default_factory=dict)


def launch_plan(cfg: EffectiveConfig, workload: Workload, cluster: ClusterSpec, workload_file: str) -> LaunchPlan:
    """The launch of `cfg` on the cluster's stack; the command finds its files beside launch.sh."""
    if cluster.stack == "primus":
        return LaunchPlan(stack="primus", where=primus.WHERE, command=primus.command(cluster),
                          files={primus.OVERLAY_NAME: primus.overlay_text(cfg, workload, cluster, workload_file)})
    if cluster.stack == "megatron-bridge":
        return LaunchPlan(stack="megatron-bridge", where=bridge.WHERE, command=bridge.command(cfg, workload, cluster))
    return LaunchPlan(stack="megatron-lm", where=megatron_lm.WHERE, command=megatron_lm.command(cfg, workload, cluster))
