"""Per-run artifacts: trials.jsonl, summary.json, trials.png and trials/<id>.yaml, each written atomically."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from paratune.ledger.models import Measurement, TrialRecord
from paratune.oracle.specs import Workload

FILE_MODE = 0o644  # artifacts are for the team: readable by all, like the ledger
SCRIPT_MODE = 0o755  # launch.sh runs as it is


def _atomic(path: Path, write: Callable[[Path], object], mode: int = FILE_MODE) -> None:
    """Write to a temporary sibling, then rename over `path`: readers see the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, mode)  # mkstemp makes 0600
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_text(path: Path, text: str, *, executable: bool = False) -> None:
    _atomic(path, lambda p: p.write_text(text, encoding="utf-8"), SCRIPT_MODE if executable else FILE_MODE)


def write_trials_jsonl(path: Path, trials: list[TrialRecord]) -> None:
    """One JSON object per trial: id, origin, fidelity, config and the full result."""
    lines = [t.model_dump_json(include={"id", "origin", "fidelity", "config_key", "config", "result", "wall_ms"})
             for t in trials]
    write_text(path, "".join(line + "\n" for line in lines))


def write_summary(path: Path, summary: dict[str, Any]) -> None:
    write_text(path, json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")


def overlay(workload: Workload, trial: TrialRecord) -> str:
    """A self-contained native workload YAML reproducing one trial (`paratune project ... --workload`)."""
    knobs = trial.knobs
    training = workload.training.model_copy(update=knobs.overrides())
    body = {**workload.model.model_dump(exclude_none=True), **training.model_dump(mode="json", exclude_none=True)}
    tps = trial.tokens_per_s_per_gpu
    head = (f"# paratune trial {trial.id} ({trial.origin}, {trial.fidelity}): "
            f"{f'{tps:.1f} tokens/s/GPU' if tps is not None else 'no throughput'}"
            f"{'' if trial.legal else ' [illegal]'}{'' if trial.fits in (True, None) else ' [does not fit]'}\n")
    return head + yaml.safe_dump(body, sort_keys=False)


def write_overlays(directory: Path, workload: Workload, trials: list[TrialRecord]) -> None:
    """trials/<id>.yaml for every trial; the folder is swapped in whole, never half-written."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    for stale in directory.parent.glob(f".{directory.name}.*"):  # left by a writer killed mid-way
        shutil.rmtree(stale, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}."))
    try:
        os.chmod(staging, 0o755)
        for t in trials:
            (staging / f"{t.id}.yaml").write_text(overlay(workload, t), encoding="utf-8")
        old = directory.with_name(f".{directory.name}.old")
        if directory.exists():
            os.replace(directory, old)
        os.replace(staging, directory)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def phase_of(origin: str) -> str:
    """The search phase a trial's origin tag belongs to: seed, llm:plan / llm:roundN, sweep, or other."""
    if origin.startswith("seed:"):
        return "seed"
    if origin.startswith("llm:"):
        return origin
    return origin if origin == "sweep" else "other (MCP, CLI)"


def savefig(path: Path, fig: Any) -> None:
    """Write a matplotlib figure as PNG, atomically, and free it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    _atomic(path, lambda p: fig.savefig(p, format="png", dpi=110))
    plt.close(fig)


def figure(*args: Any, **kw: Any) -> Any:
    """`plt.subplots` on the headless Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kw)


def write_plot(path: Path, trials: list[TrialRecord], title: str, *, baseline: float | None = None,
               measured: Sequence[Measurement] = (), winner_id: int | None = None, error: float | None = None) -> None:
    """trials.png: projected tokens/s/GPU of each scored trial in the order scored, the search phases
    divided and named, the incumbent as a step line, the band within the oracle's stated `error` of the
    best, the baseline and measured figures as lines, and the rejected trials on a strip of their own by
    reason (illegal, does not fit). Memory-only checks are not drawn (they have no throughput)."""
    scored = [t for t in trials if t.fidelity != "memory_only" or not t.legal or t.fits is False]
    fig, (ax, strip) = figure(2, 1, figsize=(9, 5.2), sharex=True, gridspec_kw={"height_ratios": [5, 1]})
    xs = range(1, len(scored) + 1)
    ok = [(i, t.tokens_per_s_per_gpu) for i, t in zip(xs, scored) if t.legal and t.fits and t.tokens_per_s_per_gpu]
    if ok:
        ax.scatter(*zip(*ok), s=16, color="tab:blue", label="trial (legal, fits)")
    incumbent, best = [], None
    for t in scored:
        if t.legal and t.fits and t.tokens_per_s_per_gpu:
            best = max(best or 0.0, t.tokens_per_s_per_gpu)
        incumbent.append(best)
    ax.step(list(xs), incumbent, where="post", color="tab:green", label="incumbent (best so far)")
    if error and best:
        ax.axhspan(best * (1 - error), best, color="tab:green", alpha=0.08,
                   label=f"within the oracle's error (±{100 * error:.1f}%) of the best")
    if baseline is not None:
        ax.axhline(baseline, color="tab:gray", linestyle="--", label=f"baseline (workload's layout) {baseline:,.0f}")
    for m in measured:
        ax.axhline(m.tokens_per_s_per_gpu, color="tab:purple", linestyle=":",
                   label=f"measured, trial {m.trial_id}: {m.tokens_per_s_per_gpu:,.0f}")
    for i, t in zip(xs, scored):
        if t.id == winner_id and t.tokens_per_s_per_gpu:
            ax.scatter([i], [t.tokens_per_s_per_gpu], marker="*", s=180, color="gold", edgecolor="black", zorder=5,
                       label=f"winner (trial {t.id})")
    _draw_phases(ax, strip, [phase_of(t.origin) for t in scored])
    _draw_rejected(strip, list(zip(xs, scored)))
    strip.set_yticks([])
    strip.set_ylabel("rejected", fontsize=8)
    if strip.get_legend_handles_labels()[0]:
        strip.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    strip.set_xlabel("trial, in the order scored (memory-only checks not drawn)")
    ax.set_ylabel("projected tokens/s/GPU")
    ax.set_title(title, pad=16)
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    savefig(path, fig)


def _draw_phases(ax, strip, phases: list[str]) -> None:
    """A divider between the search phases on both panels, and each phase's name above its span."""
    for i in range(1, len(phases)):
        if phases[i] != phases[i - 1]:
            for a in (ax, strip):
                a.axvline(i + 0.5, color="black", linewidth=0.8, alpha=0.5)
    start = 0
    for i in range(1, len(phases) + 1):
        if i == len(phases) or phases[i] != phases[start]:
            ax.text((start + i + 1) / 2, 1.01, phases[start], transform=ax.get_xaxis_transform(), ha="center",
                    va="bottom", fontsize=8)
            start = i


def _draw_rejected(strip, numbered: list[tuple[int, TrialRecord]]) -> None:
    """The rejected trials on the strip, by reason (illegal, does not fit), with their counts."""
    for marker, color, label, which in (("x", "tab:red", "illegal", lambda t: not t.legal),
                                        ("v", "tab:orange", "does not fit (OOM)",
                                         lambda t: t.legal and t.fits is False)):
        hits = [i for i, t in numbered if which(t)]
        if hits:
            strip.scatter(hits, [0] * len(hits), marker=marker, color=color, label=f"{label}: {len(hits)}")
