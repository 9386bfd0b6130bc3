"""Derived quantities of a layout: data-parallel sizes and which layers each pipeline stage holds."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .specs import EffectiveConfig, ModelArch


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: its dense and MoE layer counts and whether it holds embedding or output."""

    index: int
    dense_layers: int
    moe_layers: int
    has_embedding: bool
    has_output: bool

    @property
    def layers(self) -> int:
        return self.dense_layers + self.moe_layers


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


@lru_cache(maxsize=4096)
def _stages(pattern: tuple[int, ...], pp: int) -> tuple[Stage, ...]:
    counts = stage_layer_counts(len(pattern), pp)
    stages, start = [], 0
    for i, n in enumerate(counts):
        moe = sum(pattern[start : start + n])
        stages.append(Stage(i, n - moe, moe, has_embedding=i == 0, has_output=i == len(counts) - 1))
        start += n
    return tuple(stages)


def pipeline_stages(model: ModelArch, pp: int) -> tuple[Stage, ...]:
    """The stages of a PP-way split of `model` (empty when the split is impossible)."""
    return _stages(model.moe_layer_pattern, pp)


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
