"""Learning from the user's cluster: measured trials become per-run correction factors that every
projection of the run then carries as `calibrated`, beside its raw value.

Time: a measured tokens/s/GPU gives the measured iteration (iteration x projected / measured tokens/s).
With one measurement, or several whose mix of compute and other time is alike, one factor scales the
whole iteration (the geometric mean of measured / projected). With two or more that differ in that mix
(the non-compute share spread by at least `MIX_SPREAD`), two factors are fitted by least squares on the
relative error: one on compute + recompute, one on communication + bubble + optimizer. Memory: a measured
peak scales the activations (weights, gradients, optimizer state and buffers are counted exactly, the
activations are not): factor = mean of (peak - static) / activations. Factors are stated with how they
were fitted; nothing is fitted per trial.
"""

from __future__ import annotations

import math

from paratune.ledger.models import Calibrated, Factors, Measurement, TrialRecord
from paratune.ledger.store import Ledger
from paratune.oracle.errors import InputError
from paratune.oracle.specs import EvalResult

MIX_SPREAD = 0.05  # spread of the non-compute share that lets two time factors be told apart
COMPUTE = ("time_compute_ms", "time_recompute_ms")


def _split(r: EvalResult) -> tuple[float, float]:
    """(compute + recompute, everything else) ms of a simulated iteration."""
    compute = sum(r.breakdown.get(k, 0.0) for k in COMPUTE)
    return compute, (r.iteration_ms or 0.0) - compute


def _measured_ms(r: EvalResult, tokens: float) -> float:
    return (r.iteration_ms or 0.0) * (r.tokens_per_s_per_gpu or 0.0) / tokens


def fit(pairs: list[tuple[EvalResult, Measurement]]) -> Factors | None:
    """The run's factors from (projected result, measurement) pairs; None without a measurement."""
    timed = [(r, m) for r, m in pairs if r.iteration_ms and r.tokens_per_s_per_gpu]
    if not timed:
        return None
    xs, ys = [], []
    for r, m in timed:
        c, o = _split(r)
        target = _measured_ms(r, m.tokens_per_s_per_gpu)
        xs.append(c / target)
        ys.append(o / target)
    shares = [y / (x + y) for x, y in zip(xs, ys)]
    a = b = math.exp(sum(-math.log(x + y) for x, y in zip(xs, ys)) / len(xs))
    how = f"one time factor (geometric mean of {len(xs)} measured/projected iteration{'s' if len(xs) > 1 else ''})"
    if len(xs) >= 2 and max(shares) - min(shares) >= MIX_SPREAD:
        sxx, sxy, syy = sum(x * x for x in xs), sum(x * y for x, y in zip(xs, ys)), sum(y * y for y in ys)
        sx, sy = sum(xs), sum(ys)
        det = sxx * syy - sxy * sxy
        a2, b2 = (sx * syy - sy * sxy) / det, (sy * sxx - sx * sxy) / det
        if a2 > 0 and b2 > 0:
            a, b = a2, b2
            how = (f"two time factors (least squares on {len(xs)} measurements: compute, "
                   "then communication/bubble/optimizer)")
    mem = [(m.peak_memory_gib - (r.memory_per_gpu_gb - r.activation_gb)) / r.activation_gb
           for r, m in timed if m.peak_memory_gib is not None and r.activation_gb and r.memory_per_gpu_gb is not None]
    act = sum(mem) / len(mem) if mem else 1.0
    how += f"; activation factor {f'from {len(mem)} measured peak(s)' if mem else '1 (no peak measured)'}"
    return Factors(compute=a, other=b, activations=act, measurements=len(timed), fit=how)


def calibrate(r: EvalResult, f: Factors) -> Calibrated:
    """`r` with the factors applied (time terms and activations scaled, the rest as projected)."""
    iteration = tokens = memory = fits = None
    if r.iteration_ms and r.tokens_per_s_per_gpu:
        c, o = _split(r)
        iteration = f.compute * c + f.other * o
        tokens = r.tokens_per_s_per_gpu * r.iteration_ms / iteration
    if r.memory_per_gpu_gb is not None and r.activation_gb is not None:
        memory = r.memory_per_gpu_gb + (f.activations - 1.0) * r.activation_gb
        fits = memory <= (r.memory_cap_gb if r.memory_cap_gb is not None else math.inf)
    return Calibrated(tokens_per_s_per_gpu=tokens, iteration_ms=iteration, memory_per_gpu_gb=memory, fits=fits,
                      factors=f)


def run_factors(ledger: Ledger, run_id: int) -> Factors | None:
    """The run's current factors, fitted from all its measurements."""
    ms = ledger.measurements(run_id)
    if not ms:
        return None
    return fit([(ledger.trial(run_id, m.trial_id).result, m) for m in ms])


def recalibrate(ledger: Ledger, run_id: int, trial_ids: list[int] | None = None) -> Factors | None:
    """Refit the run's factors and store the calibrated projection of its trials (or of `trial_ids`)
    under them; None, and nothing stored, when the run has no measurement."""
    f = run_factors(ledger, run_id)
    if f is not None:
        trials = ledger.trials(run_id) if trial_ids is None else [ledger.trial(run_id, i) for i in trial_ids]
        ledger.set_calibrated(run_id, {t.id: calibrate(t.result, f) for t in trials})
    return f


def record(ledger: Ledger, run_id: int, trial_id: int, tokens_per_s_per_gpu: float,
           peak_memory_gib: float | None = None, note: str = "") -> tuple[Measurement, Factors, TrialRecord]:
    """Store a measurement of a simulated trial, refit and recalibrate the run; (measurement, factors, trial)."""
    trial = ledger.trial(run_id, trial_id)
    if not trial.result.iteration_ms:
        raise InputError(f"trial {trial_id} has no projected throughput ({trial.fidelity}); measure a simulated "
                         "trial", key="trial")
    if not tokens_per_s_per_gpu > 0 or (peak_memory_gib is not None and not peak_memory_gib > 0):
        raise InputError("a measurement must be positive", key="tokens_per_s_per_gpu")
    m = ledger.record_measurement(run_id, trial_id, tokens_per_s_per_gpu, peak_memory_gib, note)
    f = recalibrate(ledger, run_id)
    if f is None:  # cannot happen: the measurement just stored is of a simulated trial
        raise InputError(f"no factors could be fitted from run {run_id}'s measurements", key="trial")
    return m, f, ledger.trial(run_id, trial_id)
