"""Per-run artifacts: trials.jsonl, summary.json, trials.png and trials/<id>.yaml, each written atomically."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from oracle.specs import EffectiveConfig, Workload

from .models import TrialRecord


def _atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Write to a temporary sibling, then rename over `path`: readers see the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_text(path: Path, text: str) -> None:
    _atomic(path, lambda p: p.write_text(text, encoding="utf-8"))


def write_trials_jsonl(path: Path, trials: list[TrialRecord]) -> None:
    """One JSON object per trial: id, origin, fidelity, config and the full result."""
    lines = [t.model_dump_json(include={"id", "origin", "fidelity", "config_key", "config", "result", "wall_ms"})
             for t in trials]
    write_text(path, "".join(line + "\n" for line in lines))


def write_summary(path: Path, summary: dict[str, Any]) -> None:
    write_text(path, json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")


def overlay(workload: Workload, trial: TrialRecord) -> str:
    """A self-contained native workload YAML reproducing one trial (`paratune project ... --workload`)."""
    knobs = EffectiveConfig(**trial.config).as_trial()
    training = workload.training.model_copy(update=knobs.overrides())
    body = {**workload.model.model_dump(exclude_none=True), **training.model_dump(mode="json", exclude_none=True)}
    tps = trial.tokens_per_s_per_gpu
    head = (f"# paratune trial {trial.id} ({trial.origin}, {trial.fidelity}): "
            f"{'%.1f tokens/s/GPU' % tps if tps is not None else 'no throughput'}"
            f"{'' if trial.legal else ' [illegal]'}{'' if trial.fits in (True, None) else ' [does not fit]'}\n")
    return head + yaml.safe_dump(body, sort_keys=False)


def write_overlays(directory: Path, workload: Workload, trials: list[TrialRecord]) -> None:
    """trials/<id>.yaml for every trial; the folder is swapped in whole, never half-written."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}."))
    try:
        for t in trials:
            (staging / f"{t.id}.yaml").write_text(overlay(workload, t), encoding="utf-8")
        old = directory.with_name(f".{directory.name}.old")
        if directory.exists():
            os.replace(directory, old)
        os.replace(staging, directory)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_plot(path: Path, trials: list[TrialRecord], title: str) -> None:
    """trials.png: tokens/s/GPU per trial, the incumbent as a step line, rejected points marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    ok = [(i, t.tokens_per_s_per_gpu) for i, t in enumerate(trials, 1)
          if t.legal and t.fits and t.tokens_per_s_per_gpu is not None]
    rejected = [i for i, t in enumerate(trials, 1) if not (t.legal and t.fits)]
    incumbent, best = [], 0.0
    for i, t in enumerate(trials, 1):
        if t.legal and t.fits and t.tokens_per_s_per_gpu:
            best = max(best, t.tokens_per_s_per_gpu)
        incumbent.append(best or None)
    if ok:
        ax.scatter(*zip(*ok), s=18, label="trial (legal, fits)", color="tab:blue")
    floor = min((v for _, v in ok), default=0.0) * 0.95
    if rejected:
        ax.scatter(rejected, [floor] * len(rejected), marker="x", color="tab:red",
                   label="rejected (illegal or does not fit)")
    ax.step(range(1, len(trials) + 1), incumbent, where="post", color="tab:green", label="incumbent")
    ax.set_xlabel("trial")
    ax.set_ylabel("tokens/s/GPU")
    ax.set_title(title)
    ax.legend(loc="best")
    fig.tight_layout()
    _atomic(path, lambda p: fig.savefig(p, format="png", dpi=110))
    plt.close(fig)
