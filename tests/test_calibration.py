"""calibration.yaml keeps fitted values apart from held ones, and calibration/fit.py writes it back as
it reads it (nothing is fitted here: the fit itself takes minutes)."""

from __future__ import annotations

from dataclasses import fields

import yaml

from paratune.calibration import fit
from paratune.calibration.rows import load_rows
from paratune.oracle.performance.calibration import (
    CALIBRATION_FILE,
    FITTED,
    SHARED,
    Constants,
    constants_for,
    families,
)


def _data() -> dict:
    return yaml.safe_load(CALIBRATION_FILE.read_text(encoding="utf-8"))


def test_fitted_and_held_split_every_constant_once():
    data = _data()
    fitted, held = data["fitted"], data["held"]
    for fam, values in fitted["families"].items():
        held_here = held["families"].get(fam, {})
        assert set(values) == set(fit.fitted_names(fam)), fam  # exactly what the fit's groups fit
        assert not set(values) & set(held_here), fam
        assert set(values) | set(held_here) == set(FITTED), fam
    names = {f.name for f in fields(Constants)}
    assert set(held["priors"]) == names - set(FITTED) - set(SHARED)
    assert set(fitted["every_family"]) == set(SHARED)  # fitted once for every family (fit.fit_shared)
    assert set(held["copied"]) == set(fit.COPIES)
    assert set(fitted["families"]) | set(held["copied"]) == set(families())


def test_copied_family_takes_its_source_constants():
    for fam, src in fit.COPIES.items():
        assert constants_for(fam) == constants_for(src)


def test_every_held_value_says_why():
    data = _data()
    assert set(data["held"]["priors"]) <= set(fit.PRIOR_NOTES)
    assert {k for v in data["held"]["families"].values() for k in v} <= set(fit.HELD_NOTES)


def test_writer_reproduces_the_committed_file():
    text = CALIBRATION_FILE.read_text(encoding="utf-8")
    assert fit._dump(yaml.safe_load(text), load_rows()) == text


def test_memory_rows_read_their_facts_from_columns():
    """The attention kernel and the model are columns of memory_observed.csv, not ID or name patterns."""
    import csv

    from paratune.calibration.memory_rows import MEMORY_FILE, load_memory_rows
    from paratune.oracle.catalog import model_names

    with MEMORY_FILE.open(newline="", encoding="utf-8") as fh:
        table = {d["id"]: d for d in csv.DictReader(fh)}
    for row in load_memory_rows():
        d = table[row.id]
        assert d["model"] in model_names() and row.model == d["model"]
        args = dict(row.args)
        assert args.get("use_flash_attn", "unset") == {"true": True, "false": False, "": "unset"}[d["use_flash_attn"]]
    assert {i for i, d in table.items() if d["use_flash_attn"] == "false"} == {"KOR-22B-NONE", "KOR-175B-SEL"}
