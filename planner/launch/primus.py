"""Primus: an experiment YAML overlay that `examples/run_pretrain.sh` loads (EXP=...), with every knob
as a `modules.pre_trainer.overrides` key (Primus fd1eeab: `primus/core/launcher/parser.py` reads
work_group/user_name/exp_name/workspace and modules.pre_trainer.{framework,config,model,overrides};
`extends:` merges the workload's own experiment under it). Layout strings and every other value live
in the YAML: run_pretrain.sh re-splits its command line through `eval`."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml

from paratune.oracle.inputs.yaml_io import read_mapping, resolve_templates
from paratune.oracle.specs import ClusterSpec, EffectiveConfig, Workload
from paratune.oracle.stacks import KNOB_SPECS

from .settings import companions, knob_values, primus_extras

OVERLAY_NAME = "winner.primus.yaml"
# ModelArch fields that are not Megatron arguments
_NOT_ARGS = {"name", "source"}


def overrides(cfg: EffectiveConfig, workload: Workload, cluster: ClusterSpec) -> dict[str, Any]:
    """Every knob under its Primus key, off included, then the keys the knobs need beside them."""
    out: dict[str, Any] = {}
    for name, value in knob_values(cfg, workload.model, "primus", cluster.gpu.vendor).items():
        key = KNOB_SPECS[name].primus
        assert key is not None  # knob_values yields only the knobs this stack has
        if name == "grad_reduce_in_fp32":
            value = not value  # Primus's key is grad_reduce_in_bf16
        out[key] = list(value) if isinstance(value, tuple) else value
    extra = {k: list(v) if isinstance(v, tuple) else v
             for k, v in companions(cfg, workload.model, cluster.gpu.vendor).items()}
    return out | extra | primus_extras(cfg) | {"seq_length": cfg.seq_length, "sequence_parallel": cfg.sequence_parallel}


def overlay(cfg: EffectiveConfig, workload: Workload, cluster: ClusterSpec, workload_file: str) -> dict[str, Any]:
    """The overlay experiment: the workload's own Primus experiment extended, or (for a native workload)
    a fresh one on Primus's base model preset with the architecture in its overrides."""
    path = Path(workload_file).resolve()
    # literal values: run_pretrain.sh reads the meta keys with yaml.safe_load, without templates or extends
    raw = resolve_templates(read_mapping(path)) if path.is_file() else {}
    trainer = (raw.get("modules") or {}).get("pre_trainer") if isinstance(raw.get("modules"), dict) else None
    layout = overrides(cfg, workload, cluster)
    meta = {"work_group": raw.get("work_group", "paratune"), "user_name": raw.get("user_name", "paratune"),
            "exp_name": f"{raw.get('exp_name', workload.name)}-paratune", "workspace": raw.get("workspace", "./output")}
    if isinstance(trainer, dict):  # a Primus experiment: keep its presets, lay the winner over them
        module = {k: trainer[k] for k in ("framework", "config", "model") if k in trainer}
        return {"extends": [str(path)], **meta, "modules": {"pre_trainer": {**module, "overrides": layout}}}
    arch = {k: v for k, v in workload.model.model_dump().items() if k not in _NOT_ARGS and v is not None}
    if workload.model.num_query_groups:  # Megatron reads num_query_groups only under GQA (arguments.py)
        arch["group_query_attention"] = True
    module = {"framework": "megatron", "config": "pre_trainer.yaml", "model": "language_model.yaml"}
    return {**meta, "modules": {"pre_trainer": {**module, "overrides": arch | layout}}}


def overlay_text(cfg: EffectiveConfig, workload: Workload, cluster: ClusterSpec, workload_file: str) -> str:
    head = "# paratune winner as a Primus experiment overlay: EXP=<this file> bash examples/run_pretrain.sh\n"
    return head + yaml.safe_dump(overlay(cfg, workload, cluster, workload_file), sort_keys=False)


def command(cluster: ClusterSpec, overlay_path: str) -> str:
    """The run_pretrain.sh line (from a Primus checkout, on every node; the variables are the script's)."""
    return (f"EXP={shlex.quote(overlay_path)} NNODES={cluster.num_nodes} GPUS_PER_NODE={cluster.gpus_per_node} "
            "NODE_RANK=${NODE_RANK:-0} MASTER_ADDR=${MASTER_ADDR:-localhost} MASTER_PORT=${MASTER_PORT:-1234} "
            "bash examples/run_pretrain.sh")
