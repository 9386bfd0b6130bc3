"""Turn `--config` and `--set key=value` into one validated TrialConfig.

`--config` is inline JSON, a JSON/YAML file (also as `@file`), or `-` for standard input. It takes
the knobs of a TrialConfig, or a whole layout as paratune prints one (`summary.json`'s winner
config, an EvalResult's `config`), or a trial's workload file (`trials/<id>.yaml`): that layout's
knobs are used, and its other fields (sequence length, optimizer dtypes, the model) must be the
workload's, since they are workload settings, not knobs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from paratune.oracle.errors import InputError
from paratune.oracle.inputs import load_workload
from paratune.oracle.inputs.yaml_io import build, read_mapping
from paratune.oracle.knob_bounds import check_knob_bounds
from paratune.oracle.specs import EffectiveConfig, TrialConfig, Workload

_LAYOUT_FIELDS = frozenset(EffectiveConfig.model_fields)


def _is_file(text: str) -> bool:
    try:
        return Path(text).is_file()
    except OSError:  # e.g. a long inline JSON is no file name
        return False


def _config_mapping(text: str) -> dict:
    """`--config`: `-` (stdin), `@path`, a path, or inline JSON, each holding one mapping."""
    if text == "-":
        source, raw = "--config (stdin)", sys.stdin.read()
    elif text.startswith("@") or (_is_file(text) and not text.lstrip().startswith("{")):
        return read_mapping(text.removeprefix("@"))
    else:
        source, raw = "--config", text
    try:
        data = json.loads(raw) if raw.lstrip().startswith("{") else yaml.safe_load(raw)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise InputError(f"not valid JSON or YAML ({str(exc).splitlines()[0]}) and not a file", file=source) from None
    if not isinstance(data, dict):
        raise InputError("must be an object of TrialConfig knobs", file=source)
    return data


def _set_pairs(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InputError(f"expected key=value, got {pair!r}", file="--set")
        out[key.strip()] = yaml.safe_load(value) if value.strip() else None
    return out


def _from_layout(data: dict, workload: Workload, file: str) -> TrialConfig:
    """The knobs of a whole printed layout, whose non-knob fields must match the workload's."""
    return workload.knobs_of(build(EffectiveConfig, {k: v for k, v in data.items() if k in _LAYOUT_FIELDS}, file=file),
                             file=file)


def _from_workload_file(path: str, workload: Workload) -> TrialConfig:
    """The knobs of the layout a workload file (a trial's `trials/<id>.yaml`) sets, for the same model."""
    other = load_workload(path)
    if other.model.model_dump(exclude={"name", "source"}) != workload.model.model_dump(exclude={"name", "source"}):
        raise InputError("its model differs from the workload's: a trial file of another run", file=path)
    return workload.knobs_of(other.effective(), file=path)


def trial_from_args(config: str | None, sets: list[str] | None, workload: Workload) -> TrialConfig:
    """A TrialConfig from the CLI's --config and --set (the latter win)."""
    data = _config_mapping(config) if config else {}
    data.pop("key", None)  # a printed layout's cached key
    file = "--set" if sets else "--config"
    if config and ("num_layers" in data or "extends" in data):  # a workload file: its layout
        trial = _from_workload_file(config.removeprefix("@"), workload)
        return build(TrialConfig, {**trial.model_dump(exclude_none=True), **_set_pairs(sets or [])}, file=file)
    if set(data) >= _LAYOUT_FIELDS:
        trial = _from_layout(data, workload, "--config")
        return build(TrialConfig, {**trial.model_dump(exclude_none=True), **_set_pairs(sets or [])}, file=file)
    data.update(_set_pairs(sets or []))
    return build(TrialConfig, data, file=file)


def within_bounds(trial: TrialConfig, workload: Workload, world_size: int, flag: str) -> TrialConfig:
    """`trial` when each knob is one a layout of `workload` on `world_size` GPUs can have (`oracle.knob_bounds`);
    else InputError naming `flag` and the knob, before any work."""
    try:
        check_knob_bounds(workload, world_size, trial)
    except InputError as exc:
        raise exc.within(flag) from None
    return trial
