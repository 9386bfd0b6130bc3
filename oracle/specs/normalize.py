"""Spellings users write for "off" ("none", "null", false, "") all mean None."""

from __future__ import annotations

_NONE_WORDS = {"none", "null", "off", "false", ""}


def none_like(value: object) -> object:
    """None for the usual spellings of "off"; the value unchanged otherwise."""
    if value is None or value is False:
        return None
    if isinstance(value, str) and value.strip().lower() in _NONE_WORDS:
        return None
    return value


def parse_modules(value: object) -> object:
    """`recompute_modules` as a sorted tuple: a list, or Megatron's CLI form "core_attn mlp" /
    "[core_attn, mlp]"; None stays None (Megatron's default)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [v for v in value.replace("[", " ").replace("]", " ").replace(",", " ").split() if v]
    if isinstance(value, (list, tuple)):
        return tuple(sorted(set(value)))
    return value
