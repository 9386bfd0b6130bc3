"""Legality as code: per-axis legal sets and `validate`, every rule derived from model and cluster."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from .layout import data_parallel, num_microbatches, stage_layer_counts
from .specs import ClusterSpec, EffectiveConfig, ModelArch, Violation

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


def validate(model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec) -> list[Violation]:
    """Every rule this layout breaks, each with a stable code and a sentence; empty when legal."""
    out: list[Violation] = []

    def bad(code: str, message: str) -> None:
        out.append(Violation(code=code, message=message))

    world, tp, pp, cp, ep, etp = cluster.world_size, cfg.tp, cfg.pp, cfg.cp, cfg.ep, cfg.etp
    if world % (tp * pp * cp):
        bad("world_attention", f"world size {world} is not divisible by TP*PP*CP = {tp}*{pp}*{cp}")
    if world % (etp * ep * pp):
        bad("world_expert", f"world size {world} is not divisible by ETP*EP*PP = {etp}*{ep}*{pp}")
    for dim, name in ((model.num_attention_heads, "num_attention_heads"), (model.groups, "num_query_groups"),
                      (model.hidden_size, "hidden_size"), (model.ffn, "ffn_hidden_size")):
        if dim % tp:
            bad(f"tp_{name}", f"TP={tp} does not divide {name}={dim}")
    if tp > _max_tp(cluster):
        bad("tp_node", f"TP={tp} exceeds {cluster.gpus_per_node} GPUs per node (cluster sets no allow_cross_node_tp)")
    if cp > 1 and cfg.seq_length % (2 * cp):
        bad("cp_seq", f"CP={cp} needs seq_length divisible by 2*CP={2 * cp}, got {cfg.seq_length}")
    if model.is_moe:
        if model.num_experts % ep:
            bad("ep_experts", f"EP={ep} does not divide num_experts={model.num_experts}")
        if model.expert_ffn % etp:
            bad("etp_moe_ffn", f"ETP={etp} does not divide moe_ffn_hidden_size={model.expert_ffn}")
        if etp > _max_tp(cluster):
            bad("etp_node", f"ETP={etp} exceeds {cluster.gpus_per_node} GPUs per node")
    stages = stage_layer_counts(model.num_layers, pp)
    if not stages:
        bad("pp_layers", f"PP={pp} cannot split num_layers={model.num_layers} into stages of at least one layer")
    dp = data_parallel(cfg, world)
    if dp and cfg.gbs % (cfg.mbs * dp):
        bad("gbs_mbs_dp", f"global batch {cfg.gbs} is not divisible by MBS*DP = {cfg.mbs}*{dp}")
    _pipeline_rules(model, cfg, world, stages, bad)
    _feature_rules(model, cfg, cluster, stages, bad)
    return out


def _pipeline_rules(model: ModelArch, cfg: EffectiveConfig, world: int, stages: tuple[int, ...], bad) -> None:
    pp, vpp, schedule = cfg.pp, cfg.vpp, cfg.pp_schedule
    if vpp > 1 and pp == 1:
        bad("vpp_needs_pp", f"VPP={vpp} needs PP>1")
    if vpp > 1 and model.num_layers % (pp * vpp):
        bad("vpp_layers", f"num_layers={model.num_layers} is not divisible by PP*VPP = {pp}*{vpp}")
    m = num_microbatches(cfg, world)
    if schedule == "interleaved":
        if vpp == 1:
            bad("interleaved_vpp", "the interleaved schedule needs VPP>1")
        if m and pp > 1 and m % pp:
            bad("interleaved_microbatches", f"interleaving needs the micro-batch count ({m}) divisible by PP={pp}")
    if schedule in ("zb", "zbv"):
        if pp == 1:
            bad(f"{schedule}_needs_pp", f"the {schedule} schedule needs PP>1")
        if cfg.recompute_granularity is not None:
            bad(f"{schedule}_recompute", f"the {schedule} schedule excludes activation recompute")
    if schedule == "zb" and vpp != 1:
        bad("zb_vpp", "zero-bubble (ZB-H1) runs without virtual stages (VPP=1)")
    if schedule == "zbv" and vpp != 2:
        bad("zbv_vpp", f"ZBV needs VPP=2, got {vpp}")


def _feature_rules(model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec, stages: tuple[int, ...], bad) -> None:
    if cfg.use_torch_fsdp2 and cfg.use_distributed_optimizer:
        bad("fsdp_distopt", "FSDP2 excludes the distributed optimizer")
    moe_ep = model.is_moe and cfg.ep > 1
    if cfg.use_turbo_deepep and not moe_ep:
        bad("deepep_moe", "DeepEP needs a MoE model with EP>1")
    if cfg.sync_free_stage > MAX_SYNC_FREE_STAGE:
        bad("sync_free_range", f"sync_free_stage must be in 0..{MAX_SYNC_FREE_STAGE}, got {cfg.sync_free_stage}")
    elif cfg.sync_free_stage and not moe_ep:
        bad("sync_free_moe", "sync-free MoE stages need a MoE model with EP>1")
    if cfg.fp8 and not cluster.gpu.has_fp8:
        bad("fp8_gpu", f"{cluster.gpu.name} has no FP8 tensor cores")
    if cfg.recompute_num_layers and stages and cfg.recompute_granularity == "full":
        per_chunk = max(stages) // cfg.vpp
        if cfg.recompute_num_layers > per_chunk:
            bad("recompute_num_layers", f"recompute_num_layers={cfg.recompute_num_layers} exceeds the "
                f"{per_chunk} layers per stage{' chunk' if cfg.vpp > 1 else ''}")
