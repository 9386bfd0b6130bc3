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
