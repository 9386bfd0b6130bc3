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

from paratune.calibration.rows import load_rows, project, setup
from paratune.oracle.catalog import gpu
from paratune.oracle.performance import simulate
from paratune.oracle.performance.calibration import constants
from paratune.oracle.performance.layers import _ep_overlap, _pair_period
from paratune.oracle.performance.schedule import BS, FS, B, F, rank_end_times, rank_orders
from paratune.oracle.performance.simulate import _prepared
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


# ---- solo warm-up and cool-down: the ops without a combined-1F1B partner ------------------------------------
# megatron-core schedules.py `get_pp_rank_microbatches` (@ d48bd6be0a): interleaved 1F1B warms up with
# 2(p-r-1) + (v-1)·p forwards on rank r, one more under overlap_moe_expert_parallel_comm, and cools down with as
# many backwards; only the forwards and backwards between them run as combined 1F1B pairs.

def test_the_overlap_leaves_megatrons_warm_up_and_cool_down_counts_solo_in_the_same_order():
    # p=2, v=2, m=4 (8 chunk passes per rank): rank 0 warms up with 2·1 + 1·2 + 1 = 5, rank 1 with 0 + 2 + 1 = 3
    paired, plain = rank_orders("interleaved", 2, 2, 4, True), rank_orders("interleaved", 2, 2, 4)
    for order, solo in zip(paired, (5, 3)):
        kinds = [kind for kind, _, _ in order]
        assert kinds.count(FS) == kinds.count(BS) == solo
        assert kinds[:solo] == [FS] * solo and kinds[-solo:] == [BS] * solo
    base = {FS: F, BS: B}
    assert [[(base.get(k, k), vs, mb) for k, vs, mb in order] for order in paired] == plain


def test_solo_ops_alone_set_the_timeline_by_hand():
    # paired ops take no time, solo ones 1 ms each, no p2p. By hand, from the orders above (FS/BS: solo, F/B: 0):
    # rank 0: FS(0,0) 0-1, FS(0,1) 1-2, FS(2,0) 2-3 (F(1,0) on rank 1 ends at 2), FS(2,1) 3-4, FS(0,2) 4-5, the
    # pairs at 5, BS(0,1) 5-6, BS(2,2) 6-7, BS(2,3) 7-8, BS(0,2) 8-9 (after BS(1,2) on rank 1: 7-8), BS(0,3) 9-10;
    # rank 1: FS(1,0) 1-2, FS(1,1) 2-3, FS(3,0) 3-4, the pairs by 5, BS(3,3) 5-6, BS(1,2) 7-8, BS(1,3) 8-9
    zero, one = (0.0,) * 4, (1.0,) * 4
    assert rank_end_times("interleaved", 2, 2, 4, zero, zero, zero, (0.0,) * 3, solo=(one, one)) == (10.0, 9.0)
    # solo ops as long as paired ones: the timeline of the schedule without the overlap
    f, b = (1.0, 1.5, 1.0, 2.0), (2.0, 3.0, 2.0, 4.0)
    assert (rank_end_times("interleaved", 2, 2, 4, f, b, zero, (0.1,) * 3, solo=(f, b))
            == rank_end_times("interleaved", 2, 2, 4, f, b, zero, (0.1,) * 3))


def test_without_pipelining_the_first_forward_and_the_last_backward_run_solo():
    # combined_1f1b.py `combined_1f1b_schedule_for_no_pipelining`: forward 1 alone, m-1 pairs, backward m alone, so
    # the iteration's pipeline part is m·(F + B + W) + (F_solo - F) + (B_solo - B), which the breakdown books as
    # the bubble (Megatron-LM's Qwen3-235B-A22B GB200 recipe: PP 1, EP 64, the overlap on)
    row = next(r for r in load_rows() if r.id == "MLM-QWEN3235BA22B-GB200-1")
    s, cfg = setup(row), project(row).cfg
    x = _prepared(s.model, cfg, s.cluster, None, None)
    assert x.pl.p == 1 and x.pl.paired
    dense, moe, emb, head = x.parts
    assert moe.fs > moe.f and moe.bs > moe.b
    assert dense is moe  # every layer is MoE: the dense slot holds the MoE block, which no stage counts
    (stage,) = x.stages
    extra = sum(k * (blk.fs - blk.f + blk.bs - blk.b) for k, blk in zip(stage.coefficients, x.parts))
    assert simulate(s.model, cfg, s.cluster).breakdown["pp_bubble"] == pytest.approx(extra, rel=1e-9)
