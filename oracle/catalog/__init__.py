"""Built-in catalogs of model cards and GPUs, shipped as YAML data files beside this module."""

from __future__ import annotations

import difflib
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


def _gpus() -> dict[str, dict[str, Any]]:
    return {k: v for k, v in _load("gpus.yaml").items() if k != "aliases"}


def gpu_names() -> list[str]:
    return sorted(_gpus())


def gpu_aliases() -> dict[str, str]:
    """Names people type -> catalog GPU."""
    return dict(_load("gpus.yaml").get("aliases", {}))


def aliases_of() -> dict[str, list[str]]:
    """Catalog GPU -> the other names accepted for it."""
    out: dict[str, list[str]] = {}
    for alias, name in sorted(gpu_aliases().items()):
        out.setdefault(name, []).append(alias)
    return out


def gpu_name(text: str) -> str | None:
    """The catalog GPU a user's name means (case-insensitive, '_' / ' ' as '-', aliases), or None."""
    key = text.strip().lower().replace("_", "-").replace(" ", "-")
    if key in _gpus():
        return key
    return gpu_aliases().get(key)


def model_card(name: str, *, file: str | None = None, key: str = "extends") -> dict[str, Any]:
    """The raw card of a catalog model (Megatron argument names, plus `name` and `source`)."""
    cards = _load("models.yaml")
    if name not in cards:
        raise InputError(f"unknown model '{name}'; known models: {', '.join(model_names())}", file=file, key=key)
    return {"name": name, **cards[name]}


def gpu_card(name: str) -> dict[str, Any]:
    """The raw catalog entry of a GPU, by any name `gpu_name` accepts (KeyError when unknown)."""
    canonical = gpu_name(name)
    if canonical is None:
        raise KeyError(name)
    return {"name": canonical, **_gpus()[canonical]}


def gpu(name: str, *, file: str | None = None, key: str = "target_cluster.gpu_arch") -> GPUSpec:
    """A catalog GPU as a spec; an unknown name gets the closest catalog names and the way out."""
    if gpu_name(name) is None:
        close = difflib.get_close_matches(name.strip().lower(), gpu_names() + list(gpu_aliases()), n=3, cutoff=0.4)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise InputError(f"unknown GPU '{name}'; {hint}known GPUs: {', '.join(gpu_names())}; or describe it "
                         "with every figure in a hardware: block (docs/inputs.md, Catalogs)", file=file, key=key)
    return GPUSpec(**gpu_card(name))
