"""Exact integers and booleans in a tool call's arguments, read against the tool's published input schema.

Pydantic's lax mode takes `true` and `2.0` as the integer 1 and 2, `" 2 "` as 2, and `"1"`, `"yes"` or `1`
as true: a model that sends a wrong type gets a silently different call. Here an integer is a JSON integer
or a string of exactly its digits ("2", which small models send), a boolean is `true`/`false` or exactly
"true"/"false", and anything else at such a place is refused naming its key. Integers beyond what SQLite
and the oracle hold (|n| > 2^63 - 1) are refused too. A JSON object sent as a string where the schema wants
an object (another small-model habit) is read as that object, so its members are checked as well.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

from paratune.oracle.errors import InputError, clip

LARGEST = 2**63 - 1  # SQLite's INTEGER, and more than any count or id here
_DIGITS = re.compile(r"-?[0-9]+")
_WORDS = {"true": True, "false": False}


def exact_arguments(arguments: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """`arguments` with exactly encoded integers and booleans decoded, checked against `schema` (an MCP tool's
    inputSchema); InputError naming the key of the first inexact one. Keys the schema does not list are left
    for the argument model to refuse."""
    return _exact(arguments, schema, schema.get("$defs", {}), "")


def _resolved(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref", "")
    return defs.get(ref.rsplit("/", 1)[-1], {}) if ref.startswith("#/$defs/") else schema


def _branches(schema: dict[str, Any], defs: dict[str, Any]) -> list[dict[str, Any]]:
    """The alternatives a value may match (one, unless the schema is an anyOf/oneOf), `$ref`s resolved."""
    schema = _resolved(schema, defs)
    alternatives = schema.get("anyOf") or schema.get("oneOf")
    return [_resolved(s, defs) for s in alternatives] if alternatives else [schema]


_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}


def _types(branches: list[dict[str, Any]]) -> set[str]:
    """The JSON types the alternatives admit: their `type`s (a name or a list of names), or those of an enum's
    values (the compact schemas write an optional enum as its values and null, `server/schemas.py`)."""
    types: set[str] = set()
    for b in branches:
        declared = b.get("type")
        if isinstance(declared, list):
            types |= set(declared)
        elif declared is not None:
            types.add(declared)
        else:
            types |= {_JSON_TYPES[type(v)] for v in b.get("enum", ()) if type(v) in _JSON_TYPES}
    return types


class _Shape(NamedTuple):
    """What `_exact` reads of one schema node: the JSON types its alternatives admit, the properties of its
    object alternative and the items of its array alternative."""

    types: set[str]
    properties: dict[str, Any]
    items: dict[str, Any] | None


_SHAPES: dict[tuple[int, int], tuple[dict[str, Any], dict[str, Any], _Shape]] = {}
_SHAPES_SIZE = 4096


def _shape(schema: dict[str, Any], defs: dict[str, Any]) -> _Shape:
    """The shape of a node of a tool's schema, worked out once per (node, $defs) object: a tool's schema is
    fixed when the server starts and every call walks it."""
    hit = _SHAPES.get((id(schema), id(defs)))
    if hit is not None:
        return hit[2]
    branches = _branches(schema, defs)
    shape = _Shape(_types(branches), next((b["properties"] for b in branches if "properties" in b), {}),
                   next((b.get("items", {}) for b in branches if "array" in _types([b])), None))
    if len(_SHAPES) >= _SHAPES_SIZE:
        _SHAPES.clear()
    _SHAPES[(id(schema), id(defs))] = (schema, defs, shape)  # holding both keeps their ids from being reused
    return shape


def _exact(value: Any, schema: dict[str, Any], defs: dict[str, Any], key: str) -> Any:
    types, properties, items = _shape(schema, defs)
    if value is None and "null" in types:
        return value
    if "object" in types and isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            raise InputError("a string here must be a JSON object", key=key or None) from None
    if isinstance(value, dict):
        return {k: _exact(v, properties[k], defs, f"{key}.{k}" if key else k) if k in properties else v
                for k, v in value.items()}
    if isinstance(value, list):
        return value if items is None else [_exact(v, items, defs, f"{key}[{i}]") for i, v in enumerate(value)]
    if "integer" in types and "number" not in types:
        return _integer(value, key)
    if "boolean" in types:
        return _boolean(value, key)
    return value


def _integer(value: Any, key: str) -> Any:
    if isinstance(value, bool):
        raise InputError(f"expected an integer, got {str(value).lower()}", key=key)
    if isinstance(value, int):
        if abs(value) > LARGEST:
            raise InputError(f"a {value.bit_length()}-bit integer, larger than any value here (2^63 - 1)", key=key)
        return value
    if isinstance(value, float):
        raise InputError(f"expected an integer, got the number {clip(repr(value))}", key=key)
    if isinstance(value, str):
        if _DIGITS.fullmatch(value) is None:
            raise InputError(f"expected an integer (or a string of just its digits), got {clip(repr(value))}",
                             key=key)
        if len(value) > len(str(LARGEST)) + 1:
            raise InputError(f"{len(value):,} digits, larger than any value here (2^63 - 1)", key=key)
        return _integer(int(value), key)
    return value  # a list or object: the argument model names the type it wanted


def _boolean(value: Any, key: str) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value in _WORDS:
        return _WORDS[value]
    if isinstance(value, int | float | str):
        raise InputError(f"expected true or false, got {clip(repr(value))}", key=key)
    return value
