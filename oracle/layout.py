"""Derived quantities of a layout: data-parallel sizes, micro-batch counts and layers per stage."""

from __future__ import annotations

from functools import lru_cache

from .specs import EffectiveConfig


@lru_cache(maxsize=4096)
def stage_layer_counts(num_layers: int, pp: int) -> tuple[int, ...]:
    """Layers per stage: even when PP divides the layers, else ceil(L/PP) each and the rest on the last
    stage (Megatron's `decoder_last_pipeline_num_layers`); empty when no such split exists."""
    if pp > num_layers:
        return ()
    if num_layers % pp == 0:
        return (num_layers // pp,) * pp
    per = -(-num_layers // pp)
    last = num_layers - per * (pp - 1)
    return (per,) * (pp - 1) + (last,) if last >= 1 else ()


def replicas(world: int, group: int) -> int:
    """How many copies of a `group`-GPU model-parallel group fill `world`: 0 when it does not divide."""
    return world // group if world % group == 0 else 0


def data_parallel(cfg: EffectiveConfig, world: int) -> int:
    """DP of the attention/dense part: world / (TP·PP·CP), 0 when it does not divide."""
    return replicas(world, cfg.tp * cfg.pp * cfg.cp)


def expert_data_parallel(cfg: EffectiveConfig, world: int) -> int:
    """DP of the expert part: world / (ETP·EP·PP), 0 when it does not divide."""
    return replicas(world, cfg.etp * cfg.ep * cfg.pp)


def microbatch_count(gbs: int, mbs: int, dp: int) -> int:
    """GBS / (MBS·DP), 0 when it does not divide (or DP is 0)."""
    return gbs // (mbs * dp) if dp and gbs % (mbs * dp) == 0 else 0


def num_microbatches(cfg: EffectiveConfig, world: int) -> int:
    """Micro-batches per iteration per pipeline: GBS / (MBS·DP), 0 when it does not divide."""
    return microbatch_count(cfg.gbs, cfg.mbs, data_parallel(cfg, world))
