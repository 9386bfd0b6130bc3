"""Reading YAML files and turning validation failures into one-line `InputError`s."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from ..errors import InputError, clip
from .read_guard import read_text

# libyaml's parser when PyYAML was built with it (the wheels are): the same safe constructors as yaml.safe_load,
# ~10x faster on the Primus tree's module files (a published experiment reads ~40 of them)
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}")


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML file; a missing or unreadable file or a syntax error names the file (and line, column)."""
    text = read_text(path)
    try:
        return yaml.load(text, Loader=_LOADER)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise InputError(f"malformed YAML at {where}{exc.problem}", file=str(path)) from None
    except yaml.YAMLError as exc:
        raise InputError(f"malformed YAML: {exc}", file=str(path)) from None


def read_mapping(path: str | Path) -> dict[str, Any]:
    """A YAML file whose top level must be a mapping."""
    data = read_yaml(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(f"expected a mapping at the top level, got {type(data).__name__}", file=str(path))
    return data


def resolve_templates(value: Any) -> Any:
    """Replace Primus `${VAR:default}` templates by their defaults, recursively.

    A scalar that is one whole template takes the default's YAML type (`${MBS:2}` -> 2).
    """
    if isinstance(value, dict):
        return {k: resolve_templates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_templates(v) for v in value]
    if not isinstance(value, str) or "${" not in value:
        return value
    whole = _TEMPLATE.fullmatch(value.strip())
    if whole:
        return yaml.safe_load(whole.group(2)) if whole.group(2) else None
    return _TEMPLATE.sub(lambda m: m.group(2) or "", value)


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """`override` on top of `base`; nested mappings merge, everything else replaces."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def unknown_key_error(key: str, known: list[str], file: str | None) -> InputError:
    """An 'unknown key' error with the nearest known spelling, if any."""
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return InputError(f"unknown key{hint}", file=file, key=key)


def _field_path(model: type[BaseModel], loc: tuple) -> tuple[list[str], type[BaseModel]]:
    """The part of a pydantic error location that names fields (dropping union/type tags), and the
    model that holds the last one."""
    path: list[str] = []
    current: type[BaseModel] | None = model
    holder = model
    for part in loc:
        if current is None or not isinstance(part, str) or part not in current.model_fields:
            break
        path.append(part)
        holder = current
        annotation = current.model_fields[part].annotation
        options = get_args(annotation) if get_origin(annotation) in (Union, UnionType) else (annotation,)
        models = [a for a in options if isinstance(a, type) and issubclass(a, BaseModel)]
        current = models[0] if len(models) == 1 else None  # a model, or an optional one (Model | None)
    if current is not None and len(loc) > len(path) and isinstance(loc[len(path)], str):
        path.append(loc[len(path)])  # an unknown key inside a nested mapping
        holder = current
    return path, holder


def build(model: type[BaseModel], data: dict[str, Any], *, file: str | None, prefix: str = "") -> Any:
    """Validate `data` as `model`; the first failure becomes an InputError naming file and key."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        path, holder = _field_path(model, err["loc"])
        key = prefix + ".".join(path) if path else prefix.rstrip(".") or None
        if err["type"] == "extra_forbidden":
            hint = unknown_key_error(path[-1] if path else "", sorted(holder.model_fields), file).message
            raise InputError(hint, file=file, key=key) from None
        if err["type"] == "missing":
            raise InputError("required key is missing", file=file, key=key) from None
        value = f" (got {clip(repr(err['input']))})" if "input" in err and not isinstance(err["input"], dict) else ""
        msg = err["msg"][0].lower() + err["msg"][1:]
        raise InputError(f"{msg}{value}", file=file, key=key) from None
