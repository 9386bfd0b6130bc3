"""calibration.yaml keeps fitted values apart from held ones, and calibration/fit.py writes it back as
it reads it (nothing is fitted here: the fit itself takes minutes)."""

from __future__ import annotations

from dataclasses import fields

import pytest
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
        # grace_launch_us, where no group fits it, is derived from launch_us (calibration.GRACE_OVER_X86_LAUNCH)
        derived = {"grace_launch_us"} - set(values)
        assert not derived & set(held_here), fam
        assert set(values) | set(held_here) | derived == set(FITTED) | (set(values) & set(SHARED)), fam
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
    for fam, values in data["held"]["families"].items():
        published = set(fit.PUBLISHED.get(fam, ("", {}))[1])
        assert set(values) - published <= set(fit.HELD_NOTES), fam


def test_blackwell_ultra_gemm_efficiencies_reproduce_transformer_engines_b300_benchmark():
    """TransformerEngine's GEMM profiling guide (docs/examples/gemm_profiling/gemm_profiling.rst @ 1609c890ee)
    times the twelve GEMMs of one layer of a 5B model on a B300 with pre-quantized inputs: 13.102 ms in BF16,
    6.812 ms in per-tensor FP8 (current scaling), 7.161 ms in MXFP8 (M = 31 x 512; Fprop QKV 15872x4096x12288,
    attention out 15872x4096x4096, MLP up 15872x4096x16384, MLP down 15872x16384x4096, as M x K x N; Dgrad swaps
    K and N, Wgrad puts M on K). The Blackwell Ultra constants the fit holds give all three totals through the
    GEMM roofline."""
    from paratune.oracle.catalog import gpu
    from paratune.oracle.performance.gemm import RooflineGemm

    m, h, f, qkv = 15872, 4096, 16384, 12288
    fprop = [(m, h, qkv), (m, h, h), (m, h, f), (m, f, h)]
    shapes = fprop + [(mm, n, k) for mm, k, n in fprop] + [(k, mm, n) for mm, k, n in fprop]
    roofline = RooflineGemm(gpu("b300"), constants_for("blackwell-ultra"))
    for dtype, published in (("bf16", 13.102), ("fp8", 6.812), ("mxfp8", 7.161)):
        assert sum(roofline.gemm_ms(mm, n, k, dtype) for mm, k, n in shapes) == pytest.approx(published, rel=2e-3)
    held = _data()["held"]["families"]
    assert {"gemm_eff", "fp8_gemm_eff"} <= set(held["blackwell-ultra"])  # the fit does not move them
    assert held["blackwell"]["gemm_eff"] == held["blackwell-ultra"]["gemm_eff"]  # B200/GB200 take the B300's BF16


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


def test_each_blackwell_die_fits_its_efficiencies_on_its_own_rows():
    """B300/GB300 (Blackwell Ultra) and B200/GB200 state the same dense BF16/FP8 peaks in the catalog, yet
    the published runs of one model, source and recipe family are 14-28 % faster on GB300 than on GB200
    (moe_throughput.csv, Megatron-Bridge 26.08 summary and Megatron-LM's moe_recipes README): what each die
    reaches of the same peak differs, so each fits its own attention efficiency and Blackwell its MXFP8 GEMMs
    (the rest held at TransformerEngine's published B300 benchmark); the host's launch costs (x86 boards and
    Grace NVL72 racks apart), the TP collectives' exposure and the overlap cost are fitted over both
    (calibration/fit.py GROUPS)."""
    from paratune.oracle.catalog import gpu

    rows = load_rows()
    assert {r.gpu for r in fit.group_rows(rows, "blackwell")} == {"b200", "gb200"}
    assert {r.gpu for r in fit.group_rows(rows, "blackwell-ultra")} == {"b300", "gb300"}
    assert set(fit.group_rows(rows, "blackwell-shared")) == set(
        fit.group_rows(rows, "blackwell") + fit.group_rows(rows, "blackwell-ultra"))
    fam = _data()["fitted"]["families"]
    for shared in ("tp_exposed", "launch_us", "grace_launch_us", "overlap_cost"):
        assert fam["blackwell"][shared] == fam["blackwell-ultra"][shared]
    assert (gpu("gb300").bf16_tflops, gpu("gb300").fp8_tflops) == (gpu("gb200").bf16_tflops, gpu("gb200").fp8_tflops)
    # the same recipe on both: one source and model (the recipe's path differs only in its GPU folder)
    gb200 = {(r.model, r.source): r.measured for r in rows if r.gpu == "gb200"}
    ratios = [r.measured / gb200[(r.model, r.source.replace("/gb300/", "/gb200/"))] for r in rows
              if r.gpu == "gb300" and (r.model, r.source.replace("/gb300/", "/gb200/")) in gb200]
    assert len(ratios) >= 4 and min(ratios) > 1.1, ratios
