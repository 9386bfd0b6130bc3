"""The oracle's shortcuts give exactly what the plain definitions give.

Each shortcut exists for speed (benchmarks/oracle_speed.py): the key computed inside `resolve`, the
plan cache keyed on saturated micro-batch counts, the pruning of covered pipeline GPUs and the
identity caches. The reference in each test is the unshortened definition, evaluated here.
"""

from __future__ import annotations

import itertools

import pytest

import paratune.oracle.memory.inflight as inflight
from paratune.oracle.identity_cache import by_identity
from paratune.oracle.layout import RecomputePlan, layout_facts
from paratune.oracle.memory import estimate_memory
from paratune.oracle.model_shape import model_shape
from paratune.oracle.specs import EffectiveConfig, TrialConfig
from paratune.planner.search.space import enumerate_layouts

from .conftest import example


def sample(workload, cluster, layouts: int = 120) -> list[TrialConfig]:
    """Layouts spread over the whole legal space, each with every recompute mode its schedule allows."""
    every = list(enumerate_layouts(workload, cluster))
    out = []
    for layout in every[:: max(1, len(every) // layouts)]:
        modes = ("none",) if layout["pp_schedule"] in ("zb", "zbv") else ("none", "selective", "full")
        out += [TrialConfig(**layout, recompute_granularity=mode) for mode in modes]
    return out


def test_resolved_key_equals_the_key_of_a_validated_copy(shipped):
    w, c = shipped
    for trial in sample(w, c, 60):
        cfg = w.effective(trial)
        # the cached_property computes the key from the fields of a freshly validated model
        assert cfg.key == EffectiveConfig.model_validate(cfg.model_dump()).key


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved", "zb", "zbv"])
@pytest.mark.parametrize("extra", [0, 1])  # 1: EP all-to-all overlap's extra warm-up forward
def test_saturated_microbatches_keep_every_peak(schedule, extra):
    for pp, vpp, nmb in itertools.product(range(1, 9), range(1, 5), range(1, 81)):
        capped = inflight.saturated_microbatches(schedule, pp, vpp, nmb, extra)
        assert 1 <= capped <= nmb
        for i in range(pp):
            assert inflight.peak_chunk_microbatches(schedule, pp, vpp, capped, i, extra) == \
                inflight.peak_chunk_microbatches(schedule, pp, vpp, nmb, i, extra), (pp, vpp, nmb, i)


def test_ep_overlap_adds_one_warm_up_forward_under_interleaving():
    # PP 4, VPP 2, 16 micro-batches, rank 0: warm-up (4-0-1)*2 + (2-1)*4 = 10 chunk-forwards, +1 in the
    # steady state = 11, in groups of PP=4 per chunk: [4+3, 4]; EP overlap's extra forward makes 12: [8, 4]
    assert inflight.peak_chunk_microbatches("interleaved", 4, 2, 16, 0) == ((7, 4), 0)
    assert inflight.peak_chunk_microbatches("interleaved", 4, 2, 16, 0, 1) == ((8, 4), 0)


def test_saturation_merges_long_flushes():
    # 1F1B on PP=4 stores min(4 - i, m) micro-batches: 4, 40 and 400 all store the same
    assert {inflight.saturated_microbatches("1f1b", 4, 1, m) for m in (4, 40, 400)} == {4}


@pytest.mark.parametrize("name", ["mixtral", "llama70b", "deepseek", "llama8b"])
def test_pruning_covered_gpus_changes_no_estimate(name, monkeypatch):
    w, c = example(name)
    cfgs = [w.effective(t) for t in sample(w, c)]
    inflight.device_plans.cache_clear()
    pruned = [estimate_memory(w.model, cfg, c) for cfg in cfgs]
    monkeypatch.setattr(inflight, "_covers", lambda earlier, later: False)  # every candidate GPU kept
    inflight.device_plans.cache_clear()
    try:
        every = [estimate_memory(w.model, cfg, c) for cfg in cfgs]
    finally:
        inflight.device_plans.cache_clear()
    assert pruned == every  # totals and every breakdown term, including the reported stage


def test_pruning_removes_the_middle_stages_of_1f1b():
    # 1F1B, PP=8, equal stages: GPU 0 holds the embedding and 8 micro-batches, GPUs 1..6 hold the same
    # layers with fewer; only GPU 0 and the last GPU (the output layer) can be the most loaded.
    w, c = example("llama70b")
    cfg = w.effective(TrialConfig(tp=8, pp=8, vpp=1, pp_schedule="1f1b", recompute_granularity="none"))
    plans = inflight.device_plans(model_shape(w.model), layout_facts(w.model, cfg, c.world_size).chunks, 8, 1, "1f1b",
                                  16, RecomputePlan(False, None, 0, ()))
    assert [p.index for p in plans] == [0, 7]
    assert estimate_memory(w.model, cfg, c).breakdown["mem_stage"] == 0


def test_identity_cache_calls_once_per_object_and_empties_when_full():
    calls = []

    @by_identity(maxsize=2)
    def pair(a, b):
        calls.append((a, b))
        return len(calls)

    x, y, z = [1], [1], [2]  # x and y are equal but distinct objects
    assert pair(x, z) == pair(x, z) == 1
    assert pair(y, z) == 2  # identity, not equality
    assert pair(z, x) == 3  # the cache was full: emptied, then filled again
    assert pair(x, z) == 4
    assert len(calls) == 4
