"""Per-run files for the team: trials.jsonl, summary.json, trials/<id>.yaml and text files (launch.sh,
scratchpad.txt), each written atomically; the plots are `plots.py`."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from paratune.ledger.models import TrialRecord
from paratune.oracle.specs import Workload

FILE_MODE = 0o644  # artifacts are for the team: readable by all, like the ledger
SCRIPT_MODE = 0o755  # launch.sh runs as it is
# libyaml's emitter where PyYAML was built with it (the same representer, the same text; a run writes an
# overlay per trial, and the pure-Python emitter took most of a second for 65 of them)
SAFE_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def write_atomic(path: Path, write: Callable[[Path], object], mode: int = FILE_MODE) -> None:
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
    write_atomic(path, lambda p: p.write_text(text, encoding="utf-8"), SCRIPT_MODE if executable else FILE_MODE)


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
    return head + yaml.dump(body, Dumper=SAFE_DUMPER, sort_keys=False)


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
