"""Legality as code: per-axis legal sets and `validate`, every rule derived from model and cluster."""

from __future__ import annotations

import math
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from .identity_cache import by_identity
from .layout import microbatch_count, replicas, stage_layer_counts
from .specs import ClusterSpec, EffectiveConfig, ModelArch, Violation
from .specs.trusted import trusted

SCHEDULES = ("1f1b", "interleaved", "zb", "zbv")
MAX_SYNC_FREE_STAGE = 3


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


class LegalAxes(BaseModel):
    """The values each knob may take on its own; cross-axis rules are `validate`'s job."""

    model_config = ConfigDict(frozen=True)

    tp: list[int]
    pp: list[int]
    cp: list[int]
    ep: list[int]
    etp: list[int]
    vpp: list[int]
    mbs: list[int]
    pp_schedule: list[str]
    recompute_granularity: list[str]
    fp8: list[str]
    use_distributed_optimizer: list[bool]
    use_torch_fsdp2: list[bool]
    use_turbo_deepep: list[bool]
    sync_free_stage: list[int]
    world_size: int


def _tp_ok(model: ModelArch, tp: int) -> bool:
    dims = (model.num_attention_heads, model.groups, model.hidden_size, model.ffn)
    return all(d % tp == 0 for d in dims)


def _max_tp(cluster: ClusterSpec) -> int:
    return cluster.world_size if cluster.allow_cross_node_tp else cluster.gpus_per_node


def legal_axes(model: ModelArch, cluster: ClusterSpec, *, seq_length: int, gbs: int) -> LegalAxes:
    """Per-axis legal values for this model on this cluster."""
    world = cluster.world_size
    ws = _divisors(world)
    pp = [p for p in ws if stage_layer_counts(model.num_layers, p)]
    moe = model.is_moe
    return LegalAxes(
        tp=[t for t in ws if t <= _max_tp(cluster) and _tp_ok(model, t)],
        pp=pp,
        cp=[c for c in ws if c == 1 or seq_length % (2 * c) == 0],
        ep=[e for e in ws if moe and model.num_experts % e == 0] if moe else [1],
        etp=[t for t in ws if t <= _max_tp(cluster) and model.expert_ffn % t == 0] if moe else [1],
        vpp=sorted({1} | {v for p in pp if p > 1 for v in range(2, model.num_layers // p + 1)
                          if model.num_layers % (p * v) == 0}),
        mbs=[m for m in _divisors(gbs) if m <= 16],
        pp_schedule=list(SCHEDULES),
        recompute_granularity=["none", "selective", "full"],
        fp8=["none", "hybrid", "e4m3"] if cluster.gpu.has_fp8 else ["none"],
        use_distributed_optimizer=[False, True],
        use_torch_fsdp2=[False, True],
        use_turbo_deepep=[False, True] if moe else [False],
        sync_free_stage=list(range(MAX_SYNC_FREE_STAGE + 1)) if moe else [0],
        world_size=world,
    )


@dataclass(frozen=True, slots=True)
class _Limits:
    """What the rules read of a model and a cluster, as plain numbers (built once per pair)."""

    world: int
    max_tp: int
    gpus_per_node: int
    tp_dims: tuple[tuple[int, str], ...]  # sizes TP must divide, with their argument names
    tp_gcd: int  # their greatest common divisor: TP divides all of them iff it divides this
    is_moe: bool
    num_experts: int
    expert_ffn: int
    num_layers: int
    has_fp8: bool
    gpu_name: str


@by_identity()
def _limits(model: ModelArch, cluster: ClusterSpec) -> _Limits:
    tp_dims = ((model.num_attention_heads, "num_attention_heads"), (model.groups, "num_query_groups"),
               (model.hidden_size, "hidden_size"), (model.ffn, "ffn_hidden_size"))
    return _Limits(
        world=cluster.world_size, max_tp=_max_tp(cluster), gpus_per_node=cluster.gpus_per_node,
        tp_dims=tp_dims, tp_gcd=math.gcd(*(dim for dim, _ in tp_dims)),
        is_moe=model.is_moe, num_experts=model.num_experts or 0, expert_ffn=model.expert_ffn,
        num_layers=model.num_layers, has_fp8=cluster.gpu.has_fp8, gpu_name=cluster.gpu.name,
    )


def _violation(code: str, message: str) -> Violation:
    return trusted(Violation, {"code": code, "message": message})


def validate(model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec) -> list[Violation]:
    """Every rule this layout breaks, each with a stable code and a sentence; empty when legal."""
    lim, c = _limits(model, cluster), cfg.__dict__  # plain reads: this runs for every point of a search
    out: list[Violation] = []
    world, tp, pp, cp, ep, etp = lim.world, c["tp"], c["pp"], c["cp"], c["ep"], c["etp"]
    dp = replicas(world, tp * pp * cp)
    if not dp:
        out.append(_violation("world_attention", f"world size {world} is not divisible by TP*PP*CP = {tp}*{pp}*{cp}"))
    if not replicas(world, etp * ep * pp):
        out.append(_violation("world_expert", f"world size {world} is not divisible by ETP*EP*PP = {etp}*{ep}*{pp}"))
    if lim.tp_gcd % tp:  # one test for the common case; the loop names each size TP misses
        for dim, name in lim.tp_dims:
            if dim % tp:
                out.append(_violation(f"tp_{name}", f"TP={tp} does not divide {name}={dim}"))
    if tp > lim.max_tp:
        out.append(_violation("tp_node", f"TP={tp} exceeds {lim.gpus_per_node} GPUs per node "
                              "(cluster sets no allow_cross_node_tp)"))
    if cp > 1 and c["seq_length"] % (2 * cp):
        out.append(_violation("cp_seq", f"CP={cp} needs seq_length divisible by 2*CP={2 * cp}, got {c['seq_length']}"))
    if lim.is_moe:
        if lim.num_experts % ep:
            out.append(_violation("ep_experts", f"EP={ep} does not divide num_experts={lim.num_experts}"))
        if lim.expert_ffn % etp:
            out.append(_violation("etp_moe_ffn", f"ETP={etp} does not divide moe_ffn_hidden_size={lim.expert_ffn}"))
        if etp > lim.max_tp:
            out.append(_violation("etp_node", f"ETP={etp} exceeds {lim.gpus_per_node} GPUs per node"))
    stages = stage_layer_counts(lim.num_layers, pp)
    if not stages:
        out.append(_violation("pp_layers", f"PP={pp} cannot split num_layers={lim.num_layers} into stages of at "
                              "least one layer"))
    m = microbatch_count(c["gbs"], c["mbs"], dp)
    if dp and not m:
        out.append(_violation("gbs_mbs_dp", f"global batch {c['gbs']} is not divisible by MBS*DP = {c['mbs']}*{dp}"))
    _pipeline_rules(lim, c, m, out)
    _feature_rules(lim, c, stages, out)
    return out


def _pipeline_rules(lim: _Limits, c: dict, m: int, out: list[Violation]) -> None:
    pp, vpp, schedule = c["pp"], c["vpp"], c["pp_schedule"]
    if vpp > 1 and pp == 1:
        out.append(_violation("vpp_needs_pp", f"VPP={vpp} needs PP>1"))
    if vpp > 1 and lim.num_layers % (pp * vpp):
        out.append(_violation("vpp_layers", f"num_layers={lim.num_layers} is not divisible by PP*VPP = {pp}*{vpp}"))
    if schedule == "interleaved":
        if vpp == 1:
            out.append(_violation("interleaved_vpp", "the interleaved schedule needs VPP>1"))
        if m and pp > 1 and m % pp:
            out.append(_violation("interleaved_microbatches",
                                  f"interleaving needs the micro-batch count ({m}) divisible by PP={pp}"))
    if schedule in ("zb", "zbv"):
        if pp == 1:
            out.append(_violation(f"{schedule}_needs_pp", f"the {schedule} schedule needs PP>1"))
        if c["recompute_granularity"] is not None:
            out.append(_violation(f"{schedule}_recompute", f"the {schedule} schedule excludes activation recompute"))
    if schedule == "zb" and vpp != 1:
        out.append(_violation("zb_vpp", "zero-bubble (ZB-H1) runs without virtual stages (VPP=1)"))
    if schedule == "zbv" and vpp != 2:
        out.append(_violation("zbv_vpp", f"ZBV needs VPP=2, got {vpp}"))


def _feature_rules(lim: _Limits, c: dict, stages: tuple[int, ...], out: list[Violation]) -> None:
    if c["use_torch_fsdp2"] and c["use_distributed_optimizer"]:
        out.append(_violation("fsdp_distopt", "FSDP2 excludes the distributed optimizer"))
    moe_ep = lim.is_moe and c["ep"] > 1
    if c["use_turbo_deepep"] and not moe_ep:
        out.append(_violation("deepep_moe", "DeepEP needs a MoE model with EP>1"))
    stage = c["sync_free_stage"]
    if stage > MAX_SYNC_FREE_STAGE:
        out.append(_violation("sync_free_range", f"sync_free_stage must be in 0..{MAX_SYNC_FREE_STAGE}, got {stage}"))
    elif stage and not moe_ep:
        out.append(_violation("sync_free_moe", "sync-free MoE stages need a MoE model with EP>1"))
    if c["fp8"] and not lim.has_fp8:
        out.append(_violation("fp8_gpu", f"{lim.gpu_name} has no FP8 tensor cores"))
    n_rec, vpp = c["recompute_num_layers"], c["vpp"]
    if n_rec and stages and c["recompute_granularity"] == "full":
        per_chunk = max(stages) // vpp
        if n_rec > per_chunk:
            out.append(_violation("recompute_num_layers", f"recompute_num_layers={n_rec} exceeds the "
                                  f"{per_chunk} layers per stage{' chunk' if vpp > 1 else ''}"))
