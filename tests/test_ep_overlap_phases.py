"""EP overlap hides each exchange behind its own phase of megatron-core's combined 1F1B layer pair.

megatron-core models/common/model_chunk_schedule_plan.py `TransformerLayerSchedulePlan.run` (@ d98e8a64dd):
  comm stream:  combine_bwd       | dispatch_fwd -> dispatch_bwd      | combine_fwd
  comp stream:  pre_dispatch_fwd  | mlp_bwd -> mlp_bwd_dw -> mlp_fwd  | pre_dispatch_bwd
(the attention block's wgrad, `pre_dispatch_computation.backward_dw`, runs after the three phases, beside
the next pair's combine_bwd). The expected numbers below are derived by hand from that diagram."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from paratune.oracle.catalog import gpu
from paratune.oracle.performance.calibration import constants
from paratune.oracle.performance.layers import _ep_overlap
from paratune.oracle.performance.work import ATTN, EP, GEMM, Builder


def _layer() -> Builder:
    """Attention block: forward 1, data-grad 2, wgrad 0.5 ms; MoE MLP: forward 3, data-grad 4, wgrad 1 ms;
    each pass's exchange 6 ms (dispatch 3 + combine 3)."""
    w = Builder()
    w.add(ATTN, 1.0, 2.0, 0.5)
    w.add(GEMM, 3.0, 4.0, 1.0)
    w.add(EP, 6.0, 6.0)
    return w


def test_each_exchange_hides_only_behind_its_own_phase():
    c = constants(gpu("h100-sxm"))
    k = c.overlap_cost
    w = _layer()
    _ep_overlap(SimpleNamespace(c=c), w, (1.0, 2.0, 0.5))
    # by hand: combine_fwd 3 behind pre_dispatch_bwd 2 -> 1 exposed, 2 covered;
    # dispatch_fwd + dispatch_bwd 6 behind mlp_bwd + dw + fwd 8 -> all covered, half of it in each pass;
    # combine_bwd 3 behind pre_dispatch_fwd 1 + the deferred attention wgrad 0.5 -> 1.5 exposed, 1.5 covered
    assert w.f[EP] == pytest.approx(1.0 + k * 2.0 + k * 3.0, rel=1e-12)
    assert w.b[EP] == pytest.approx(1.5 + k * 1.5 + k * 3.0, rel=1e-12)
    # hidden behind the whole other pass instead, the forward's 6 ms behind 7.5 ms of backward compute (all
    # covered) and the backward's 6 behind 4 ms of forward compute (2 exposed) would show 2 + 10k: the
    # phases expose 2.5 + 9.5k, more for any overlap cost below 1
    assert w.f[EP] + w.b[EP] == pytest.approx(2.5 + 9.5 * k, rel=1e-12)
    assert w.f[EP] + w.b[EP] > 2.0 + 10.0 * k


def test_an_exchange_shorter_than_every_phase_costs_only_the_overlap():
    c = constants(gpu("h100-sxm"))
    w = Builder()
    w.add(ATTN, 4.0, 8.0, 2.0)
    w.add(GEMM, 6.0, 8.0, 4.0)
    w.add(EP, 2.0, 2.0)
    _ep_overlap(SimpleNamespace(c=c), w, (4.0, 8.0, 2.0))
    assert w.f[EP] == pytest.approx(c.overlap_cost * 2.0, rel=1e-12)
    assert w.b[EP] == pytest.approx(c.overlap_cost * 2.0, rel=1e-12)
