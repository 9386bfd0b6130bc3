"""The knob registry (`oracle.specs.knobs`: each `TrialConfig` field declares one knob) and every list of
knobs elsewhere: what is derived from it is derived (KNOB_TO_ARG, NONE_IS_NULL, SPLIT_KNOBS, the stack rules,
the launch writers' arguments, the MCP `config` schema's properties and descriptions); what is written out
elsewhere is checked against it here (`EffectiveConfig`'s knob fields, the `TrainingArgs` field each knob
overrides, `LegalAxes`, the legality codes a knob names, the stacks' vocabulary files, the table in
docs/knobs.md). `test_a_new_knob_is_one_declaration` adds a knob in a dry run: it reaches the derived lists,
and each written-out list that lacks it fails naming exactly that knob.

Expected values come from the sources the registry cites: the legality codes are read from the source of
`oracle/legality.py` and `oracle/pipeline_split.py`, the stacks' names from the vocabulary files built from
Megatron-LM, Primus and Megatron-Bridge (`scripts/build_vocabulary.py`)."""

from __future__ import annotations

import importlib
import json
import re
import types
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
import pytest
from pydantic import create_model

from paratune.oracle.constraints import ACTS_UNDER, search_rules
from paratune.oracle.inputs.cluster_file import load_cluster
from paratune.oracle.inputs.workload_file import load_workload
from paratune.oracle.knob_bounds import PARALLEL_SIZES
from paratune.oracle.layout import DISPATCH_KNOBS
from paratune.oracle.legality import LegalAxes
from paratune.oracle.specs import EffectiveConfig, TrainingArgs, TrialConfig
from paratune.oracle.specs.knobs import (
    ARG_FILES,
    KNOB_SPECS,
    KNOB_TO_ARG,
    KNOBS,
    NONE_IS_NULL,
    SPLIT_KNOBS,
    Knob,
    knobs_of,
)
from paratune.planner.launch.megatron_lm import layout_flags
from paratune.planner.search import space
from paratune.planner.search.explanation import UNITS
from paratune.planner.search.pick import EXOTIC
from paratune.server.descriptions import INSTRUCTIONS, KNOB_GROUPS

from .conftest import ROOT
from .test_server_common import in_process, portal_client, small_inputs

ORACLE = ROOT / "oracle"
VOCABULARY = ORACLE / "inputs" / "vocabulary"
DOCS = ROOT / "docs" / "knobs.md"
TABLE_START = "<!-- knob table: generated from oracle/specs/knobs.py, checked by tests/test_knob_registry.py -->"
TABLE_END = "<!-- end of knob table -->"
# Legality codes no search knob takes part in: they read only the workload's own settings.
WORKLOAD_CODES = {"optimizer_dtypes", "recompute_layer_ids_range"}
# The names a code's f-string fills in (oracle/legality.py: `tp_{name}` over the sizes TP must divide,
# `{schedule}_needs_pp` / `{schedule}_recompute` over the zero-bubble schedules).
PLACEHOLDERS = {"name": "num_attention_heads|num_query_groups|hidden_size|ffn_hidden_size", "schedule": "zb|zbv"}


def legality_codes() -> list[str]:
    """Every violation code `oracle.legality` and `oracle.pipeline_split` can emit, as regular expressions (an
    f-string's `{...}` matches the names it is filled with, `PLACEHOLDERS`), read from their source."""
    text = (ORACLE / "legality.py").read_text(encoding="utf-8") + (ORACLE / "pipeline_split.py").read_text(
        encoding="utf-8")
    codes = re.findall(r'(?:_violation|SplitError)\(\s*f?"([a-z0-9_{}.\[\]\']+)"', text)
    return sorted({re.sub(r"\{([^}]*)\}", lambda m: f"({PLACEHOLDERS[m.group(1)]})", c) for c in codes})


def _words(path: Path) -> set[str]:
    return {line.strip() for line in path.read_text(encoding="utf-8").splitlines() if not line.startswith("#")}


def values_text(annotation: Any) -> str:
    """A knob's values as docs/knobs.md writes them, read from its type."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        return " / ".join(values_text(a) for a in args if a is not type(None))
    if origin is Literal:
        return " / ".join(map(str, args))
    if origin is Annotated:
        bounds = [f"≥{m.ge}" if isinstance(m, annotated_types.Ge) else f"≥{m.gt + 1}" for m in args[1:]
                  if isinstance(m, (annotated_types.Ge, annotated_types.Gt))]
        return " ".join(["integer", *bounds])
    if origin is tuple:
        return f"list of {values_text(args[0])}"
    return {bool: "true/false", str: "string", int: "integer"}[annotation]


def knob_rows(model: type = TrialConfig) -> list[str]:
    """docs/knobs.md's table, one row per knob of `model`."""
    rows = ["| knob | values | what it sets | Megatron-LM | Primus | Megatron-Bridge | GPUs |",
            "|---|---|---|---|---|---|---|"]
    for k in knobs_of(model):
        args = [f"`{a}`" if a else "—" for a in (k.megatron_lm, k.primus, k.bridge)]
        vendors = ", ".join(v.upper() if v == "amd" else "NVIDIA" for v in sorted(k.vendors, reverse=True))
        rows.append(f"| `{k.name}` | {values_text(model.model_fields[k.name].annotation)} | {k.doc} | "
                    f"{' | '.join(args)} | {vendors} |")
    return rows


def table_block() -> str:
    """docs/knobs.md's whole generated block: the table, then where each stack's names come from."""
    sources = [f"* {name}: {ARG_FILES[stack]}" for stack, name in
               (("megatron-lm", "Megatron-LM"), ("primus", "Primus"), ("megatron-bridge", "Megatron-Bridge"))]
    return "\n".join([*knob_rows(), "", "Where the argument names come from:", "", *sources])


def docs_block() -> str:
    """The generated block as docs/knobs.md has it."""
    text = DOCS.read_text(encoding="utf-8")
    return text[text.index(TABLE_START) + len(TABLE_START):text.index(TABLE_END)].strip()


def docs_rows() -> list[str]:
    return [line for line in docs_block().splitlines() if line.startswith("| `")]  # one per knob


def literals(annotation: Any) -> set | None:
    """The values a type's `Literal`s allow (through unions and optionals), None when it has none."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return set(args)
    if origin in (Union, types.UnionType):
        found = [v for v in map(literals, args) if v is not None]
        return set().union(*found) if found else None
    return None


def _resolves(reference: str) -> bool:
    """Whether `oracle.a.b.name` names a module of paratune, or an attribute of one."""
    parts = reference.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module("paratune." + ".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def problems(model: type = TrialConfig) -> list[str]:
    """Each place that writes knobs out and disagrees with `model`'s registry, as "knob: what differs"."""
    knobs = knobs_of(model)
    out = []
    effective = list(EffectiveConfig.model_fields)
    for i, k in enumerate(knobs):
        if k.name not in effective:
            out.append(f"{k.name}: not an EffectiveConfig field")
        elif effective.index(k.name) != i:
            out.append(f"{k.name}: EffectiveConfig field {effective.index(k.name)}, registry position {i}")
        elif (mine := literals(model.model_fields[k.name].annotation)) is not None and (
                resolved := literals(EffectiveConfig.model_fields[k.name].annotation)) is not None and (
                mine - ({"none"} if k.none_is_null else set()) != resolved):
            out.append(f"{k.name}: values {sorted(mine)}, EffectiveConfig's {sorted(resolved)}")
        if k.dest not in TrainingArgs.model_fields:
            out.append(f"{k.name}: dest {k.dest} is not a TrainingArgs field")
    axes = set(LegalAxes.model_fields) - {"world_size"}
    out += [f"{k.name}: axis, but no LegalAxes field" for k in knobs if k.axis and k.name not in axes]
    out += [f"{name}: a LegalAxes field, but not an axis knob" for name in sorted(axes)
            if not (name in {k.name for k in knobs} and next(k for k in knobs if k.name == name).axis)]
    codes = legality_codes()
    out += [f"{k.name}: rule {code} is no legality code" for k in knobs for code in k.rules
            if not any(re.fullmatch(c, code) for c in codes)]
    claimed = {code for k in knobs for code in k.rules} | WORKLOAD_CODES
    out += [f"legality code {c} is named by no knob" for c in codes if not any(re.fullmatch(c, x) for x in claimed)]
    out += [f"{k.name}: its effect cites {ref}, which is no module or name of paratune" for k in knobs
            for ref in re.findall(r"oracle(?:\.\w+)+", k.time + " " + k.memory) if not _resolves(ref)]
    flags = json.loads((VOCABULARY / "megatron_lm_flags.json").read_text(encoding="utf-8"))["flags"]
    primus, bridge = _words(VOCABULARY / "primus.txt"), _words(VOCABULARY / "megatron_bridge.txt")
    for k in knobs:
        for arg, names, stack in ((k.megatron_lm, flags, "Megatron-LM"), (k.primus, primus, "Primus"),
                                  (k.bridge, bridge, "Megatron-Bridge")):
            if arg is not None and arg not in names:
                out.append(f"{k.name}: {arg} is not a {stack} argument")
    documented = docs_rows()
    for row in knob_rows(model)[2:]:
        if row not in documented:
            out.append(f"{row.split('`')[1]}: docs/knobs.md lacks its row {row}")
    named = {k.name for k in knobs}
    out += [f"{row.split('`')[1]}: a docs/knobs.md row, but no knob" for row in documented
            if row.split("`")[1] not in named]
    return out


def test_the_written_out_knob_lists_agree_with_the_registry():
    found = problems()
    assert found == [], "\n".join(found + ["docs/knobs.md's table from the registry:", table_block()])
    assert docs_block() == table_block()


def test_the_search_and_bounds_name_only_registry_knobs():
    """The knob names the search (its dispatch options among them), the constraints, the bounds, the
    explanation's units and the pick's list of stack-specific knobs write out are registry knobs."""
    names = set(KNOB_SPECS)
    options = DISPATCH_KNOBS.values()
    written = (set(space.NATIVE_CONSTRAINTS) | {k for o in options for k in o} | set(PARALLEL_SIZES)
               | set(ACTS_UNDER) | {parent for parent, _ in ACTS_UNDER.values()} | set(EXOTIC)
               | {k for unit in UNITS for k in unit})
    assert written - names == set()


def test_the_derived_lists_are_the_registry():
    assert [k.name for k in KNOBS] == list(TrialConfig.model_fields)
    assert KNOB_TO_ARG["sync_free_stage"] == "turbo_sync_free_moe_stage" and len(KNOB_TO_ARG) == len(KNOBS)
    assert {"recompute_granularity", "fp8", "pp_layout"} == NONE_IS_NULL  # "none" is off, None in EffectiveConfig
    assert SPLIT_KNOBS == ("pp_layout", "pp_first_layers", "pp_last_layers", "pp_embedding_in_split",
                           "pp_loss_in_split")
    # "none"/false is the explicit off where the off value is null, through the Knob's validator
    assert TrialConfig(fp8=False, pp_layout="none").overrides() == {"fp8": None, "pipeline_model_parallel_layout": None}


def test_the_mcp_knob_list_is_the_registry(tmp_path):
    """The `config` schema `tools/list` publishes (once, in evaluate_memory_only) has exactly the registry's
    knobs, each described by its one line."""
    with in_process(tmp_path) as (server, _), portal_client(server) as (portal, client):
        listed = {t.name: t.input_schema for t in portal.call(client.list_tools).tools}
    schema = listed["evaluate_memory_only"]
    config = schema["$defs"]["TrialConfig"]
    assert list(config["properties"]) == [k.name for k in KNOBS]
    assert {name: p.get("description") for name, p in config["properties"].items()} == {
        k.name: k.doc for k in KNOBS}


def test_a_new_knob_is_one_declaration(monkeypatch, tmp_path):
    """A dry run of the registry: one field with its Knob. The derived lists take it up (its Megatron name in
    a trial's overrides, its MCP description, a stack rule where the stack lacks it, its flag in the
    Megatron-LM launch once the layout has the field); each written-out list that lacks it fails, and every
    failure names that knob."""
    new = Knob("a knob added by this test", "new_training_arg", "--new-flag", None, None, "test", "test",
               rules=("fp8_gpu",), off=False, vendors=frozenset({"nvidia"}))
    extended = create_model("Extended", __base__=TrialConfig, new_knob=(Annotated[bool | None, new], None))
    assert [k.name for k in knobs_of(extended)] == [*TrialConfig.model_fields, "new_knob"]
    assert extended(new_knob=True, tp=2).overrides() == {"new_training_arg": True, "tensor_model_parallel_size": 2}
    assert extended.model_json_schema()["properties"]["new_knob"]["description"] == "a knob added by this test"
    monkeypatch.setitem(KNOB_SPECS, "new_knob", knobs_of(extended)[-1])
    workload, cluster = (load(path) for load, path in zip((load_workload, load_cluster), small_inputs(tmp_path)))
    assert cluster.stack == "primus"  # the small run's MI300X cluster: a stack without the new knob
    assert [(r.knob, r.values, r.code) for r in search_rules(workload, cluster) if r.knob == "new_knob"] == [
        ("new_knob", frozenset({False}), "stack_knob")]
    layout = create_model("ExtendedLayout", __base__=EffectiveConfig, new_knob=(bool, False))
    cfg = layout(**workload.effective().model_dump(), new_knob=True)
    assert "--new-flag" in layout_flags(cfg, workload, "nvidia")[0]
    with pytest.raises(AttributeError, match="new_knob"):  # EffectiveConfig itself lacks it (problems says so)
        layout_flags(workload.effective(), workload, "nvidia")
    found = problems(extended)
    assert found and all(p.startswith("new_knob: ") for p in found), found
    assert "new_knob: not an EffectiveConfig field" in found
    assert "new_knob: dest new_training_arg is not a TrainingArgs field" in found
    assert "new_knob: --new-flag is not a Megatron-LM argument" in found
    assert any(p.startswith("new_knob: docs/knobs.md lacks its row") for p in found)


def test_the_mcp_instructions_name_a_group_for_every_searched_knob():
    """The server's instructions list KNOB_GROUPS' names; each group names registry knobs, no knob is in two,
    and every knob the search enumerates (`Knob.axis`: a LegalAxes field) is in one, so a new searched knob
    fails here until the instructions name it."""
    grouped = [k for knobs in KNOB_GROUPS.values() for k in knobs]
    assert set(grouped) - set(KNOB_SPECS) == set()
    assert len(grouped) == len(set(grouped))
    assert {k.name for k in KNOBS if k.axis} - set(grouped) == set()
    assert f"({', '.join(KNOB_GROUPS)})" in " ".join(INSTRUCTIONS.split())
