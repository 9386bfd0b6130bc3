"""Synthetic metrics for `--dry-run`: exercise the search loop and artifacts without the oracle."""

from __future__ import annotations

from oracle.layout import data_parallel
from oracle.specs import ClusterSpec, EffectiveConfig, EvalResult


def dry_result(cfg: EffectiveConfig, cluster: ClusterSpec) -> EvalResult:
    """A deterministic, clearly fake result derived from the config's hash (source='dry')."""
    unit = int(cfg.key[:8], 16) / 0xFFFFFFFF
    return EvalResult(
        legal=True, fits=True, source="dry", reason="dry run: synthetic metrics, not a projection",
        memory_per_gpu_gb=round(cluster.memory_cap_gb * (0.3 + 0.6 * unit), 3),
        memory_cap_gb=cluster.memory_cap_gb, tokens_per_s_per_gpu=round(1000.0 * (0.5 + unit), 3),
        derived_dp=data_parallel(cfg, cluster.world_size), config=cfg.model_dump(), config_key=cfg.key,
    )
