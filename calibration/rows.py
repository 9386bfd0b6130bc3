"""Published throughput rows made concrete: each row's model, cluster and layout, judged by the
product's own verdicts.

A row's layout comes from its table columns (`data/throughput.csv`, `data/extra_throughput.csv`) and
the recipe facts its sources state (`data/recipes.csv`: one sourced line per knob, in Megatron
argument names). Knobs that neither states are tuned the way the published runs were: every
candidate (MBS 1/2/4, recompute none/selective/full, or full of the first 1-8 layers of each chunk,
VPP with each split Megatron accepts, the MoE dispatcher, FP8 primary weights) that
`oracle.evaluate.evaluate_config` calls legal and fitting is projected, and the fastest is the row's
layout. The published runs ran, so the memory cap is the whole HBM (margin 0) and nothing is
tolerated: a row with no legal, fitting candidate is a rejected published run, which the report
lists with the reason. A row without GBS (the AMD rows) uses GBS = 128 per 8 GPUs. The
gradient-reduce dtype is never tuned: where no recipe states it, the stack's default holds (the
Megatron-LM CLI's fp32 promotion, TrainingArgs' default).
"""

from __future__ import annotations

import csv
import itertools
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from paratune.oracle.catalog import gpu as catalog_gpu
from paratune.oracle.catalog import model_card
from paratune.oracle.evaluate import evaluate_config
from paratune.oracle.performance import PerfEstimate, simulate
from paratune.oracle.performance.calibration import Constants
from paratune.oracle.pipeline_split import candidate_splits
from paratune.oracle.specs import ClusterSpec, EffectiveConfig, ModelArch, TrainingArgs, Workload

DATA = Path(__file__).with_name("data")
THROUGHPUT_FILES = (DATA / "throughput.csv", DATA / "extra_throughput.csv", DATA / "moe_throughput.csv")
# Table precisions beyond fp16/bf16/fp8: the FP8 scaling recipe each names (Megatron --fp8-recipe).
FP8_PRECISIONS = {"fp8": None, "mxfp8": "mxfp8", "fp8-blockwise": "blockwise"}
RECIPES_FILE = DATA / "recipes.csv"
DEFAULT_GBS_PER_NODE = 128
MBS_CANDIDATES = (1, 2, 4)
RECOMPUTE_CANDIDATES = (None, "selective", "full")
BLOCK_CANDIDATES = range(1, 9)  # full recompute of the first N layers of each chunk
MAX_VPP = 8
MODELLED = frozenset(TrainingArgs.model_fields)


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


def _int(text: str) -> int | None:
    return int(text) if text.strip() else None


def _row(d: dict[str, str]) -> Row:
    return Row(
        id=d["id"], source=d["source"], model=d["model"], gpu=d["gpu"], gpus=int(d["gpus"]), tp=int(d["tp"]),
        pp=int(d["pp"]), cp=int(d["cp"]), ep=int(d["ep"]), vpp=_int(d["vpp"]), mbs=_int(d["mbs"]),
        gbs=_int(d["gbs"]), seq=int(d["seq"]), precision=d["precision"],
        recompute=None if d["recompute"] == "unknown" else d["recompute"], dp_sharding=d["dp_sharding"],
        measured=float(d["tokens_per_s_per_gpu"]),
    )


def load_rows(paths: tuple[Path, ...] = THROUGHPUT_FILES) -> list[Row]:
    """The published throughput rows, in file order."""
    rows = []
    for path in paths:
        with path.open(newline="", encoding="utf-8") as fh:
            rows += [_row(d) for d in csv.DictReader(fh)]
    return rows


def _value(text: str) -> Any:
    """A recipe value as Megatron takes it: true/false, null, ints, floats, [a, b] lists, strings."""
    t = text.strip()
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "none", ""):
        return None
    if t.startswith("["):
        return [v.strip() for v in t.strip("[]").split(",") if v.strip()]
    for kind in (int, float):
        try:
            return kind(t)
        except ValueError:
            pass
    return t


@cache
def recipe_facts() -> dict[str, dict[str, tuple[Any, str]]]:
    """row id -> knob -> (value, source), from data/recipes.csv."""
    out: dict[str, dict[str, tuple[Any, str]]] = {}
    with RECIPES_FILE.open(newline="", encoding="utf-8") as fh:
        for d in csv.DictReader(fh):
            out.setdefault(d["row_id"], {})[d["knob"]] = (_value(d["value"]), d["source"])
    return out


def cluster_of(row: Row) -> ClusterSpec:
    """Nodes of the row's GPU as its catalog scale-up domain (8 GPUs; an NVL72 rack for GB200/GB300, of
    which a job uses the largest share dividing its GPUs, e.g. 64 of 72 for 256 GPUs), capped at the whole
    HBM, margin 0."""
    g = catalog_gpu(row.gpu)
    per_node = max(d for d in range(1, min(g.gpus_per_node, row.gpus) + 1) if row.gpus % d == 0)
    return ClusterSpec(name=row.id, num_nodes=row.gpus // per_node, gpus_per_node=per_node, gpu=g,
                       hbm_capacity_gb=g.hbm_gb, memory_safety_margin=0.0)


def _stated(row: Row, model: ModelArch) -> dict[str, Any]:
    """The training arguments the row's recipe and its columns state (the table's columns win where
    the two disagree: they are what was measured)."""
    args: dict[str, Any] = {
        knob: tuple(value) if isinstance(value, list) else value
        for knob, (value, _) in recipe_facts().get(row.id, {}).items() if knob in MODELLED
    }
    args |= {
        "seq_length": row.seq,
        "global_batch_size": row.gbs or args.get("global_batch_size") or DEFAULT_GBS_PER_NODE * row.gpus // 8,
        "tensor_model_parallel_size": row.tp, "pipeline_model_parallel_size": row.pp,
        "context_parallel_size": row.cp, "expert_model_parallel_size": row.ep,
        "fp8": "hybrid" if row.precision in FP8_PRECISIONS else None, "fp16": row.precision == "fp16",
        "bf16": row.precision == "bf16",
    }
    if row.dp_sharding:  # an empty column leaves the recipe's (or the default) DP sharding
        args |= {"use_distributed_optimizer": row.dp_sharding == "distopt",
                 "use_torch_fsdp2": row.dp_sharding == "fsdp"}
    if row.tp == 1:  # Bridge switches TP overlap off below TP 2 (comm_overlap.py), whatever the recipe asks
        args["tp_comm_overlap"] = False
    if FP8_PRECISIONS.get(row.precision):
        args["fp8_recipe"] = FP8_PRECISIONS[row.precision]
    if model.is_moe:
        args.setdefault("expert_tensor_parallel_size", 1)
    if row.mbs:
        args["micro_batch_size"] = row.mbs
    if row.vpp:
        args["virtual_pipeline_model_parallel_size"] = row.vpp if row.vpp > 1 else None
    if row.recompute:
        args["recompute_granularity"] = None if row.recompute == "none" else row.recompute
        if row.recompute == "full":  # the recipe's method and layer count where it states them
            args.setdefault("recompute_method", "uniform")
            args.setdefault("recompute_num_layers", 1)
    return args


def tuned_knobs(row: Row, model: ModelArch) -> list[str]:
    """The knobs of a row that neither its columns nor its recipe state, which the harness tunes."""
    stated = _stated(row, model)
    out = [k for k in ("micro_batch_size", "recompute_granularity") if k not in stated]
    if row.pp > 1 and "virtual_pipeline_model_parallel_size" not in stated:
        out.append("virtual_pipeline_model_parallel_size")
    split_keys = ("pipeline_model_parallel_layout", "account_for_embedding_in_pipeline_split",
                  "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers")
    if row.pp > 1 and not any(stated.get(k) for k in split_keys):
        out.append("pipeline split")
    if row.precision in FP8_PRECISIONS and "fp8_param_gather" not in stated:
        out.append("fp8_param_gather")
    if model.is_moe and row.ep > 1 and "moe_token_dispatcher_type" not in stated:
        out.append("moe_token_dispatcher_type")
    if model.is_moe and "moe_grouped_gemm" not in stated:
        out.append("moe_grouped_gemm")
    return out


def _candidates(row: Row, model: ModelArch) -> list[dict[str, Any]]:
    """Every combination of the tuned knobs' values on top of what the row states."""
    stated, tuned = _stated(row, model), tuned_knobs(row, model)
    axes: list[list[dict[str, Any]]] = []
    if "micro_batch_size" in tuned:
        axes.append([{"micro_batch_size": m} for m in MBS_CANDIDATES])
    if "recompute_granularity" in tuned:
        axes.append([{"recompute_granularity": r, "recompute_method": "uniform" if r == "full" else None,
                      "recompute_num_layers": 1 if r == "full" else None} for r in RECOMPUTE_CANDIDATES]
                    # Primus's recipes recompute the first N layers of each chunk (block), e.g. the Mixtral
                    # 8x22B multi-node recipe's recompute_num_layers 1 (docs/02-user-guide/megatron-lm-training.md)
                    + [{"recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": n}
                       for n in BLOCK_CANDIDATES])
    vpps = ([stated.get("virtual_pipeline_model_parallel_size") or 1]
            if "virtual_pipeline_model_parallel_size" not in tuned else range(1, MAX_VPP + 1))
    if "pipeline split" in tuned:
        splits = [{"virtual_pipeline_model_parallel_size": v if v > 1 else None, **_split_args(s)}
                  for v in vpps for s in candidate_splits(model.num_layers, model.mtp_num_layers, row.pp, v)]
        axes.append(splits or [{}])
    elif "virtual_pipeline_model_parallel_size" in tuned:
        axes.append([{"virtual_pipeline_model_parallel_size": v if v > 1 else None} for v in vpps])
    if "fp8_param_gather" in tuned:
        axes.append([{"fp8_param_gather": g} for g in (False, True)])
    if "moe_token_dispatcher_type" in tuned:
        deepep = ({"use_turbo_deepep": True} if catalog_gpu(row.gpu).vendor == "amd"  # Primus-Turbo's on ROCm
                  else {"moe_token_dispatcher_type": "flex"})
        axes.append([{"moe_token_dispatcher_type": "alltoall"}, deepep])
    if "moe_grouped_gemm" in tuned:
        axes.append([{"moe_grouped_gemm": g} for g in (False, True)])
    out = []
    for combo in itertools.product(*axes):
        args = dict(stated)
        for part in combo:
            args |= part
        out.append(args)
    return out


def _split_args(split: Any) -> dict[str, Any]:
    return {"pipeline_model_parallel_layout": split.layout, "decoder_first_pipeline_num_layers": split.first,
            "decoder_last_pipeline_num_layers": split.last, "account_for_embedding_in_pipeline_split": split.embedding,
            "account_for_loss_in_pipeline_split": split.loss}


@dataclass(frozen=True)
class Setup:
    """A row's model and cluster, the legal fitting candidates, and why it is rejected if none is."""

    row: Row
    model: ModelArch
    cluster: ClusterSpec
    workload: Workload
    candidates: tuple[EffectiveConfig, ...]  # legal and fitting under the product's verdicts
    rejection: str  # "" when some candidate is legal and fits
    tuned: tuple[str, ...]


@cache
def setup(row: Row) -> Setup:
    """Model, cluster and the legal, fitting candidate layouts of one row (cached per row)."""
    cluster = cluster_of(row)
    model = ModelArch(**model_card(row.model))
    fitting: list[EffectiveConfig] = []
    closest: tuple[float, str] | None = None
    base = Workload(name=row.id, model=model, training=TrainingArgs(**_stated(row, model)))
    for args in _candidates(row, model):
        workload = Workload(name=row.id, model=model, training=TrainingArgs(**args))
        cfg = workload.effective()
        result = evaluate_config(workload, cluster, cfg, performance=False)
        if result.legal and result.fits:
            fitting.append(cfg)
        elif result.legal:
            assert result.memory_per_gpu_gb is not None  # a legal layout's memory is always estimated
            if closest is None or result.memory_per_gpu_gb < closest[0]:
                closest = (result.memory_per_gpu_gb, result.reason)
        elif closest is None:
            closest = (float("inf"), result.reason)
    reason = "" if fitting else (closest[1] if closest else "no candidate")
    return Setup(row, model, cluster, base, tuple(fitting), reason, tuple(tuned_knobs(row, model)))


@dataclass(frozen=True)
class Projection:
    setup: Setup
    cfg: EffectiveConfig
    estimate: PerfEstimate

    @property
    def error(self) -> float:
        """Signed relative error of the projection against the measurement."""
        return self.estimate.tokens_per_s_per_gpu / self.setup.row.measured - 1.0


def project(row: Row, consts: Constants | None = None) -> Projection | None:
    """The row's projection at its fastest legal, fitting candidate; None when the product rejects it."""
    s = setup(row)
    best = None
    for cfg in s.candidates:
        est = simulate(s.model, cfg, s.cluster, consts)
        if best is None or est.tokens_per_s_per_gpu > best[1].tokens_per_s_per_gpu:
            best = (cfg, est)
    return Projection(s, *best) if best else None


def project_at(row: Row, cfg: EffectiveConfig, consts: Constants | None = None) -> Projection:
    """The row's projection at one candidate (the fit holds each row's tuned knobs between its rounds)."""
    s = setup(row)
    return Projection(s, cfg, simulate(s.model, cfg, s.cluster, consts))


def order_pairs(rows: list[Row]) -> list[tuple[Row, Row]]:
    """(faster, slower) pairs of rows with the same model, GPU and source."""
    out = []
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            if (a.model, a.gpu, a.source) == (b.model, b.gpu, b.source) and a.measured != b.measured:
                out.append((a, b) if a.measured > b.measured else (b, a))
    return out
