"""The deterministic seed plan: single-axis sweeps anchored on the workload's baseline (DESIGN §5).

Tiers, in order: baseline; recompute; MoE dispatcher and EP overlap; TP overlap; FP8; the combined
tier-A stack; pipeline schedules; baseline neighbours (VPP x MBS x recompute); DP sharding; a coarse
TP x PP x EP x CP grid that keeps the baseline's value of every axis in its lists. Only candidates
that are legal and that every search rule allows (`oracle.constraints`: stack, precision, the
user's pins), no duplicates.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from paratune.oracle.constraints import search_axes
from paratune.oracle.evaluate import layout_violations
from paratune.oracle.layout import ALLTOALL, DISPATCH_KNOBS, FLEX_BACKENDS
from paratune.oracle.pipeline_split import candidate_splits
from paratune.oracle.specs import ClusterSpec, EffectiveConfig, TrialConfig, Workload

from .space import menu, split_knobs

Candidate = tuple[str, TrialConfig]


def _near(values: list[int], anchor: int, width: int = 1) -> list[int]:
    """`anchor` and its `width` nearest legal neighbours on each side."""
    if anchor not in values:
        return values[: 2 * width + 1]
    i = values.index(anchor)
    return values[max(0, i - width): i + width + 1]


def _tiers(workload: Workload, cluster: ClusterSpec, base: EffectiveConfig) -> Iterator[Candidate]:
    model = workload.model
    axes = search_axes(workload, cluster)
    moe_ep = model.is_moe and base.ep > 1
    yield "baseline", TrialConfig()
    for rc in ("none", "selective", "full"):
        yield "recompute", TrialConfig(recompute_granularity=rc)
    m = menu(workload, cluster)
    alltoall = DISPATCH_KNOBS[ALLTOALL]
    deepep = next((d for backend, d in m.dispatchers if backend in FLEX_BACKENDS), alltoall)
    if moe_ep:
        for _, dispatch in m.dispatchers:
            yield "moe_backend", TrialConfig(**dispatch)
        for dispatch in (alltoall, deepep):
            yield "moe_backend", TrialConfig(**dispatch, overlap_moe_expert_parallel_comm=True)
    tp_overlap = base.tp > 1 and base.sequence_parallel and True in axes.tp_comm_overlap
    if tp_overlap:
        yield "tp_overlap", TrialConfig(tp_comm_overlap=True)
    for fp8 in axes.fp8:
        yield "fp8", TrialConfig(fp8=fp8)
    fp8 = next((f for f in axes.fp8 if f != "none"), axes.fp8[0])
    tier_a = {"fp8": fp8, **m.fixed,
              "tp_comm_overlap": tp_overlap and not (m.rocm and fp8 != "none")}  # Primus's ROCm TP overlap: no FP8
    if moe_ep:
        tier_a |= deepep
    yield "tier_a", TrialConfig(**tier_a)
    yield "tier_a", TrialConfig(**tier_a, recompute_granularity="none")
    if base.pp > 1:
        yield "schedule", TrialConfig(pp_schedule="zb", vpp=1, recompute_granularity="none")
        yield "schedule", TrialConfig(pp_schedule="zbv", vpp=2, recompute_granularity="none")
        yield "schedule", TrialConfig(**tier_a, pp_schedule="zb", vpp=1, recompute_granularity="none")
    layers, mtp = model.num_layers, model.mtp_num_layers
    vpps = [v for v in axes.vpp if candidate_splits(layers, mtp, base.pp, v)] if base.pp > 1 else [1]
    for vpp, mbs, rc in itertools.product(_near(vpps, base.vpp), _near(axes.mbs, base.mbs),
                                          ("none", "selective", "full")):
        knobs = dict(vpp=vpp, mbs=mbs, recompute_granularity=rc, pp_schedule="interleaved" if vpp > 1 else "1f1b")
        yield "neighbours", TrialConfig(**knobs)  # the workload's own split, where it still holds
        yield "neighbours", TrialConfig(**knobs, **split_knobs(candidate_splits(layers, mtp, base.pp, vpp)[0]))
    yield "dp_sharding", TrialConfig(use_distributed_optimizer=True, use_torch_fsdp2=False)
    yield "dp_sharding", TrialConfig(use_distributed_optimizer=False, use_torch_fsdp2=False)
    yield "dp_sharding", TrialConfig(use_distributed_optimizer=False, use_torch_fsdp2=True)
    grid = itertools.product(_near(axes.tp, base.tp), _near(axes.pp, base.pp), _near(axes.ep, base.ep),
                             _near(axes.cp, base.cp))
    for tp, pp, ep, cp in grid:
        split = candidate_splits(layers, mtp, pp, 1)
        yield "grid", TrialConfig(tp=tp, pp=pp, ep=ep, cp=cp, vpp=1, pp_schedule="1f1b",
                                  etp=tp if base.etp == base.tp else None, **(split_knobs(split[0]) if split else {}))


def seed_plan(workload: Workload, cluster: ClusterSpec, budget: int | None = None) -> list[Candidate]:
    """Legal, distinct candidates in tier order (at most `budget`), each tagged `seed:<tier>`."""
    base = workload.effective()
    seen: set[str] = set()
    out: list[Candidate] = []
    for tier, trial in _tiers(workload, cluster, base):
        cfg = workload.effective(trial)
        if cfg.key in seen or layout_violations(workload, cluster, cfg):
            continue
        seen.add(cfg.key)
        out.append((f"seed:{tier}", trial))
        if budget is not None and len(out) >= budget:
            break
    return out
