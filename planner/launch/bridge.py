"""Megatron-Bridge: the recipe's Hydra overrides (`section.field=value`, ConfigContainer paths of
`src/megatron/bridge/training/config.py` at 067f987) after `scripts/training/run_recipe.py`.
Overlaps go through `comm_overlap.*` and precision through `mixed_precision.*`: Bridge's
`runtime_config_update` rewrites the same-named model/ddp fields from those sections."""

from __future__ import annotations

import shlex

from paratune.oracle.specs import ClusterSpec, EffectiveConfig, Workload
from paratune.oracle.specs.knobs import KNOB_SPECS

from .settings import COMPANIONS, companions, knob_values

# Bridge keeps these pairs in step (config.py: either on turns both on), so both are written.
_TWINS = {"ddp.use_distributed_optimizer": "optimizer.use_distributed_optimizer"}

WHERE = "a Megatron-Bridge checkout"


def _value(value: object) -> str:
    """A Hydra override value: null, true/false, [a,b], numbers bare, other strings quoted (a layout
    string's `|*()` are Hydra grammar)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (tuple, list)):
        return "[" + ",".join(str(v) for v in value) + "]"
    if isinstance(value, (int, float)):
        return str(value)
    return f'"{value}"' if any(c in str(value) for c in "|*()[]{},=") else str(value)


def hydra_overrides(cfg: EffectiveConfig, workload: Workload, cluster: ClusterSpec) -> list[str]:
    """Every knob as a `path=value` override, off included."""
    out = []
    for name, value in knob_values(cfg, workload.model, "megatron-bridge", cluster.gpu.vendor).items():
        path = KNOB_SPECS[name].bridge
        out.append(f"{path}={_value(value)}")
        if path in _TWINS:
            out.append(f"{_TWINS[path]}={_value(value)}")
    out += [f"{COMPANIONS[dest][1]}={_value(value)}"
            for dest, value in companions(cfg, workload.model, cluster.gpu.vendor).items()]
    out += [f"model.sequence_parallel={_value(cfg.sequence_parallel)}",  # resolve keeps it only with TP > 1
            f"model.seq_length={cfg.seq_length}",
            f"comm_overlap.overlap_param_gather={_value(workload.training.overlap_param_gather)}"]
    return out


def command(cfg: EffectiveConfig, workload: Workload, cluster: ClusterSpec) -> str:
    """The run_recipe.py line (from a Megatron-Bridge checkout, on every node; RECIPE names the recipe
    function the workload follows)."""
    launcher = (f"torchrun --nnodes {cluster.num_nodes} --nproc-per-node {cluster.gpus_per_node} "
                "--node-rank ${NODE_RANK:-0} --master-addr ${MASTER_ADDR:-localhost} "
                "--master-port ${MASTER_PORT:-6000}")
    lines = [f'{launcher} scripts/training/run_recipe.py --recipe "${{RECIPE:?the Bridge recipe function}}" '
             "--mode pretrain \\"]
    lines += [f"    {shlex.quote(o)} \\" for o in hydra_overrides(cfg, workload, cluster)]
    lines.append('    "$@"')
    return "\n".join(lines)
