"""The final pick among a run's fitting trials: robust by default, the raw argmax on request.

The projection's stated error (`oracle/performance/uncertainty.py`: the accuracy report's MAPE on the
family's published runs) means layouts within that error of the best cannot be told apart by the
oracle. Among them, never below the user's own layout (the seed plan's baseline) when it fits, the
robust pick takes the one with the most memory headroom (an OOM costs more than a few percent);
within 1 GiB of that headroom, the one with fewer stack-specific knobs (whose effect
rests on a prior, not on calibration rows), then the faster one. A run with measurements picks on its
calibrated projections (`planner/measurements.py`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from paratune.ledger.models import TrialRecord

PickRule = Literal["robust", "argmax"]
HEADROOM_TIE_GB = 1.0
# Knobs whose effect rests on a prior (overlap_cost) or on a stack's special build, not on fitted rows.
EXOTIC = {"use_turbo_deepep": False, "tp_comm_overlap": False, "overlap_moe_expert_parallel_comm": False,
          "cuda_graph_impl": "none", "fp8": None, "use_torch_fsdp2": False, "use_megatron_fsdp": False,
          "optimizer_cpu_offload": False, "pp_layout": None, "sync_free_stage": 0}


class Pick(BaseModel):
    """Which trial the run names as its winner, and why."""

    rule: PickRule
    trial_id: int
    argmax_trial_id: int
    error: float = Field(description="the stated relative error the robust pick used")
    within_error: int = Field(description="other fitting trials within that error of the best")
    note: str


def exotic_knobs(config: dict) -> int:
    """How many stack-specific knobs a layout turns on (`EXOTIC`)."""
    return sum(config.get(k, off) not in (off, None, False) for k, off in EXOTIC.items())


def _tps(t: TrialRecord) -> float:
    """Calibrated tokens/s/GPU, else projected (of a trial `pick` kept: it has a projected one)."""
    c = t.calibrated
    if c is not None and c.tokens_per_s_per_gpu is not None:
        return c.tokens_per_s_per_gpu
    assert t.tokens_per_s_per_gpu is not None
    return t.tokens_per_s_per_gpu


def _headroom(t: TrialRecord) -> float:
    c = t.calibrated
    memory = c.memory_per_gpu_gb if c is not None and c.memory_per_gpu_gb is not None else t.memory_per_gpu_gb
    return (t.result.memory_cap_gb or 0.0) - (memory or 0.0)


def _fits(t: TrialRecord) -> bool:
    c = t.calibrated
    return bool(c.fits if c is not None and c.fits is not None else t.fits)


def pick(trials: list[TrialRecord], error: float, rule: PickRule = "robust") -> Pick | None:
    """The winner among `trials` (legal, fitting, with a throughput); None when there is none."""
    ok = [t for t in trials if t.legal and _fits(t) and t.tokens_per_s_per_gpu is not None]
    if not ok:
        return None
    best = max(ok, key=lambda t: (_tps(t), -t.id))
    floor = _tps(best) * (1 - error)
    near = [t for t in ok if _tps(t) >= floor and t.config_key != best.config_key]
    within = len({t.config_key for t in near})
    if rule == "argmax" or not near:
        note = (f"the highest projected tokens/s/GPU; within the oracle's error (±{100 * error:.1f}%) of {within} "
                f"other layout(s)" if within else "the highest projected tokens/s/GPU, clear of the others by more "
                f"than the oracle's error (±{100 * error:.1f}%)")
        return Pick(rule=rule, trial_id=best.id, argmax_trial_id=best.id, error=error, within_error=within, note=note)
    # never below the user's own layout when it fits (DESIGN §5): a wide error must not trade its speed away
    own = [t for t in ok if t.origin.endswith("baseline")]
    pool = [t for t in (best, *near) if not own or _tps(t) >= max(_tps(x) for x in own)]
    room = max(_headroom(t) for t in pool)
    chosen = max((t for t in pool if _headroom(t) >= room - HEADROOM_TIE_GB),
                 key=lambda t: (-exotic_knobs(t.config), _tps(t), -t.id))
    if chosen.config_key == best.config_key:
        note = (f"the highest projected tokens/s/GPU, also the most memory headroom ({_headroom(best):.1f} GiB) of the "
                f"{within + 1} layouts within the oracle's error (±{100 * error:.1f}%)")
    else:
        note = (f"within the oracle's error (±{100 * error:.1f}%) of {within} other layout(s): "
                f"picked trial {chosen.id} "
                f"({_tps(chosen):,.1f} tokens/s/GPU, {_headroom(chosen):.1f} GiB headroom, "
                f"{exotic_knobs(chosen.config)} stack-specific knob(s)) over the argmax, trial {best.id} "
                f"({_tps(best):,.1f}, {_headroom(best):.1f} GiB, {exotic_knobs(best.config)}); "
                "--pick argmax takes the argmax")
    return Pick(rule=rule, trial_id=chosen.id, argmax_trial_id=best.id, error=error, within_error=within, note=note)
