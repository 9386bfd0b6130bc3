"""A MoE pick's claimed gain over a published recipe is no larger than what NVIDIA measured a retuned layout to
gain on the same GPUs. Bounds come from two published measurements in the calibration set, not from the oracle:
Bridge's Qwen3-30B-A3B FP8 recipe on 16 H100s (MB-H22, performance summary 26.04.01: 8,960 tokens/s/GPU) and
the same model on the same 16 H100s as Bridge's verification card measured it after tuning (MBCARD-Q3-30B-H100-BF16,
card.yaml pretrain_performance.H100: 13,011.4 tokens/s/GPU). A claim beyond that measured gain, widened by the
pick's own stated error, is one no published run supports."""

from __future__ import annotations

import json
import subprocess

import pytest

from paratune.calibration.rows import load_rows

from .conftest import EXAMPLES, PARATUNE

RECIPE_ROW, TUNED_ROW = "MB-H22", "MBCARD-Q3-30B-H100-BF16"


@pytest.fixture(scope="module")
def summary(tmp_path_factory) -> dict:
    """The README's Qwen3-30B-A3B tune (whole-space sweep, Bridge launch), run as a user runs it."""
    out = tmp_path_factory.mktemp("q30-pick")
    workload = EXAMPLES / "workloads" / "qwen3-30b-a3b-h100-recipe.yaml"
    cluster = EXAMPLES / "clusters" / "h100-2n.yaml"
    done = subprocess.run([PARATUNE, "tune", "--workload", str(workload), "--target-cluster", str(cluster), "--sweep",
                           "--stack", "megatron-bridge", "--out-dir", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads((out / "summary.json").read_text(encoding="utf-8"))


def test_the_example_is_the_published_recipe_and_cluster(summary):
    """The bound applies only if the example's own layout is the measured recipe's: same GPUs, TP, EP, MBS, GBS."""
    recipe = {r.id: r for r in load_rows()}[RECIPE_ROW]
    cfg = summary["baseline"]["config"]
    assert (cfg["tp"], cfg["pp"], cfg["ep"], cfg["mbs"], cfg["gbs"]) == (
        recipe.tp, recipe.pp, recipe.ep, recipe.mbs, recipe.gbs)
    assert summary["baseline"]["derived_dp"] * cfg["tp"] * cfg["pp"] * cfg["cp"] == recipe.gpus


def test_claimed_gain_within_the_measured_gain_of_nvidias_retuned_layout(summary):
    """claim = pick projected / recipe projected (what `tune` prints as the gain); bound = measured tuned / measured
    recipe x (1 + the pick's stated error)."""
    rows = {r.id: r for r in load_rows()}
    recipe, tuned = rows[RECIPE_ROW], rows[TUNED_ROW]
    assert (tuned.model, tuned.gpu, tuned.gpus, tuned.gbs) == (recipe.model, recipe.gpu, recipe.gpus, recipe.gbs)
    claim = summary["winner"]["tokens_per_s_per_gpu"] / summary["baseline"]["tokens_per_s_per_gpu"]
    measured = tuned.measured / recipe.measured
    assert summary["winner_trial_id"] == summary["pick"]["trial_id"]
    assert 1.0 <= claim <= measured * (1 + summary["pick"]["error"]), (claim, measured)
