"""The tools' JSON Schemas as `tools/list` publishes them: compact, the layout's knobs stated once, and each
model's whole schema served once as a resource.

An assistant reads every tool's schemas before its first call, so their size is context it cannot use for the
work. pydantic's schemas repeat what neither an assistant nor a client's validator needs (a `title` on every
property that is its name capitalised, `default: null` on every optional field, `anyOf [X, {"type": "null"}]`
for each of them), the layout (TrialConfig, 35 knobs) was in five tools' inputs and the result models
(EvalResult alone in eight tools) in every output: 113.6 KB on the wire (`benchmarks/mcp_tool_list.py`).

- An input schema keeps every property and constraint, written compactly (`compact`): no generated titles, an
  optional argument whose null means absent published without its null (to be omitted), integer bounds
  inclusive, an enum and its off spelling as one enum. The argument models still read a null as absent and
  check every call, and `exact_args` reads these forms.
- The layout is stated in full by the first tool taking it (`stated_once`); the others name it there.
- An output schema is the tool's own result object, field by field, compacted the same way; a nested model is
  an object named in its description (`"EvalResult: the raw projection"`, `output_schema`). Results still
  validate against it, as the MCP client checks on every call (mcp 2.3 `ClientSession.validate_tool_result`).
- Every model's whole schema is in the resource `paratune://schemas` (`SHARED_URI`, `shared`), once.

Definitions cannot be shared between tools on the wire: a `$ref` in an output schema must resolve inside that
schema (mcp 2.3 `ClientSession._output_schema_validator` builds each validator over an empty registry, and an
unresolved reference fails the call), and `tools/list` has no place for common `$defs`. The MCP schema requires
an object root (`type: "object"`) for `outputSchema` through protocol 2025-11-25 (mcp_types `Tool.output_schema`).
"""

from __future__ import annotations

from typing import Any

SHARED_URI = "paratune://schemas"
_DEFS = "#/$defs/"
_NULL = {"type": "null"}


def _plain(branch: dict[str, Any]) -> bool:
    """A branch made only of a type, an enum or a const (an alternative that can join an enum or a type list)."""
    return set(branch) <= {"type", "enum", "const"} and isinstance(branch.get("type", ""), str)


def _joined(branches: list[dict[str, Any]]) -> dict[str, Any] | None:
    """`anyOf` alternatives as one schema when that says the same: enums and consts (and null) as one enum, bare
    types as a type list, one constrained type or enum with null as that schema allowing null; else None."""
    if all(_plain(b) for b in branches):
        valued = [b for b in branches if "enum" in b or "const" in b]
        if valued and all(b in valued or b == _NULL for b in branches):
            values = [v for b in valued for v in b.get("enum", [b.get("const")])]
            return {"enum": values + [None] * (_NULL in branches)}
        if not valued:
            return {"type": [b["type"] for b in branches]}
    if len(branches) == 2 and branches[1] == _NULL and isinstance(branches[0].get("type"), str) \
            and "anyOf" not in branches[0]:
        one = dict(branches[0])
        one["type"] = [one["type"], "null"]
        if "enum" in one:
            one["enum"] = [*one["enum"], None]
        return one
    return None


def _integral(schema: dict[str, Any]) -> dict[str, Any]:
    """An integer's exclusive bounds as inclusive ones (`exclusiveMinimum: 0` is `minimum: 1`), the same set."""
    types = schema.get("type")
    types = types if isinstance(types, list) else [types]
    if "integer" not in types or "number" in types:
        return schema
    out = dict(schema)
    for exclusive, inclusive, step in (("exclusiveMinimum", "minimum", 1), ("exclusiveMaximum", "maximum", -1)):
        bound = out.get(exclusive)
        if isinstance(bound, int) and not isinstance(bound, bool):
            del out[exclusive]
            out[inclusive] = bound + step
    return out


def _omittable(schema: dict[str, Any]) -> dict[str, Any]:
    """An optional argument whose null means absent, without its null: the schema tells the caller to omit it
    (the argument model still reads a null as absent)."""
    out = dict(schema)
    if isinstance(out.get("type"), list) and "null" in out["type"]:
        rest = [t for t in out["type"] if t != "null"]
        out["type"] = rest[0] if len(rest) == 1 else rest
    if None in out.get("enum", ()):
        out["enum"] = [v for v in out["enum"] if v is not None]
    if _NULL in out.get("anyOf", ()):
        rest = [b for b in out.pop("anyOf") if b != _NULL]
        out = {**out, **rest[0]} if len(rest) == 1 else {**out, "anyOf": rest}
    return out


def compact(schema: Any, *, output: bool = False) -> Any:
    """`schema` without generated titles and null defaults, optional and enum alternatives joined (`_joined`),
    integer bounds inclusive (`_integral`). In an input schema (`output` false) an argument or knob whose
    default is null loses its null (`_omittable`); in an output schema every default goes (a result has every
    field). The keys of `properties` and `$defs` are names, kept as they are."""
    if isinstance(schema, list):
        return [compact(s, output=output) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" or (key == "default" and (value is None or output)):
            continue
        if key == "properties" and not output:
            out[key] = {name: _omittable(compact(s)) if "default" in s and s["default"] is None else compact(s)
                        for name, s in value.items()}
        elif key in ("properties", "$defs"):
            out[key] = {name: compact(s, output=output) for name, s in value.items()}
        else:
            out[key] = compact(value, output=output)
    joined = _joined(out["anyOf"]) if "anyOf" in out else None
    if joined is not None:
        del out["anyOf"]
        out |= joined
    return _integral(out)


def _model(schema: dict[str, Any]) -> str | None:
    """The name of the model a `{"$ref": "#/$defs/Name"}` schema points at."""
    ref = schema.get("$ref", "")
    return ref.removeprefix(_DEFS) if ref.startswith(_DEFS) else None


def _named(schema: dict[str, Any]) -> dict[str, Any]:
    """A field's schema with every nested model replaced by an object named for it (its whole schema is the
    shared resource's): a model, an optional one, a list of them or a map to them."""
    shape = {k: v for k, v in schema.items() if k != "description"}
    alternatives = shape.get("anyOf", [])
    named: dict[str, Any]
    if (model := _model(shape)) is not None:
        named = {"type": "object", "description": model}
    elif set(shape) == {"anyOf"} and len(alternatives) == 2 and alternatives[1] == _NULL \
            and (model := _model(alternatives[0])) is not None:
        named = {"type": ["object", "null"], "description": model}
    elif shape.get("type") in ("array", ["array", "null"]) and isinstance(shape.get("items"), dict):
        named = {**shape, "items": _named(shape["items"])}
    elif isinstance(shape.get("additionalProperties"), dict):
        named = {**shape, "additionalProperties": _named(shape["additionalProperties"])}
    else:
        return schema
    note = schema.get("description")
    if note:
        named["description"] = f"{named['description']}: {note}" if "description" in named else note
    return named


def _refs(schema: Any) -> set[str]:
    """The models `schema` refers to (`$ref`s into its `$defs`), outside its own `$defs`."""
    found: set[str] = set()
    if isinstance(schema, dict):
        if (model := _model(schema)) is not None:
            found.add(model)
        for key, value in schema.items():
            if key != "$defs":
                found |= _refs(value)
    elif isinstance(schema, list):
        for value in schema:
            found |= _refs(value)
    return found


def stated_once(inputs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The tools' input schemas (tool name -> compact schema, in list order) with each model that several tools
    take stated in full only by the first of them: in the others an argument of that model is an object whose
    description names where its schema is (`"TrialConfig, as evaluate_memory_only's config: ..."`). The layout
    (TrialConfig) is the one such model: its knobs are stated once, not in each of the five tools taking a
    layout. The argument models still check every call against the whole schema."""
    first: dict[str, tuple[str, str]] = {}  # model -> the tool and argument that state it
    published = {}
    for tool, schema in inputs.items():
        properties = {}
        for argument, s in schema.get("properties", {}).items():
            model = _model(s)
            if model is not None and (where := first.setdefault(model, (tool, argument)))[0] != tool:
                note = f": {s['description']}" if "description" in s else ""
                s = {"type": "object", "description": f"{model}, as {where[0]}'s {where[1]}{note}"}
            properties[argument] = s
        out = {k: v for k, v in schema.items() if k != "$defs"} | {"properties": properties}
        defs = schema.get("$defs", {})
        used = _refs(out)
        while used != (more := used.union(*(_refs(defs[n]) for n in used))):
            used = more
        if used:
            out["$defs"] = {n: d for n, d in defs.items() if n in used}
        published[tool] = out
    return published


def output_schema(full: dict[str, Any]) -> dict[str, Any]:
    """The published output schema of a tool whose whole output schema is `full` (an object root, as the SDK
    derives it): the root's fields, compacted, nested models named (`_named`); no `$defs`, and no description
    (the tool's says what it returns)."""
    root = compact({k: v for k, v in full.items() if k not in ("$defs", "description")}, output=True)
    root["properties"] = {name: _named(s) for name, s in root.get("properties", {}).items()}
    return root


def shared(outputs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One document with every model of the tools' whole output schemas `outputs` (tool name -> schema) once in
    `$defs`, and each tool's result as `tools.<name>` referring to them: what `paratune://schemas` serves."""
    defs: dict[str, Any] = {}
    for tool, full in outputs.items():
        for name, schema in full.get("$defs", {}).items():
            if defs.setdefault(name, schema) != schema:
                raise ValueError(f"two models named {name} in the tools' outputs ({tool}'s differs)")
    return {"$defs": {name: compact(schema, output=True) for name, schema in sorted(defs.items())},
            "tools": {tool: compact({k: v for k, v in full.items() if k != "$defs"}, output=True)
                      for tool, full in outputs.items()}}
