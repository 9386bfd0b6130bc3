"""Build a spec from values already known to be valid, skipping validation: the oracle's hot path.

`model_construct` without its per-field alias and default scan: every field must be given.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)
_set = object.__setattr__


def trusted(cls: type[M], values: dict[str, Any]) -> M:
    """An instance of `cls` holding exactly `values` (all of its fields, each already valid)."""
    model = cls.__new__(cls)
    _set(model, "__dict__", values)
    _set(model, "__pydantic_fields_set__", set(values))
    _set(model, "__pydantic_extra__", None)
    _set(model, "__pydantic_private__", None)
    return model
