"""One line per trial for people and LLMs: what differs from the baseline and what it scored."""

from __future__ import annotations

from typing import Any

from paratune.oracle.specs import EffectiveConfig

from .models import TrialRecord
from .store import Ledger


def history_lines(ledger: Ledger, run_id: int, baseline: EffectiveConfig, k: int | None = None) -> list[str]:
    """The run's trials in order (only the latest `k` when given: only those are read), each as `trial_line`."""
    trials = ledger.trials(run_id) if k is None else ledger.latest_trials(run_id, k)
    base = baseline.as_trial().__dict__
    measured = {m.trial_id: m.tokens_per_s_per_gpu for m in ledger.measurements(run_id)}  # the latest wins
    return [trial_line(t, base, measured.get(t.id)) for t in trials]


def trial_line(trial: TrialRecord, base: dict[str, Any], measured: float | None = None) -> str:
    """`#id fidelity origin: knob=value ... | legal fits 41.2 GiB 3120.5 tok/s/GPU` (or the violations),
    then the calibrated projection and the measured figure when the run has them. `base` is the
    baseline's knobs (`EffectiveConfig.as_trial`); the knob=value words are `--set` arguments that
    give the trial's layout back (knobs the layout leaves unset follow from the others)."""
    knobs = trial.knobs.__dict__
    changed = [f"{k}={_show(v)}" for k, v in knobs.items() if v != base[k] and v is not None]
    head = f"#{trial.id} {trial.fidelity} {trial.origin}: {' '.join(changed) or 'baseline'}"
    if not trial.legal:
        codes = ",".join(v.code for v in trial.result.violations) or trial.result.reason or "unknown rule"
        return f"{head} | ILLEGAL {codes}"
    fits = {True: "fits", False: "OOM", None: "fits=?"}[trial.fits]
    mem = "-" if trial.memory_per_gpu_gb is None else f"{trial.memory_per_gpu_gb:.1f}"
    tps = "-" if trial.tokens_per_s_per_gpu is None else f"{trial.tokens_per_s_per_gpu:.1f}"
    line = f"{head} | legal {fits} {mem} GiB {tps} tok/s/GPU"
    cal = trial.calibrated
    if cal is not None and cal.tokens_per_s_per_gpu is not None:
        line += f" | calibrated {cal.tokens_per_s_per_gpu:.1f} tok/s/GPU"
        if cal.memory_per_gpu_gb is not None:
            line += f" {cal.memory_per_gpu_gb:.1f} GiB{'' if cal.fits else ' OOM'}"
    if measured is not None:
        line += f" | measured {measured:.1f} tok/s/GPU"
    return line


def _show(value: object) -> str:
    """A knob value as `--set` reads it back: a list comma-joined."""
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
