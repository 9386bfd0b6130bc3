"""Turn `--config JSON` and `--set key=value` into one validated TrialConfig."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from oracle.errors import InputError
from oracle.inputs.yaml_io import build, read_mapping
from oracle.specs import TrialConfig


def _config_mapping(text: str) -> dict:
    """`--config` is inline JSON or the path of a JSON/YAML file holding one mapping."""
    if Path(text).is_file():
        return read_mapping(text)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc.msg} at column {exc.colno}) and not a file", file="--config") from None
    if not isinstance(data, dict):
        raise InputError("must be a JSON object of TrialConfig knobs", file="--config")
    return data


def _set_pairs(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InputError(f"expected key=value, got {pair!r}", file="--set")
        out[key.strip()] = yaml.safe_load(value) if value.strip() else None
    return out


def trial_from_args(config: str | None, sets: list[str] | None) -> TrialConfig:
    """A TrialConfig from the CLI's --config and --set (the latter win)."""
    data = _config_mapping(config) if config else {}
    data.update(_set_pairs(sets or []))
    return build(TrialConfig, data, file="--set" if sets else "--config")
