"""Calibration rows (published throughput) made concrete: (model, layout, cluster) per row.

Knobs a row leaves blank are tuned the way the published runs were: every candidate (MBS 1/2/4,
recompute none/selective/full, VPP over the divisors of the layers per stage, and for MoE rows the
token dispatcher, all-to-all or DeepEP, which no source states) that is legal and fits in memory is
projected, and the fastest is the row's layout. A row without GBS (the AMD rows) uses GBS = 128 per
8 GPUs. The published runs ran, so a row's memory cap is the whole HBM (no safety margin) and a
candidate counts as fitting up to MEMORY_TOLERANCE over it: the memory model's FP8 weight copies and
FP32 gradient buffers put several published FP8 layouts (DGXC-3, N24-11, MB-H20) 6-11% over 80 GiB
without recompute, yet they ran without it. A row that states its VPP keeps it even where the layers
do not split evenly over PP·VPP (MB-H20: Megatron-Bridge counts embedding and loss as pipeline
layers). Era rules: the 2021-22 Megatron-LM rows (PTD, KOR) ran without flash attention and without
gradient-reduce overlap, with sequence parallelism only where the source says so (KOR selective
rows); later rows use flash attention, overlap and sequence parallelism. MoE rows use expert-TP 1.
FP8 rows use the "hybrid" recipe. A row naming a workload file (the AMD Mixtral reference) takes its
whole layout from that file.
"""

from __future__ import annotations

import csv
import itertools
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ..catalog import gpu as catalog_gpu
from ..catalog import model_card
from ..inputs import load_workload
from ..layout import num_microbatches, stage_layer_counts
from ..specs import ClusterSpec, EffectiveConfig, ModelArch, TrainingArgs, TrialConfig, resolve
from .calibration import Constants
from .simulate import PerfEstimate, simulate

REPO = Path(__file__).resolve().parents[2]
SHARED_CSV = REPO.parent / "shared" / "calibration" / "throughput.csv"
EXTRA_CSV = Path(__file__).with_name("extra_throughput.csv")
DEFAULT_GBS_PER_NODE = 128
MBS_CANDIDATES = (1, 2, 4)
RECOMPUTE_CANDIDATES = (None, "selective", "full")
MAX_VPP = 8
MEMORY_TOLERANCE = 1.12


@dataclass(frozen=True)
class Row:
    id: str
    source: str
    model: str
    gpu: str
    gpus: int
    tp: int
    pp: int
    cp: int
    ep: int
    vpp: int | None  # None: not stated
    mbs: int | None
    gbs: int | None
    seq: int
    precision: str
    recompute: str | None  # None: not stated ("unknown")
    dp_sharding: str
    measured: float
    workload: str  # a workload file that fixes the whole layout, or ""


def _int(text: str) -> int | None:
    return int(text) if text.strip() else None


def _row(d: dict[str, str]) -> Row:
    return Row(
        id=d["id"], source=d["source"], model=d["model"], gpu=d["gpu"], gpus=int(d["gpus"]), tp=int(d["tp"]),
        pp=int(d["pp"]), cp=int(d["cp"]), ep=int(d["ep"]), vpp=_int(d["vpp"]), mbs=_int(d["mbs"]),
        gbs=_int(d["gbs"]), seq=int(d["seq"]), precision=d["precision"],
        recompute=None if d["recompute"] == "unknown" else d["recompute"], dp_sharding=d["dp_sharding"],
        measured=float(d["tokens_per_s_per_gpu"]), workload=d.get("workload") or "",
    )


def load_rows(paths: tuple[Path, ...] = (SHARED_CSV, EXTRA_CSV)) -> list[Row]:
    """The shared throughput table and this package's extra rows, in file order."""
    rows = []
    for path in paths:
        with path.open(newline="", encoding="utf-8") as fh:
            rows += [_row(d) for d in csv.DictReader(fh)]
    return rows


def cluster_of(row: Row) -> ClusterSpec:
    """8-GPU nodes of the row's GPU (fewer GPUs: one node), capped at the whole HBM."""
    g = catalog_gpu(row.gpu)
    per_node = min(8, row.gpus)
    return ClusterSpec(name=row.id, num_nodes=row.gpus // per_node, gpus_per_node=per_node, gpu=g,
                       hbm_capacity_gb=g.hbm_gb, memory_safety_margin=0.0)


def _old_megatron(row: Row) -> bool:
    """The 2021-22 Megatron-LM runs (PTD, KOR): no flash attention, no gradient-reduce overlap."""
    return row.id.startswith(("PTD-", "KOR-"))


def _args(row: Row, model: ModelArch, mbs: int, recompute: str | None, vpp: int, deepep: bool) -> TrainingArgs:
    old = _old_megatron(row)
    return TrainingArgs(
        seq_length=row.seq, global_batch_size=row.gbs or DEFAULT_GBS_PER_NODE * row.gpus // 8,
        micro_batch_size=mbs, tensor_model_parallel_size=row.tp, pipeline_model_parallel_size=row.pp,
        virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None, context_parallel_size=row.cp,
        expert_model_parallel_size=row.ep, expert_tensor_parallel_size=1 if model.is_moe else None,
        sequence_parallel=not old or (row.id.startswith("KOR-") and row.recompute == "selective"),
        use_flash_attn=not old, overlap_grad_reduce=not old,
        recompute_granularity=recompute, recompute_method="uniform" if recompute == "full" else None,
        recompute_num_layers=1 if recompute == "full" else None,
        fp8="hybrid" if row.precision == "fp8" else None, fp16=row.precision == "fp16",
        bf16=row.precision == "bf16", use_distributed_optimizer=row.dp_sharding == "distopt",
        use_torch_fsdp2=row.dp_sharding == "fsdp", use_turbo_deepep=deepep,
    )


def _vpp_candidates(row: Row, model: ModelArch) -> list[int]:
    """The row's VPP, or (not stated) every VPP up to MAX_VPP that splits the layers evenly."""
    if row.vpp is not None:
        return [row.vpp]
    if row.pp == 1:
        return [1]
    per_stage = max(stage_layer_counts(model.num_layers, row.pp) or (1,))
    return [v for v in range(1, min(per_stage, MAX_VPP) + 1) if model.num_layers % (row.pp * v) == 0]


def _acceptable(row: Row, model: ModelArch, cfg: EffectiveConfig, cluster: ClusterSpec) -> tuple[bool, bool]:
    """(legal, fits in memory); each check is skipped (True) when its module is not there."""
    world = cluster.world_size
    legal = bool(num_microbatches(cfg, world))
    if legal and cfg.vpp > 1:
        legal = num_microbatches(cfg, world) % cfg.pp == 0
    try:
        from ..legality import validate
    except ImportError:
        pass
    else:
        tolerated = {"vpp_layers"} if row.vpp else set()
        legal = legal and not [v for v in validate(model, cfg, cluster) if v.code not in tolerated]
    try:
        from ..memory import estimate_memory
    except ImportError:
        return legal, True
    cap = cluster.memory_cap_gb * MEMORY_TOLERANCE
    return legal, legal and estimate_memory(model, cfg, cluster).total_gb <= cap


@dataclass(frozen=True)
class Setup:
    """A row's model and cluster and the candidate layouts for its unknown knobs."""

    row: Row
    model: ModelArch
    cluster: ClusterSpec
    candidates: tuple[EffectiveConfig, ...]  # legal, fitting (all legal ones when none fits)
    fits: bool


@cache
def setup(row: Row) -> Setup:
    """Model, cluster and the legal, fitting candidate layouts of one row (cached per row)."""
    cluster = cluster_of(row)
    if row.workload:
        workload = load_workload(REPO / row.workload)
        return Setup(row, workload.model, cluster, (workload.effective(),), True)
    model = ModelArch(**model_card(row.model))
    mbs_set = [row.mbs] if row.mbs else list(MBS_CANDIDATES)
    rc_set = [row.recompute if row.recompute != "none" else None] if row.recompute else list(RECOMPUTE_CANDIDATES)
    deepep_set = [False, True] if model.is_moe and row.ep > 1 else [False]
    legal, fitting = [], []
    for mbs, rc, vpp, deepep in itertools.product(mbs_set, rc_set, _vpp_candidates(row, model), deepep_set):
        cfg = resolve(_args(row, model, mbs, rc, vpp, deepep), TrialConfig(), is_moe=model.is_moe)
        ok, fits = _acceptable(row, model, cfg, cluster)
        if ok:
            legal.append(cfg)
            if fits:
                fitting.append(cfg)
    if not legal:
        raise ValueError(f"{row.id}: no legal layout among the candidates")
    return Setup(row, model, cluster, tuple(fitting or legal), bool(fitting))


@dataclass(frozen=True)
class Projection:
    setup: Setup
    cfg: EffectiveConfig
    estimate: PerfEstimate

    @property
    def error(self) -> float:
        """Signed relative error of the projection against the measurement."""
        return self.estimate.tokens_per_s_per_gpu / self.setup.row.measured - 1.0


def project(row: Row, consts: Constants | None = None) -> Projection:
    """The row's projection at its fastest candidate layout."""
    s = setup(row)
    best = None
    for cfg in s.candidates:
        est = simulate(s.model, cfg, s.cluster, consts)
        if best is None or est.tokens_per_s_per_gpu > best[1].tokens_per_s_per_gpu:
            best = (cfg, est)
    return Projection(s, *best)


def order_pairs(rows: list[Row]) -> list[tuple[Row, Row]]:
    """(faster, slower) pairs of rows with the same model, GPU and source."""
    out = []
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            if (a.model, a.gpu, a.source) == (b.model, b.gpu, b.source) and a.measured != b.measured:
                out.append((a, b) if a.measured > b.measured else (b, a))
    return out
