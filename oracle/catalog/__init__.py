"""Built-in catalogs of model cards and GPUs, shipped as YAML data files beside this module."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

from ..errors import InputError
from ..specs import GPUSpec

_HERE = Path(__file__).parent


@cache
def _load(name: str) -> dict[str, dict[str, Any]]:
    return yaml.safe_load((_HERE / name).read_text(encoding="utf-8"))


def model_names() -> list[str]:
    return sorted(_load("models.yaml"))


def gpu_names() -> list[str]:
    return sorted(_load("gpus.yaml"))


def model_card(name: str, *, file: str | None = None, key: str = "extends") -> dict[str, Any]:
    """The raw card of a catalog model (Megatron argument names, plus `name` and `source`)."""
    cards = _load("models.yaml")
    if name not in cards:
        raise InputError(f"unknown model '{name}'; known models: {', '.join(model_names())}", file=file, key=key)
    return {"name": name, **cards[name]}


def gpu_card(name: str) -> dict[str, Any]:
    """The raw catalog entry of a GPU (KeyError when unknown)."""
    return {"name": name, **_load("gpus.yaml")[name]}


def gpu(name: str, *, file: str | None = None, key: str = "target_cluster.gpu_arch") -> GPUSpec:
    """A catalog GPU as a spec; unknown names list the known ones."""
    if name not in _load("gpus.yaml"):
        raise InputError(f"unknown GPU '{name}'; known GPUs: {', '.join(gpu_names())}", file=file, key=key)
    return GPUSpec(**gpu_card(name))
