"""Primus: a self-contained experiment YAML that Primus's `PrimusParser` loads from a Primus checkout.

Primus fd1eeab, `primus/core/launcher/parser.py`: an experiment has the meta keys work_group,
user_name, exp_name, workspace (`parse_meta_info`) and `modules.<trainer>.{framework, config, model,
overrides}` (`parse_trainer_module`); `config` and `model` are preset names that `PresetLoader.load`
looks up in the checkout's `primus/configs/{modules,models}/<framework>/`, and `overrides` deep-merge
over both. So the overlay names presets the checkout has and carries everything else itself:

* the model: the workload's Primus preset (its path under the models folder) when it was read from the
  Primus tree; otherwise Primus's base preset `language_model.yaml`, with every key the workload's own
  model file (or the native workload's architecture) gave, at the value paratune read;
* the experiment's own `overrides` (its `extends:` parents merged, templates resolved: run_pretrain.sh
  reads the meta keys with yaml.safe_load), alias spellings of a knob dropped;
* every knob of the winner, off included (`overrides` below).

Nothing in it points into paratune's clone, so it runs wherever it is copied. `launch.sh` runs
Primus's `examples/run_pretrain.sh` from the checkout with `EXP` at the overlay beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from paratune.oracle.inputs.primus_tree import (
    experiment_mapping,
    is_experiment,
    models_dir,
    resolve_trainer,
)
from paratune.oracle.inputs.yaml_io import read_mapping
from paratune.oracle.specs import ClusterSpec, EffectiveConfig, Workload
from paratune.oracle.specs.knobs import KNOB_SPECS

from .settings import companions, knob_values, primus_extras

OVERLAY_NAME = "winner.primus.yaml"
BASE_MODEL = "language_model.yaml"  # Primus's base model preset, which every Megatron model preset extends
META_KEYS = ("work_group", "user_name", "exp_name", "workspace")
# ModelArch fields that are not Megatron arguments
_NOT_ARGS = {"name", "source"}
# Other spellings of what a knob's key sets (Megatron-LM arguments.py, Primus trainer_base.yaml): an
# experiment's value for one of them would contradict the winner's, so the overlay resets them.
KNOB_ALIASES: dict[str, Any] = {
    "virtual_pipeline_model_parallel_size": None, "num_layers_per_virtual_pipeline_stage": None,
    "num_layers_in_first_pipeline_stage": None, "num_layers_in_last_pipeline_stage": None,
    "recompute_activations": False, "moe_layer_recompute": False,
}


def overrides(cfg: EffectiveConfig, workload: Workload, cluster: ClusterSpec) -> dict[str, Any]:
    """Every knob under its Primus key, off included, then the keys the knobs need beside them."""
    out: dict[str, Any] = {}
    for name, value in knob_values(cfg, workload.model, "primus", cluster.gpu.vendor).items():
        key = KNOB_SPECS[name].primus
        assert key is not None  # knob_values yields only the knobs this stack has
        if "primus" in KNOB_SPECS[name].inverted:
            value = not value  # the key is the knob's negation (grad_reduce_in_bf16)
        out[key] = list(value) if isinstance(value, tuple) else value
    extra = {k: list(v) if isinstance(v, tuple) else v
             for k, v in companions(cfg, workload.model, cluster.gpu.vendor).items()}
    return out | extra | primus_extras(cfg) | {"seq_length": cfg.seq_length, "sequence_parallel": cfg.sequence_parallel}


def _architecture(workload: Workload) -> dict[str, Any]:
    """The model as Megatron arguments (a native workload's card, for Primus's base preset)."""
    arch = {k: v for k, v in workload.model.model_dump().items() if k not in _NOT_ARGS and v is not None}
    arch = {k: list(v) if isinstance(v, tuple) else v for k, v in arch.items()}
    if workload.model.num_query_groups:  # Megatron reads num_query_groups only under GQA (arguments.py)
        arch["group_query_attention"] = True
    return arch


def _experiment_part(path: Path, workload: Workload) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(module name, the module's framework/config/model, its overrides) of a Primus experiment, with the
    model named as the checkout resolves it."""
    data = experiment_mapping(path)
    modules = data.get("modules") or {}
    module = next(m for m in ("pre_trainer", "post_trainer") if isinstance(modules.get(m), dict))
    trainer = modules[module]
    root = Path(workload.primus_root) if workload.primus_root else None
    resolved = resolve_trainer(path, trainer, root, module=module)
    own = dict(trainer.get("overrides") or {})
    model_path = resolved.model_chain[-1]
    folder = models_dir(root, trainer.get("framework") or "megatron").resolve() if root else None
    if folder is not None and model_path.is_relative_to(folder):
        model = model_path.relative_to(folder).as_posix()
    else:  # a model file of the user's: its keys, at the values read, over Primus's base preset
        model = BASE_MODEL
        model_keys = {k for p in resolved.model_chain for k in read_mapping(p) if k != "extends"}
        own = {k: resolved.args[k] for k in sorted(model_keys) if k in resolved.args} | own
    presets = {"framework": trainer.get("framework") or "megatron", "config": trainer.get("config", "pre_trainer.yaml"),
               "model": model}
    return module, presets, own


def overlay(cfg: EffectiveConfig, workload: Workload, cluster: ClusterSpec, workload_file: str) -> dict[str, Any]:
    """The overlay experiment: the workload's own Primus experiment (or, for a native workload, Primus's base
    model preset with the architecture) with the winner laid over it, self-contained."""
    path = Path(workload_file).resolve()
    raw = experiment_mapping(path) if path.is_file() and is_experiment(path, read_mapping(path)) else {}
    meta = {"work_group": raw.get("work_group", "paratune"), "user_name": raw.get("user_name", "paratune"),
            "exp_name": f"{raw.get('exp_name', workload.name)}-paratune", "workspace": raw.get("workspace", "./output")}
    if raw:
        module, presets, own = _experiment_part(path, workload)
    else:
        module, own = "pre_trainer", _architecture(workload)
        presets = {"framework": "megatron", "config": "pre_trainer.yaml", "model": BASE_MODEL}
    layout = overrides(cfg, workload, cluster)
    aliases = {k: v for k, v in KNOB_ALIASES.items() if k in own and k not in layout}
    return {**meta, "modules": {module: {**presets, "overrides": own | aliases | layout}}}


def overlay_text(cfg: EffectiveConfig, workload: Workload, cluster: ClusterSpec, workload_file: str) -> str:
    head = ("# paratune winner as a Primus experiment (self-contained; its presets are the Primus checkout's).\n"
            "# From a Primus checkout: EXP=<this file> bash examples/run_pretrain.sh (launch.sh beside it does).\n")
    return head + yaml.safe_dump(overlay(cfg, workload, cluster, workload_file), sort_keys=False)


WHERE = "a Primus checkout"


def command(cluster: ClusterSpec) -> str:
    """launch.sh's body, run on every node from a Primus checkout (or with PRIMUS_ROOT at one): EXP is the
    overlay beside launch.sh, found from the script's own path before changing folder, so the script can be
    called by any path and neither file needs the other's folder as the working directory."""
    return ('HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"\n'
            'cd "${PRIMUS_ROOT:-$PWD}" && test -f examples/run_pretrain.sh '
            '|| { echo "launch.sh: run it from a Primus checkout (or set PRIMUS_ROOT to one)" >&2; exit 2; }\n'
            f'EXP="$HERE/{OVERLAY_NAME}" NNODES={cluster.num_nodes} GPUS_PER_NODE={cluster.gpus_per_node} '
            "NODE_RANK=${NODE_RANK:-0} MASTER_ADDR=${MASTER_ADDR:-localhost} MASTER_PORT=${MASTER_PORT:-1234} "
            'bash examples/run_pretrain.sh "$@"')
