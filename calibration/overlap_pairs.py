"""The overlap priors from published on/off pairs (calibration/data/overlap_pairs.yaml).

A hidden transfer still costs compute: the SMs/CUs and HBM bandwidth its kernels take while the GEMMs
run (oracle/performance/layers.py `_hidden_behind`). Each constant is the one value that makes the
oracle's projected on/off speedups of its pairs closest to the published ones (least squares on the log
speedup, golden-section search on [0, 1]); every other constant stays as calibrated. `tp_overlap_cost`
(TP collectives decomposed and overlapped with their GEMMs: TE userbuffers, PyTorch async TP) rests on
torchtitan's async-TP pairs; `overlap_cost` (EP all-to-all behind the partner micro-batch, and the
DP/FSDP traffic that shares it, for which no published pair was found) on Bridge's EP-overlap pair.
Usage: .venv/bin/python -m paratune.calibration.overlap_pairs (prints each pair, published vs projected).
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict

from paratune.oracle.catalog import gpu as catalog_gpu
from paratune.oracle.catalog import model_card
from paratune.oracle.performance import simulate
from paratune.oracle.performance.calibration import Constants, constants, with_fitted
from paratune.oracle.specs import ClusterSpec, ModelArch, TrainingArgs, TrialConfig, Workload

from .golden import golden

PAIRS_FILE = Path(__file__).with_name("data") / "overlap_pairs.yaml"
DERIVED = ("tp_overlap_cost", "overlap_cost")
BOUNDS = (0.0, 1.0)  # 0: the hidden transfer is free; 1: it costs as much compute as it would stall


class OverlapPair(BaseModel):
    """One published run measured with one overlap knob off and on."""

    model_config = ConfigDict(extra="forbid")
    id: str
    constant: Literal["tp_overlap_cost", "overlap_cost"]
    knob: Literal["tp_comm_overlap", "overlap_moe_expert_parallel_comm"]
    source: str
    model: str
    gpu: str
    gpu_update: dict[str, float]
    nodes: int
    training: dict[str, Any]
    held: dict[str, float]
    held_why: str
    unit: Literal["tokens/s", "s/step"]
    measured_off: float
    measured_on: float

    @property
    def speedup(self) -> float:
        """Published on/off speedup."""
        if self.unit == "tokens/s":
            return self.measured_on / self.measured_off
        return self.measured_off / self.measured_on


@cache
def load_pairs() -> tuple[OverlapPair, ...]:
    data = yaml.safe_load(PAIRS_FILE.read_text(encoding="utf-8"))
    return tuple(OverlapPair(**p) for p in data["pairs"])


@cache
def _setup(pair_id: str) -> tuple[ModelArch, Workload, ClusterSpec]:
    pair = next(p for p in load_pairs() if p.id == pair_id)
    model = ModelArch(**model_card(pair.model))
    gpu = catalog_gpu(pair.gpu).model_copy(update=pair.gpu_update)
    cluster = ClusterSpec(name=pair.id, num_nodes=pair.nodes, gpus_per_node=gpu.gpus_per_node, gpu=gpu,
                          hbm_capacity_gb=gpu.hbm_gb)
    return model, Workload(name=pair.id, model=model, training=TrainingArgs(**pair.training)), cluster


def projected_speedup(pair: OverlapPair, consts: Constants | None = None) -> float:
    """The oracle's on/off speedup of the pair's run, under `consts` (default: the calibrated ones) with
    the pair's held constants over them."""
    model, workload, cluster = _setup(pair.id)
    c = with_fitted(consts or constants(cluster.gpu), pair.held)
    off, on = (simulate(model, workload.effective(TrialConfig(**{pair.knob: flag})), cluster, c).iteration_ms
               for flag in (False, True))
    return off / on


def derive_overlap_priors(base: dict[str, Constants] | None = None) -> dict[str, float]:
    """Each derived constant at its least-squares value over its pairs (`base`: constants per GPU name,
    default the calibrated ones)."""
    out = {}
    for name in DERIVED:
        pairs = [p for p in load_pairs() if p.constant == name]

        def loss(x: float, pairs: list[OverlapPair] = pairs, name: str = name) -> float:
            errs = (math.log(projected_speedup(p, with_fitted(_base(p, base), {name: x})) / p.speedup)
                    for p in pairs)
            return sum(e * e for e in errs)

        out[name] = round(golden(loss, *BOUNDS, x0=getattr(_base(pairs[0], base), name), iters=20), 4)
    return out


def _base(pair: OverlapPair, base: dict[str, Constants] | None) -> Constants:
    return (base or {}).get(pair.gpu) or constants(_setup(pair.id)[2].gpu)


def main() -> None:
    for p in load_pairs():
        print(f"{p.id}: {p.knob} published {p.speedup:.3f}x, projected {projected_speedup(p):.3f}x ({p.constant})")
    print("least-squares values:", derive_overlap_priors())


if __name__ == "__main__":
    main()
