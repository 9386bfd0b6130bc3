"""Observed per-GPU memory of real Megatron-stack runs (`data/memory_observed.csv`) against the
product's memory verdict: the projected GiB of the most loaded GPU and whether it fits the row's HBM
(margin 0). A row's knobs come from its columns (the catalog model, `use_flash_attn` where the source
states it) and the recipe facts in `data/recipes.csv`; no rule reads a row's ID or model name."""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from paratune.oracle.catalog import gpu as catalog_gpu
from paratune.oracle.catalog import model_card
from paratune.oracle.evaluate import evaluate_config
from paratune.oracle.performance.work import RECOMPUTE_MODULES
from paratune.oracle.specs import ClusterSpec, EvalResult, ModelArch, TrainingArgs, Workload

from .rows import DATA, MODELLED, recipe_facts

MEMORY_FILE = DATA / "memory_observed.csv"
# GPU names the memory table uses -> catalog names.
GPU_NAMES = {"h100-80gb": "h100-sxm", "a100-80gb": "a100-80g"}
# Llama 2's context length, for the one row (MLM-482) whose source does not state seq_length.
DEFAULT_SEQ = 4096


@dataclass(frozen=True)
class MemoryRow:
    id: str
    model: str
    gpu: str
    hbm_gib: float
    gpus: int
    args: tuple[tuple[str, Any], ...]
    tuned: tuple[tuple[tuple[str, Any], ...], ...]  # variants of the knobs the source leaves unknown
    outcome: str  # measured | ran | oom
    peak_gib: float | None
    notes: str


def _recompute(d: dict[str, str]) -> dict[str, Any]:
    granularity, detail = d["recompute"], d["recompute_detail"]
    if granularity == "selective":
        modules = [m for m in re.findall(r"[a-z_]+", detail) if m in RECOMPUTE_MODULES] or None
        return {"recompute_granularity": "selective", "recompute_modules": tuple(modules) if modules else None}
    if granularity == "full":
        layers = re.search(r"recompute_num_layers (\d+)", detail)
        return {"recompute_granularity": "full", "recompute_method": "block" if "block" in detail else "uniform",
                "recompute_num_layers": int(layers.group(1)) if layers else 1}
    return {"recompute_granularity": None}


def _row(d: dict[str, str]) -> MemoryRow:
    def num(key: str, default: int = 1) -> int:
        return int(d[key]) if d[key].strip() else default

    model = ModelArch(**model_card(d["model"]))  # the catalog's name (oracle/catalog/models.yaml)
    args: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                            for k, (v, _) in recipe_facts().get(d["id"], {}).items() if k in MODELLED}
    args |= {
        "seq_length": num("seq", DEFAULT_SEQ), "micro_batch_size": num("mbs"),
        # GBS not stated: one micro-batch per pipeline stage (M = PP), enough to fill the pipeline
        "global_batch_size": num("gbs", num("mbs") * num("gpus") // (num("tp") * num("cp"))),
        "tensor_model_parallel_size": num("tp"), "pipeline_model_parallel_size": num("pp"),
        "virtual_pipeline_model_parallel_size": num("vpp") if num("vpp") > 1 else None,
        "context_parallel_size": num("cp"), "expert_model_parallel_size": num("ep"),
        "fp8": "hybrid" if d["precision"].startswith("fp8") else None, "fp16": d["precision"] == "fp16",
        "use_distributed_optimizer": d["dp_sharding"] == "distopt", **_recompute(d),
    }
    variants: list[dict[str, Any]] = [{}]
    if d["dp_sharding"] == "unknown":  # tuned like a throughput row's unknown knobs
        variants = [{**v, "use_distributed_optimizer": o} for v in variants for o in (True, False)]
    if d["recompute"] == "unknown":
        variants = [{**v, "recompute_granularity": r, "recompute_method": "uniform" if r == "full" else None,
                     "recompute_num_layers": 1 if r == "full" else None}
                    for v in variants for r in (None, "selective", "full")]
    if model.is_moe:
        args["expert_tensor_parallel_size"] = num("etp")
    flash = d["use_flash_attn"].strip()  # stated by the row's source (data/README.md); empty: the stack's default
    if flash:
        if flash not in ("true", "false"):
            raise ValueError(f"{d['id']}: use_flash_attn must be true, false or empty, not {flash!r}")
        args["use_flash_attn"] = flash == "true"
    peak = float(d["peak_gib"]) if d["peak_gib"].strip() else None
    return MemoryRow(d["id"], model.name, GPU_NAMES.get(d["gpu"], d["gpu"]), float(d["hbm_gib"]), num("gpus"),
                     tuple(args.items()), tuple(tuple(v.items()) for v in variants), d["outcome"], peak, d["notes"])


def load_memory_rows() -> list[MemoryRow]:
    with MEMORY_FILE.open(newline="", encoding="utf-8") as fh:
        return [_row(d) for d in csv.DictReader(fh)]


@cache
def memory_verdict(row: MemoryRow) -> EvalResult:
    """The product's result for the row with the row's HBM as the cap (margin 0). Knobs the source
    leaves unknown take the fastest legal, fitting variant, as the throughput rows do."""
    model = ModelArch(**model_card(row.model))
    g = catalog_gpu(row.gpu)
    per_node = min(8, row.gpus)
    cluster = ClusterSpec(name=row.id, num_nodes=row.gpus // per_node, gpus_per_node=per_node, gpu=g,
                          hbm_capacity_gb=row.hbm_gib, memory_safety_margin=0.0)
    best: EvalResult | None = None
    for variant in row.tuned:
        workload = Workload(name=row.id, model=model, training=TrainingArgs(**{**dict(row.args), **dict(variant)}))
        result = evaluate_config(workload, cluster, workload.effective(), performance=True)
        if best is None or _rank(result) > _rank(best):
            best = result
    assert best is not None
    return best


def _rank(r: EvalResult) -> tuple[bool, float]:
    """Fitting first, then the faster."""
    return bool(r.legal and r.fits), r.tokens_per_s_per_gpu or 0.0
