"""Learning from the user's cluster: a measured layout is evidence, and the run's projections follow it.

A measured layout ranks by its measurement: its `calibrated` figures are the measured ones, marked
`measured` (the median of its measurements when there are several). Every other projection of the run
is scaled by one time factor, the median over the measured layouts of measured / projected iteration
(iteration x projected / measured tokens/s); a median, so that one bad measurement among three or more
cannot move it (with two it is their geometric mean). One factor, not one per term: two measurements
that differ in, say, how much EP overlap hid cannot tell compute from communication apart, and a
per-term fit on them reads one layout's surprise as a law for all. Each measured layout's residual under
the factor (measured / calibrated - 1) is kept, so a point the factor cannot explain shows.

Memory: a measured peak gives (peak - static) / activations for its layout (weights, gradients,
optimizer state and buffers are counted exactly, the activations are not); the median of those scales
every projection's activations. A layout that ran although the oracle projected it not to fit is
accepted (a run that happened is the strongest evidence there is): it fits, and the disagreement is
stated in the fit.

Figures are checked before they are stored: finite, above zero, at most the GPU's physical bound:
tokens/s/GPU at most the layout's projected rate divided by its projected MFU (that is, the rate at
100 % of the GPU's dense peak for the precision, the peak MFU is defined against), peak memory at most
the cluster's HBM per GPU.

Measurements belong to the model and the cluster's hardware, not to one run: `adopt` copies into a run
the measurements of earlier runs of the same pair (in its own ledger, or in another `paratune tune`
folder's ledger), each layout re-projected under the run's rules.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from pydantic import BaseModel

from paratune.ledger.models import Calibrated, Factors, Measurement, TrialRecord
from paratune.ledger.store import Ledger
from paratune.oracle.errors import InputError
from paratune.oracle.evaluate import evaluate_config, layout_violations
from paratune.oracle.specs import ClusterSpec, EffectiveConfig, EvalResult, Workload

# What makes two runs the same pair: the model, and the cluster fields that change a layout's time or memory.
HARDWARE = {"num_nodes", "gpus_per_node", "gpu", "hbm_capacity_gb", "stack", "allow_cross_node_tp"}


def _measured_ms(r: EvalResult, tokens: float) -> float:
    """The iteration a measured tokens/s/GPU implies for the layout of `r` (tokens/s scale as 1 / iteration)."""
    return (r.iteration_ms or 0.0) * (r.tokens_per_s_per_gpu or 0.0) / tokens


def _static_gb(r: EvalResult) -> float:
    return (r.memory_per_gpu_gb or 0.0) - (r.activation_gb or 0.0)


def check_figures(r: EvalResult, cluster: ClusterSpec, tokens: float, peak_gib: float | None) -> None:
    """Refuse figures no run can have produced (module doc); `r` is the layout's simulated projection."""
    if not (math.isfinite(tokens) and tokens > 0):
        raise InputError(f"must be a finite number above 0, got {tokens}", key="tokens_per_s_per_gpu")
    if r.tokens_per_s_per_gpu and r.mfu:
        bound = r.tokens_per_s_per_gpu / r.mfu
        if tokens > bound:
            raise InputError(f"{tokens:,.1f} is above what this layout can reach on a {cluster.gpu.name}: "
                             f"{bound:,.1f} tokens/s/GPU at 100 % of its dense peak (MFU {tokens / bound:.1f}x)",
                             key="tokens_per_s_per_gpu")
    if peak_gib is None:
        return
    if not (math.isfinite(peak_gib) and peak_gib > 0):
        raise InputError(f"must be a finite number above 0, got {peak_gib}", key="peak_memory_gib")
    if peak_gib > cluster.hbm_capacity_gb:
        raise InputError(f"{peak_gib:,.1f} GiB is more than the {cluster.hbm_capacity_gb:g} GiB of HBM a "
                         f"{cluster.gpu.name} of this cluster has", key="peak_memory_gib")


def fit(pairs: list[tuple[TrialRecord, list[Measurement]]]) -> Factors | None:
    """The run's factors from each measured trial with its measurements; None without a timed one."""
    timed = [(t, statistics.median(m.tokens_per_s_per_gpu for m in ms)) for t, ms in pairs
             if ms and t.result.iteration_ms and t.result.tokens_per_s_per_gpu]
    if not timed:
        return None
    logs = [math.log(_measured_ms(t.result, tokens) / (t.result.iteration_ms or 1.0)) for t, tokens in timed]
    factor = math.exp(statistics.median(logs))
    residuals = {t.id: tokens * factor / (t.tokens_per_s_per_gpu or 1.0) - 1.0 for t, tokens in timed}
    ids = ", ".join(f"#{t.id}" for t, _ in timed)
    how = (f"one time factor x{factor:.4f}: the median of {len(timed)} measured/projected iteration(s) ({ids}); "
           "residuals " + ", ".join(f"#{i} {100 * v:+.1f}%" for i, v in residuals.items()))
    acts = [max(0.0, statistics.median(peaks) - _static_gb(t.result)) / (t.result.activation_gb or 1.0)
            for t, ms in pairs if (peaks := [m.peak_memory_gib for m in ms if m.peak_memory_gib is not None])
            and t.result.activation_gb]
    act = statistics.median(acts) if acts else 1.0
    how += f"; activation factor x{act:.4f} from {len(acts)} measured peak(s)" if acts else \
        "; activation factor 1 (no peak measured)"
    over = [t for t, ms in pairs if ms and t.result.fits is False]
    if over:
        how += "; ran although projected not to fit: " + ", ".join(
            f"#{t.id} ({t.memory_per_gpu_gb:.1f} GiB projected, cap {t.result.memory_cap_gb:.1f})" for t in over)
    return Factors(compute=factor, other=factor, activations=act, measurements=len(timed), fit=how,
                   residuals=residuals)


def calibrate(r: EvalResult, f: Factors) -> Calibrated:
    """`r` with the factors applied (time terms and activations scaled, the rest as projected)."""
    iteration = tokens = memory = fits = None
    if r.iteration_ms and r.tokens_per_s_per_gpu:
        compute = sum(r.breakdown.get(k, 0.0) for k in ("time_compute_ms", "time_recompute_ms"))
        iteration = f.compute * compute + f.other * (r.iteration_ms - compute)
        tokens = r.tokens_per_s_per_gpu * r.iteration_ms / iteration
    if r.memory_per_gpu_gb is not None and r.activation_gb is not None:
        memory = r.memory_per_gpu_gb + (f.activations - 1.0) * r.activation_gb
        fits = memory <= (r.memory_cap_gb if r.memory_cap_gb is not None else math.inf)
    return Calibrated(tokens_per_s_per_gpu=tokens, iteration_ms=iteration, memory_per_gpu_gb=memory, fits=fits,
                      factors=f)


def as_measured(t: TrialRecord, ms: list[Measurement], f: Factors) -> Calibrated:
    """A measured trial's figures: the median measurement, its peak where measured (else the calibrated
    projection's), and fits: it ran."""
    tokens = statistics.median(m.tokens_per_s_per_gpu for m in ms)
    peaks = [m.peak_memory_gib for m in ms if m.peak_memory_gib is not None]
    memory = statistics.median(peaks) if peaks else calibrate(t.result, f).memory_per_gpu_gb
    return Calibrated(tokens_per_s_per_gpu=tokens, iteration_ms=_measured_ms(t.result, tokens),
                      memory_per_gpu_gb=memory, fits=True, factors=f, measured=True)


def _by_trial(ledger: Ledger, run_id: int) -> dict[int, list[Measurement]]:
    out: dict[int, list[Measurement]] = {}
    for m in ledger.measurements(run_id):
        out.setdefault(m.trial_id, []).append(m)
    return out


def recalibrate(ledger: Ledger, run_id: int, trial_ids: list[int] | None = None) -> Factors | None:
    """Refit the run's factors and store the calibrated (or measured) figures of its trials (or of
    `trial_ids`) under them; None, and nothing stored, when the run has no timed measurement."""
    measured = _by_trial(ledger, run_id)
    f = fit([(ledger.trial(run_id, i), ms) for i, ms in measured.items()])
    if f is not None:
        trials = ledger.trials(run_id) if trial_ids is None else [ledger.trial(run_id, i) for i in trial_ids]
        ledger.set_calibrated(run_id, {t.id: as_measured(t, measured[t.id], f) if t.id in measured
                                       else calibrate(t.result, f) for t in trials})
    return f


def _simulated(ledger: Ledger, run_id: int, trial: TrialRecord, workload: Workload, cluster: ClusterSpec,
               origin: str) -> TrialRecord:
    """The run's simulated trial of `trial`'s layout, projected now (free) when the run has none."""
    if trial.result.iteration_ms:
        return trial
    cfg = EffectiveConfig(**trial.config)
    result = evaluate_config(workload, cluster, cfg, performance=True,
                             violations=layout_violations(workload, cluster, cfg))
    return ledger.record_trial(run_id, cfg, result, fidelity="simulate", wall_ms=0.0, origin=origin)


def record(ledger: Ledger, run_id: int, trial_id: int, tokens_per_s_per_gpu: float,
           peak_memory_gib: float | None = None, note: str = "") -> tuple[Measurement, Factors, TrialRecord]:
    """Check and store a measurement of a trial (one recorded below simulate is projected first, and the
    measurement goes to that projection), then refit and recalibrate the run; (measurement, factors, trial)."""
    workload, cluster = ledger.run_inputs(run_id)
    trial = ledger.trial(run_id, trial_id)
    if not trial.legal:
        raise InputError(f"trial {trial_id} breaks a rule of this run ({trial.result.reason}): it cannot have run "
                         "as recorded", key="trial")
    trial = _simulated(ledger, run_id, trial, workload, cluster, origin=f"measured (trial {trial_id})")
    check_figures(trial.result, cluster, tokens_per_s_per_gpu, peak_memory_gib)
    m = ledger.record_measurement(run_id, trial.id, tokens_per_s_per_gpu, peak_memory_gib, note)
    f = recalibrate(ledger, run_id)
    assert f is not None  # the measurement just stored is of a simulated trial
    return m, f, ledger.trial(run_id, trial.id)


class Adopted(BaseModel):
    """What `adopt` found for a run: measurements of its pair elsewhere, how many it now uses, and why not the rest."""

    found: int
    used: int
    skipped: list[str]

    def line(self) -> str:
        if not self.found:
            return "measurements: none of this model on this cluster in earlier runs"
        why = f" ({'; '.join(self.skipped)})" if self.skipped else ""
        return f"measurements: using {self.used} of {self.found} from earlier runs of this model on this cluster{why}"


def same_pair(a: tuple[Workload, ClusterSpec], b: tuple[Workload, ClusterSpec]) -> bool:
    """Whether two runs are of the same model on the same hardware (`HARDWARE`)."""
    return a[0].model == b[0].model and \
        a[1].model_dump(include=HARDWARE) == b[1].model_dump(include=HARDWARE)


def adopt(ledger: Ledger, run_id: int, source: Ledger | None = None) -> Adopted:
    """Copy into run `run_id` the measurements of the same pair in `source`'s runs (default: the other runs of
    `ledger`), each layout re-projected under this run's rules; one copied before is not copied again."""
    source = source or ledger
    workload, cluster = ledger.run_inputs(run_id)
    have = {m.note.split("]")[0] + "]" for m in ledger.measurements(run_id) if m.note.startswith("[")}
    found, used, skipped = 0, 0, []
    for run in source.runs():
        if (source is ledger and run.id == run_id) or not same_pair((workload, cluster), source.run_inputs(run.id)):
            continue
        for m in source.measurements(run.id):
            if m.note.startswith("[from "):
                continue  # itself a copy: its origin is adopted directly
            found += 1
            tag = f"[from {source.path} run {run.id} measurement {m.id}]"
            if tag in have:
                used += 1
                continue
            cfg = EffectiveConfig(**source.trial(run.id, m.trial_id).config)
            violations = layout_violations(workload, cluster, cfg)
            if violations:
                skipped.append(f"measurement {m.id} of run {run.id}: {violations[0].message}")
                continue
            result = evaluate_config(workload, cluster, cfg, performance=True, violations=[])
            trial = ledger.record_trial(run_id, cfg, result, fidelity="simulate", wall_ms=0.0,
                                        origin=f"measured in run {run.id}")
            ledger.record_measurement(run_id, trial.id, m.tokens_per_s_per_gpu, m.peak_memory_gib,
                                      f"{tag} {m.note}".strip())
            used += 1
    if used:
        recalibrate(ledger, run_id)
    return Adopted(found=found, used=used, skipped=skipped)


def adopt_measurements(ledger: Ledger, run_id: int, folder: Path | None, key: str = "--calibration-from") -> Adopted:
    """The run takes the measurements of its pair from its ledger's other runs, or from `folder`'s ledger (a
    `paratune tune` output folder: `tune --calibration-from`, MCP `open_run`'s calibration_from, named `key`
    when it has no ledger)."""
    if folder is None:
        return adopt(ledger, run_id)
    path = folder / "ledger.sqlite"
    if not path.is_file():
        raise InputError("no ledger.sqlite in it: is it a `paratune tune` output folder?", file=str(folder), key=key)
    with Ledger(path) as source:
        return adopt(ledger, run_id, source)
