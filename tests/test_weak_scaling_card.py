"""Data-parallel scaling of a MoE recipe against a published weak-scaling run the calibration never saw.

Megatron-Bridge's verification card for Qwen3-30B-A3B (examples/model_verification_cards/qwen3-30b-a3b/card.yaml
@ 067f987df0, `pretrain_weak_scaling.GB300`, verified 2026-08-15 at bridge_commit fbb7570cf7) ran the 8-GPU
GB300 MXFP8 performance recipe (TP 1, PP 1, CP 1, EP 8, ETP 1, MBS 8, seq 4096) on 8, 32, 128 and 256 GPUs with
GBS 64 per GPU and printed tokens/s/GPU per point (below, as printed). Only the 8-GPU performance-summary run
of that recipe (MB26.08-Q3-30B-GB300-MXFP8, 44,544 tokens/s/GPU) is a calibration row; the 32- to 256-GPU
points add data-parallel ranks across NVL72 domains, whose gradient reduce-scatter and parameter all-gather the
oracle must hide as Megatron does. Each point is projected at that row's layout with the card's GPU count and
GBS, and must land within the error the product states for it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from paratune.calibration.rows import load_rows, project, setup
from paratune.oracle.performance.uncertainty import uncertainty

ROW = "MB26.08-Q3-30B-GB300-MXFP8"
CARD = {8: 44511.004, 32: 45086.158, 128: 44951.404, 256: 45052.607}  # GPUs -> tokens/s/GPU, as printed


@pytest.fixture(scope="module")
def projections() -> dict[int, float]:
    row = next(r for r in load_rows() if r.id == ROW)
    assert (row.tp, row.pp, row.cp, row.ep, row.mbs, row.gbs, row.gpus) == (1, 1, 1, 8, 8, 512, 8)
    out = {}
    for gpus in CARD:
        p = project(replace(row, gpus=gpus, gbs=64 * gpus, measured=CARD[gpus]))
        assert p is not None, gpus
        out[gpus] = p.estimate.tokens_per_s_per_gpu
    return out


def test_each_weak_scaling_point_is_within_the_stated_error(projections):
    s = setup(next(r for r in load_rows() if r.id == ROW))
    error = uncertainty(s.model, s.cluster.gpu).mape  # the error every result of this model and GPU states
    for gpus, measured in CARD.items():
        assert abs(projections[gpus] / measured - 1.0) <= error, (gpus, projections[gpus], measured, error)


def test_the_projection_scales_as_the_card_measured(projections):
    """Measured, 256 GPUs run at 1.012x the 8-GPU rate per GPU (45,052.6 / 44,511.0): the exchange stays inside
    each EP-8 group and the DP traffic hides behind the backward. The projection's 256-over-8 ratio must be
    within 3 % of that."""
    measured = CARD[256] / CARD[8]
    assert projections[256] / projections[8] == pytest.approx(measured, rel=0.03)
