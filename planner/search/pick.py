"""The final pick among a run's fitting trials: robust by default, the raw argmax on request.

Each trial is ranked by its measurement where the cluster measured it, else by its calibrated
projection, else by its raw one (`planner/run/measurements.py`). The projection's stated error
(`oracle/performance/uncertainty.py`: the accuracy report's MAPE on the family's published runs) means
layouts within that error of the best cannot be told apart by the oracle; the robust pick chooses among
all of them (every trial of the run: beside its top-k the sweep keeps up to `KEEP` points within the
error, `planner/search/sweep.py`):
- a measured layout below another measured layout is out: the evidence has compared them;
- never below the user's own layout (`own`, the run's baseline) when it fits;
- a measured layout first: a projection within the error of it is no better known than it;
- then the most memory headroom (an OOM costs more than a few percent); within 1 GiB of that headroom,
  the fewer stack-specific knobs (whose effect rests on a prior, not on calibration rows), then the faster.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from paratune.ledger.models import TrialRecord
from paratune.oracle.specs.knobs import KNOB_SPECS

PickRule = Literal["robust", "argmax"]
HEADROOM_TIE_GB = 1.0
# Knobs whose effect rests on one constant shared by every family (overlap_cost, fitted on all rows at once:
# no published on/off pair isolates it) or on a stack's special build, not on rows of their own.
# name -> its off value (the registry's).
EXOTIC = {k: KNOB_SPECS[k].off for k in ("use_turbo_deepep", "tp_comm_overlap", "overlap_moe_expert_parallel_comm",
                                         "cuda_graph_impl", "fp8", "use_torch_fsdp2", "use_megatron_fsdp",
                                         "optimizer_cpu_offload", "pp_layout", "sync_free_stage")}


class Pick(BaseModel):
    """Which trial the run names as its winner, and why."""

    rule: PickRule
    trial_id: int
    argmax_trial_id: int
    own_trial_id: int | None = Field(default=None, description="the user's own layout: the pick is never below it")
    error: float = Field(description="the stated relative error the robust pick used")
    within_error: int = Field(description="other fitting trials within that error of the best")
    note: str


def exotic_knobs(config: dict) -> int:
    """How many stack-specific knobs a layout turns on (`EXOTIC`)."""
    return sum(config.get(k, off) not in (off, None, False) for k, off in EXOTIC.items())


def measured(t: TrialRecord) -> bool:
    """Whether the trial's figures are the cluster's measurement."""
    return t.calibrated is not None and t.calibrated.measured


def tps(t: TrialRecord) -> float:
    """Measured, else calibrated, else projected tokens/s/GPU (of a trial `pick` kept: it has a projected one)."""
    c = t.calibrated
    if c is not None and c.tokens_per_s_per_gpu is not None:
        return c.tokens_per_s_per_gpu
    assert t.tokens_per_s_per_gpu is not None
    return t.tokens_per_s_per_gpu


def _headroom(t: TrialRecord) -> float:
    c = t.calibrated
    memory = c.memory_per_gpu_gb if c is not None and c.memory_per_gpu_gb is not None else t.memory_per_gpu_gb
    return (t.result.memory_cap_gb or 0.0) - (memory or 0.0)


def fits(t: TrialRecord) -> bool:
    """Legal, with a throughput, and fits (as measured or calibrated where the run has them)."""
    c = t.calibrated
    return t.legal and t.tokens_per_s_per_gpu is not None and bool(
        c.fits if c is not None and c.fits is not None else t.fits)


def _what(t: TrialRecord) -> str:
    return (f"trial {t.id} ({tps(t):,.1f} tokens/s/GPU {'measured' if measured(t) else 'projected'}, "
            f"{_headroom(t):.1f} GiB headroom, {exotic_knobs(t.config)} stack-specific knob(s))")


def pick(trials: list[TrialRecord], error: float, rule: PickRule = "robust",
         own: TrialRecord | None = None) -> Pick | None:
    """The winner among `trials` (legal, fitting, with a throughput), never below `own` when it fits
    (module doc); None when there is none."""
    ok = [t for t in trials if fits(t)]
    if not ok:
        return None
    own = own if own is not None and fits(own) else None
    best = max(ok, key=lambda t: (tps(t), -t.id))
    near = [t for t in ok if tps(t) >= tps(best) * (1 - error)]
    within = len({t.config_key for t in near if t.config_key != best.config_key})
    spread = f"the oracle's error (±{100 * error:.1f}%)"
    if rule == "argmax" or len(near) == 1:
        note = (f"the highest tokens/s/GPU; within {spread} of {within} other layout(s)" if within else
                f"the highest tokens/s/GPU, clear of the others by more than {spread}")
        return Pick(rule=rule, trial_id=best.id, argmax_trial_id=best.id, own_trial_id=own.id if own else None,
                    error=error, within_error=within, note=note)
    top_measured = max((tps(t) for t in ok if measured(t)), default=0.0)
    floor = tps(own) if own is not None else 0.0
    pool = [t for t in near if tps(t) >= floor and not (measured(t) and tps(t) < top_measured)]
    pool = [t for t in pool if measured(t)] or pool
    room = max(_headroom(t) for t in pool)
    chosen = max((t for t in pool if _headroom(t) >= room - HEADROOM_TIE_GB),
                 key=lambda t: (-exotic_knobs(t.config), tps(t), -t.id))
    why = (f"{within + 1} layouts are within {spread} of the best; of those at or above the user's own layout "
           f"(trial {own.id}, {tps(own):,.1f})" if own is not None else
           f"{within + 1} layouts are within {spread} of the best; of those")
    why += ", measured first, then the most headroom, fewer stack-specific knobs, the faster"
    note = (f"{_what(chosen)}: {why}" if chosen.id == best.id else
            f"{_what(chosen)} over the argmax, {_what(best)}: {why}; --pick argmax takes the argmax")
    return Pick(rule=rule, trial_id=chosen.id, argmax_trial_id=best.id, own_trial_id=own.id if own else None,
                error=error, within_error=within, note=note)
