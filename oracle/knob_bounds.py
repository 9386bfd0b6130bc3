"""What a layout's knobs can be at all on one workload and cluster, checked where a config comes in (an MCP
tool's argument, the CLI's --config), before any work.

Legality (`legality.py`) judges a layout that could exist and records why Megatron refuses it; these bounds
refuse values no layout of this model on this cluster can have, whose work would grow with the value (the
pipeline timeline and the split grow with PP and VPP: PP = 10^6 took 12 s, 2^64+1 never ended) or whose
echo would be megabytes (a 1 MB pipeline layout). Each error names the knob and the bound.
"""

from __future__ import annotations

from .errors import InputError
from .legality import MAX_SYNC_FREE_STAGE
from .specs import TrialConfig, Workload

PARALLEL_SIZES = ("tp", "cp", "ep", "etp")  # each a group of GPUs: no larger than the cluster
MAX_GLOBAL_BATCH = 1 << 24  # sequences per iteration: 16.8 M, orders of magnitude past any training run
MAX_LAYOUT_CHARS = 4096  # a pipeline layout written out in full has a few characters per layer


def shown(value: int) -> str:
    """An integer as an error shows it: digits up to 12 of them, else its size (a 400-digit value must not be
    echoed, and past 4,300 digits Python will not even print it)."""
    return str(value) if abs(value) < 10**12 else f"a {value.bit_length()}-bit number"


def _at_most(trial: TrialConfig, knob: str, limit: int, why: str) -> None:
    value = getattr(trial, knob)
    if value is not None and value > limit:
        raise InputError(f"{shown(value)} is more than {limit:,}, {why}", key=knob)


def check_knob_bounds(workload: Workload, world_size: int, trial: TrialConfig) -> None:
    """Raise InputError naming the first knob of `trial` that no layout of `workload` on `world_size` GPUs can
    have: a parallel size over the world size, more pipeline stages than the model has layers (plus the
    embedding and loss stages), VPP over the stages a pipeline rank can hold, a micro-batch over the global
    batch, a layer count over the model's layers, an over-long pipeline layout."""
    model, training = workload.model, workload.training
    for knob in PARALLEL_SIZES:
        _at_most(trial, knob, world_size, "the world size (GPUs in the cluster)")
    stages = model.num_layers + model.mtp_num_layers + 2  # at most a stage per layer, the embedding and the loss
    _at_most(trial, "pp", min(world_size, stages),
             f"the most pipeline stages here (world size {world_size:,}; {stages} = the model's layers + 2)")
    pp = trial.pp or training.pipeline_model_parallel_size
    _at_most(trial, "vpp", max(1, stages // pp), f"the virtual stages a pipeline rank can hold ({stages} stages "
             f"over PP {pp})")
    _at_most(trial, "gbs", MAX_GLOBAL_BATCH, "more sequences per iteration than any training run takes")
    gbs = trial.gbs or training.global_batch_size
    _at_most(trial, "mbs", gbs, f"the global batch ({gbs}): a micro-batch is part of it")
    for knob in ("recompute_num_layers", "pp_first_layers", "pp_last_layers"):
        _at_most(trial, knob, model.num_layers, f"the model's {model.num_layers} layers")
    _at_most(trial, "sync_free_stage", MAX_SYNC_FREE_STAGE, "Primus's last sync-free stage")
    if trial.pp_layout is not None and len(trial.pp_layout) > MAX_LAYOUT_CHARS:
        raise InputError(f"{len(trial.pp_layout):,} characters, more than the {MAX_LAYOUT_CHARS:,} a pipeline "
                         "layout of any model takes", key="pp_layout")
