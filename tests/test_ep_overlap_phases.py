"""EP overlap as megatron-core's combined 1F1B runs a layer pair on two streams.

megatron-core models/common/model_chunk_schedule_plan.py `TransformerLayerSchedulePlan.run` (@ d98e8a64dd)
launches, per layer pair, attention forward, MLP backward, MLP wgrad, MLP forward, attention backward and
wgrad on the compute stream and combine-backward, dispatch-forward, dispatch-backward, combine-forward on
the communication stream; each micro-batch's nodes wait on and record one shared CUDA event
(pipeline_parallel/utils.py `ScheduleNode.stream_acquire_context`), so they run one after another; the
wgrad nodes do not touch the event. The periods below are derived by hand from those rules."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from paratune.oracle.catalog import gpu
from paratune.oracle.performance.calibration import constants
from paratune.oracle.performance.layers import _ep_overlap, _pair_period
from paratune.oracle.performance.work import ATTN, EP, GEMM, Builder


def test_four_transfers_longer_than_the_compute_serialise_on_the_communication_stream():
    # each transfer 5 ms, the pair's compute 4 ms: the stream carries 4 x 5 = 20 ms per pair
    assert _pair_period((1.0, 1.0, 0.0), (1.0, 1.0, 0.0), 5.0) == pytest.approx(20.0, rel=1e-12)


def test_a_micro_batchs_own_chain_binds_when_neither_stream_is_full():
    # forward chain attention 3 -> dispatch 1 -> MLP 3 -> combine 1 = 8 ms per layer, although the compute
    # stream holds 3 + 0.5 + 3 + 0.5 = 7 ms and the communication stream 4 ms
    assert _pair_period((3.0, 0.5, 0.0), (3.0, 0.5, 0.0), 1.0) == pytest.approx(8.0, rel=1e-12)


def test_short_transfers_hide_entirely_behind_the_compute():
    # compute 4 + 8 + 2 + 6 + 8 + 4 = 32 ms; every chain and the 2 ms of transfers fit inside it
    assert _pair_period((4.0, 8.0, 2.0), (6.0, 8.0, 4.0), 0.5) == pytest.approx(32.0, rel=1e-12)


def test_what_the_period_exceeds_the_compute_by_is_exposed_the_rest_costs_the_overlap():
    c = constants(gpu("h100-sxm"))
    w = Builder()
    w.add(ATTN, 3.0, 0.5, 0.0)
    w.add(GEMM, 3.0, 0.5, 0.0)
    w.add(EP, 2.0, 2.0)  # each pass: dispatch 1 + combine 1
    _ep_overlap(SimpleNamespace(c=c), w, (3.0, 0.5, 0.0))
    # by hand (the chain-bound case above): period 8 - compute 7 = 1 ms exposed, 4 - 1 = 3 ms covered
    total = 1.0 + c.overlap_cost * 3.0
    assert w.f[EP] == pytest.approx(total / 2, rel=1e-12)
    assert w.b[EP] == pytest.approx(total / 2, rel=1e-12)
