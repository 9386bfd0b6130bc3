"""Build a spec from values already known to be valid, skipping validation: the oracle's hot path.

`model_construct` without its per-field alias and default scan: every field must be given.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, TypeVar

from pydantic import BaseModel

ModelT = TypeVar("ModelT", bound=BaseModel)
_set_dict = object.__setattr__
# BaseModel's own instance slots, set through their descriptors (cheaper than a generic setattr).
_set_fields_set, _set_extra, _set_private = (
    BaseModel.__dict__[slot].__set__
    for slot in ("__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")
)
_ALL_SET: dict[type, set[str]] = {}


def trusted(cls: type[ModelT], values: dict[str, Any]) -> ModelT:
    """An instance of `cls` holding exactly `values` (all of its fields, each already valid)."""
    model = cls.__new__(cls)
    _set_dict(model, "__dict__", values)
    # Every field is set, so one set per class serves all instances: pydantic only ever adds to it,
    # and adding a field name it already holds changes nothing.
    fields_set = _ALL_SET.get(cls)
    if fields_set is None:
        fields_set = _ALL_SET[cls] = set(cls.model_fields)
    _set_fields_set(model, fields_set)
    _set_extra(model, None)
    _set_private(model, None)
    return model


def drop_cached(model: ModelT) -> ModelT:
    """`model` without the values its `cached_property`s stored in its `__dict__`: a copy whose fields may
    differ must derive them again (pydantic's `model_copy` copies the whole `__dict__`)."""
    for name, attr in vars(type(model)).items():
        if isinstance(attr, cached_property):
            model.__dict__.pop(name, None)
    return model
