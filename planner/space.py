"""The search space: every legal layout of a workload on a cluster, enumerated axis by axis.

Axes: TP, PP, CP, EP, ETP (= TP or 1), VPP with the pipeline split (`oracle.pipeline_split.
candidate_splits`: the even split where Megatron accepts it, else embedding/loss accounting, balanced
first/last counts and a balanced layout string), MBS, pipeline schedule, recompute (none/selective/
full), FP8 (off or the hybrid recipe; E4M3-only projects the same GEMM speed, so it is not a separate
point), MoE backend (all-to-all, DeepEP, DeepEP with sync-free stages 1-3) and DP sharding
(distributed optimizer, or FSDP2 where Megatron allows it: PP = EP = 1). GBS stays the workload's: it is the training recipe, not a layout.
Fused cross-entropy and overlapped gradient reduction are always on: in the oracle they cost no
memory and no time, so their off states are dominated and cannot hold the optimum.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import product
from math import prod

from oracle.legality import legal_axes, validate
from oracle.pipeline_split import PipelineSplit, candidate_splits
from oracle.specs import ClusterSpec, TrialConfig, Workload


def _schedules(pp: int, vpp: int, microbatches: int) -> list[str]:
    if pp == 1:
        return ["1f1b"] if vpp == 1 else []
    if vpp == 1:
        return ["1f1b", "zb"]
    out = ["interleaved"] if microbatches % pp == 0 else []
    return out + (["zbv"] if vpp == 2 else [])


def _recomputes(schedule: str) -> tuple[str, ...]:
    return ("none",) if schedule in ("zb", "zbv") else ("none", "selective", "full")


def _moe_backends(moe_ep: bool) -> list[tuple[bool, int]]:
    return [(False, 0), (True, 0), (True, 1), (True, 2), (True, 3)] if moe_ep else [(False, 0)]


def enumerate_space(workload: Workload, cluster: ClusterSpec) -> Iterator[TrialConfig]:
    """Yield every legal point once, in a fixed order."""
    moe = workload.model.is_moe
    fp8s = ["none", "hybrid"] if cluster.gpu.has_fp8 else ["none"]
    for layout in enumerate_layouts(workload, cluster):
        yield from knob_points(layout, fp8s, moe and layout["ep"] > 1)


def enumerate_layouts(workload: Workload, cluster: ClusterSpec) -> Iterator[dict]:
    """Yield every legal parallel layout (the axes before the feature knobs), in a fixed order."""
    model, t = workload.model, workload.training
    world, gbs = cluster.world_size, t.global_batch_size
    axes = legal_axes(model, cluster, seq_length=t.seq_length, gbs=gbs)
    layers, mtp = model.num_layers, model.mtp_num_layers
    for tp in axes.tp:
        for pp in axes.pp:
            splits = {v: candidate_splits(layers, mtp, pp, v) for v in axes.vpp if v == 1 or pp > 1}
            vpps = [v for v, options in splits.items() if options]
            for cp in axes.cp:
                if world % (tp * pp * cp):
                    continue
                dp = world // (tp * pp * cp)
                for ep in axes.ep:
                    for etp in sorted({tp, 1} & set(axes.etp)) if model.is_moe else [tp]:
                        if world % (etp * ep * pp):
                            continue
                        for mbs in axes.mbs:
                            if gbs % (mbs * dp):
                                continue
                            m = gbs // (mbs * dp)
                            for vpp in vpps:
                                for schedule, split in product(_schedules(pp, vpp, m), splits[vpp]):
                                    layout = dict(tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, mbs=mbs, vpp=vpp,
                                                  pp_schedule=schedule, **split_knobs(split))
                                    if _layout_legal(workload, cluster, layout):
                                        yield layout


def split_knobs(split: PipelineSplit) -> dict:
    """The TrialConfig knobs that set a pipeline split (all five: a trial replaces the whole split)."""
    return dict(pp_layout=split.layout or "none", pp_first_layers=split.first, pp_last_layers=split.last,
                pp_embedding_in_split=split.embedding, pp_loss_in_split=split.loss)


def _layout_legal(workload: Workload, cluster: ClusterSpec, layout: dict) -> bool:
    """Layout rules checked once with plain knobs; the knob loop below only builds legal combinations."""
    plain = TrialConfig(**layout, recompute_granularity="none", fp8="none", use_turbo_deepep=False,
                        sync_free_stage=0, use_torch_fsdp2=False, use_distributed_optimizer=True)
    return not validate(workload.model, workload.effective(plain), cluster)


def knob_points(layout: dict, fp8s: list[str], moe_ep: bool) -> Iterator[TrialConfig]:
    """Every legal combination of feature knobs on one layout."""
    for recompute, fp8, (deepep, sync_free), fsdp in product(*_knob_axes(layout, fp8s, moe_ep)):
        yield TrialConfig(**layout, recompute_granularity=recompute, fp8=fp8,
                          use_turbo_deepep=deepep, sync_free_stage=sync_free,
                          use_torch_fsdp2=fsdp, use_distributed_optimizer=not fsdp,
                          cross_entropy_loss_fusion=True, overlap_grad_reduce=True)


def knob_count(layout: dict, fp8s: list[str], moe_ep: bool) -> int:
    """How many points `knob_points` yields, without building them."""
    return prod(len(axis) for axis in _knob_axes(layout, fp8s, moe_ep))


def _knob_axes(layout: dict, fp8s: list[str], moe_ep: bool) -> tuple[tuple, ...]:
    """The feature-knob axes of one layout: recompute, FP8, MoE backend, FSDP."""
    fsdp = (False, True) if layout["pp"] == 1 and layout["ep"] == 1 else (False,)  # torch FSDP2: PP = EP = 1
    return _recomputes(layout["pp_schedule"]), tuple(fp8s), tuple(_moe_backends(moe_ep)), fsdp
