"""One line per trial for people and LLMs: what differs from the baseline and what it scored."""

from __future__ import annotations

from typing import Any

from oracle.specs import EffectiveConfig

from .models import TrialRecord
from .store import Ledger


def history_lines(ledger: Ledger, run_id: int, baseline: EffectiveConfig, k: int | None = None) -> list[str]:
    """The run's trials in order (only the latest `k` when given), each as `trial_line`."""
    trials = ledger.trials(run_id)
    if k is not None:
        trials = trials[max(len(trials) - k, 0) :]
    base = baseline.model_dump()
    return [trial_line(t, base) for t in trials]


def trial_line(trial: TrialRecord, base: dict[str, Any]) -> str:
    """`#id fidelity origin: knob=value ... | legal fits 41.2 GiB 3120.5 tok/s/GPU` (or the violations)."""
    changed = [f"{k}={_show(trial.config.get(k))}" for k, v in base.items() if trial.config.get(k) != v]
    head = f"#{trial.id} {trial.fidelity} {trial.origin}: {' '.join(changed) or 'baseline'}"
    if not trial.legal:
        codes = ",".join(v.code for v in trial.result.violations) or trial.result.reason or "unknown rule"
        return f"{head} | ILLEGAL {codes}"
    fits = {True: "fits", False: "OOM", None: "fits=?"}[trial.fits]
    mem = "-" if trial.memory_per_gpu_gb is None else f"{trial.memory_per_gpu_gb:.1f}"
    tps = "-" if trial.tokens_per_s_per_gpu is None else f"{trial.tokens_per_s_per_gpu:.1f}"
    return f"{head} | legal {fits} {mem} GiB {tps} tok/s/GPU"


def _show(value: object) -> str:
    return "none" if value is None else str(value)
