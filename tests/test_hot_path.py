"""The oracle's shortcuts give exactly what the plain definitions give.

Each shortcut exists for speed (benchmarks/oracle_speed.py, benchmarks/sweep_speed.py): the key computed inside
`resolve`, the plan cache keyed on saturated micro-batch counts, the pruning of covered pipeline GPUs, the
identity caches, the layout bound's shared parts, the kept timeline ends, the dense block a model without dense
layers leaves untimed, the compiled timeline and the dense view the MoE knobs share. The reference in each test
is the unshortened definition, evaluated here.
"""

from __future__ import annotations

import importlib.machinery
import itertools
import random
import types
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import paratune.oracle.memory.inflight as inflight
from paratune.oracle.identity_cache import by_identity
from paratune.oracle.layout import RecomputePlan, layout_facts
from paratune.oracle.memory import estimate_memory
from paratune.oracle.model_shape import model_shape
from paratune.oracle.performance import bound, layers, pipeline, schedule, timeline
from paratune.oracle.performance.calibration import constants
from paratune.oracle.performance.layers import transformer_layer
from paratune.oracle.performance.pipeline import Block, Pipeline, blocks, layer_context
from paratune.oracle.specs import EffectiveConfig, TrialConfig
from paratune.planner.search.space import bound_variants, enumerate_layouts, knob_points, layout_knobs, menu

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


def _stage_sums(model, facts, pl, parts, *, recompute: bool) -> tuple:
    """Per stage F, B (with the layout's selective recompute, or none) and W, and each rank's (dense, expert) weights,
    summed from `parts`' own times and weights: the plain definition."""
    stages = pipeline.chunks(model, facts, recompute=recompute)
    modules = pipeline.recompute_indices(facts) if recompute else ()
    times = pipeline.chunk_times(stages, [x.f for x in parts], [x.b + x.recompute_ms(modules) for x in parts],
                        [x.w for x in parts])
    weights = tuple(tuple(pipeline.stage_weights(stages, [x.params[k] for x in parts], mine) for k in (0, 1))
                    for mine in pipeline.rank_chunks(pl.schedule, pl.p, pl.V))
    return *times, weights


@pytest.mark.parametrize("name", ["mixtral", "llama70b", "deepseek"])
def test_layout_bound_parts_equal_their_unshortened_definition(name):
    # `bound._parts` interns the context, takes the fastest blocks' times once per context for both PP cases,
    # stage times once per (plan, times) and weights from `block_weights`. The plain definition: FSDP switched off
    # on the layout's context, the blocks of every knob variant built with the layout's own PP, each block's least
    # F, B and W over them with the first variant's weights, then the stage and rank sums of those blocks.
    w, c = example(name)
    variants = bound_variants(menu(w, c))
    every = list(enumerate_layouts(w, c))
    for layout in every[:: max(1, len(every) // 100)]:
        cfg = w.effective(next(knob_points(*layout_knobs(w, layout, menu(w, c)))))
        facts = layout_facts(w.model, cfg, c.world_size)
        pl = Pipeline.of(facts, cfg)
        ctx = replace(layer_context(model_shape(w.model), cfg, c, constants(c.gpu), facts), fsdp=0, fsdp_expert=0)
        knobs = itertools.product(variants.fp8 if c.gpu.has_fp8 else (False,),
                                  variants.dispatch if ctx.ep > 1 else (ctx.dispatch,),
                                  variants.tp_overlap if ctx.tp > 1 else (False,),
                                  variants.ep_overlap if ctx.ep > 1 else (False,))
        versions = zip(*(blocks(replace(ctx, fp8=f8, dispatch=d, tp_overlap=t, ep_overlap=e), pl.p > 1)
                         for f8, d, t, e in knobs))
        fastest = [Block(x[0].work, min(y.f for y in x), min(y.b for y in x), min(y.w for y in x), x[0].rec,
                         x[0].params, x[0].work, min(y.f for y in x), min(y.b for y in x)) for x in versions]
        got = bound._parts(w.model, cfg, c, None, True, variants)
        assert (got.f, got.b, got.w, got.weights) == _stage_sums(w.model, facts, pl, fastest, recompute=False)
        alone = bound._parts(w.model, cfg, c, None, False, variants)  # a point's bound: its own blocks
        plain = blocks(layer_context(model_shape(w.model), cfg, c, constants(c.gpu), facts), pl.p > 1)
        assert (alone.f, alone.b, alone.w, alone.weights) == _stage_sums(w.model, facts, pl, plain, recompute=False)


def test_a_model_without_dense_layers_leaves_its_dense_block_untimed():
    # Mixtral (every layer MoE, no MTP): `blocks` puts the MoE block in the dense slot instead of timing a dense layer
    # no stage holds; every stage sum (with each recompute mode) and every rank's weights are those with the real
    # dense layer's block in the slot.
    w, c = example("mixtral")
    assert 0 not in w.model.moe_layer_pattern
    for trial in sample(w, c, 40):
        cfg = w.effective(trial)
        facts = layout_facts(w.model, cfg, c.world_size)
        pl = Pipeline.of(facts, cfg)
        ctx = layer_context(model_shape(w.model), cfg, c, constants(c.gpu), facts)
        parts = blocks(ctx, pl.p > 1)
        assert parts[0] is parts[1]
        dense = pipeline.block_weights(ctx.shape, ctx.tp, ctx.etp, ctx.ep, pl.p > 1, ctx.seq)[0]
        real = (Block.of(transformer_layer(ctx, False, dense), dense), *parts[1:])
        assert real[0].f != parts[0].f  # the slot's times do differ: only the zero counts make the sums equal
        for recompute in (True, False):
            assert (_stage_sums(w.model, facts, pl, parts, recompute=recompute)
                    == _stage_sums(w.model, facts, pl, real, recompute=recompute))


def test_kept_timeline_ends_are_the_computed_ones(monkeypatch):
    # `rank_end_times_batch` keeps each distinct timeline's ends (`schedule._ENDS`, at most ENDS_KEPT): inputs
    # repeated within a call, or met in an earlier one, get what `rank_end_times_arrays` computes for them.
    monkeypatch.setattr(schedule, "_ENDS", {})
    monkeypatch.setattr(schedule, "ENDS_KEPT", 12)
    rng = random.Random(26)
    for name, p, v, m in [("1f1b", 4, 1, 8), ("interleaved", 2, 3, 4), ("zb", 3, 1, 9), ("zbv", 2, 2, 6)]:
        V = schedule.virtual_stages(name, p, v)
        times = [[tuple(rng.uniform(0.5, 2.0) for _ in range(V)) for _ in range(3)] for _ in range(5)]
        inputs = [schedule.timeline_inputs(name, *fbw, tuple(rng.uniform(0, 0.1) for _ in range(V - 1)))
                  for fbw in times]
        inputs += inputs[:2]  # repeated within the call
        direct = schedule.rank_end_times_arrays(name, p, v, m, np.array([d for d, _ in inputs]).T,
                                                np.array([e for _, e in inputs]).T).T.tolist()
        for _ in range(2):  # the second time every input was met before
            assert schedule.rank_end_times_batch(name, p, v, m, inputs) == [tuple(x) for x in direct]
            assert len(schedule._ENDS) <= 12


@pytest.mark.parametrize("name,p,v,m,paired", [("1f1b", 4, 1, 12, False), ("interleaved", 3, 2, 9, False),
                                               ("interleaved", 2, 3, 6, True), ("zb", 3, 1, 9, False),
                                               ("zbv", 2, 2, 6, False)])
def test_compiled_timeline_is_its_python_source(name, p, v, m, paired):
    # `timeline.py` is compiled at install (Cython's pure-Python mode, setup.py); the interpreter running the same
    # source gives the same bits (IEEE additions and comparisons in one order, no fast-math), on random durations
    # and p2p times of many layouts at once.
    source = Path(timeline.__file__).with_name("timeline.py")
    loader = importlib.machinery.SourceFileLoader("timeline_as_written", str(source))
    interpreted = types.ModuleType(loader.name)
    loader.exec_module(interpreted)
    assert not interpreted.compiled
    program = schedule._program(name, p, v, m, paired)
    V = schedule.virtual_stages(name, p, v)
    orders = schedule.rank_orders(name, p, v, m, paired)
    owner = [schedule.rank_of(name, p, vs) for vs in range(V)]
    written = interpreted.program_order(orders, owner, schedule.BASE_KIND, V, m)
    assert all(np.array_equal(a, b) for a, b in zip(program, written))
    assert len(program[0]) == sum(len(order) for order in orders)
    rng = np.random.default_rng(p * 100 + v * 10 + m)
    durations = rng.uniform(0.1, 2.0, (int(program[1].max()) + 1, 7))
    edges = rng.uniform(0.0, 0.1, (schedule.virtual_stages(name, p, v), 7))
    edges[-1] = 0.0  # the "no transfer" edge (`timeline_inputs`)
    got = timeline.rank_ends(program, durations, edges, p)
    assert got.shape == (p, 7)
    assert np.array_equal(got, interpreted.rank_ends(program, durations, edges, p))


# Every value the MoE-only fields of a context can take (`Ctx.dense_view` sets them to one).
MOE_KNOBS = dict(dispatch=("allgather", "alltoall", "deepep", "hybridep"), deepep_sms=(None, 20, 24),
                 hybridep_sms=(None, 16, 32), grouped_gemm=(False, True),
                 legacy_grouped=(False, True), permute_fusion=(False, True), op_fuser=(False, True),
                 shared_overlap=(False, True), sync_free=(False, True), ep_overlap=(False, True))


@pytest.mark.parametrize("name", ["deepseek", "mixtral", "llama70b"])
def test_shared_blocks_read_no_knob_they_are_shared_over(name):
    # A dense layer, a layer's attention block, the embedding and the output head are timed in the context's
    # dense view, which shares them between contexts that differ in MoE knobs alone, and a MoE layer's body in
    # its overlap-free view. The plain definition: each timed in the context itself, with the knobs it is
    # shared over set at random (the layer functions, uncached).
    w, c = example(name)
    rng = random.Random(23)
    for trial in sample(w, c, 30):
        cfg = w.effective(trial)
        facts = layout_facts(w.model, cfg, c.world_size)
        base = layer_context(model_shape(w.model), cfg, c, constants(c.gpu), facts)
        dense = pipeline.block_weights(base.shape, base.tp, base.etp, base.ep, False, base.seq)[0]
        for _ in range(3):
            ctx = replace(base, **{k: rng.choice(v) for k, v in MOE_KNOBS.items()})
            view = ctx.dense_view
            assert layers._layer.__wrapped__(ctx, False, dense) == layers._layer.__wrapped__(view, False, dense)
            for moe in (False, True):
                assert layers._attention_block.__wrapped__(ctx, moe) == layers._attention_block.__wrapped__(view, moe)
            assert layers._embedding.__wrapped__(ctx) == layers._embedding.__wrapped__(view)
            assert layers._output_head.__wrapped__(ctx) == layers._output_head.__wrapped__(view)
            if w.model.is_moe:  # a MoE layer's body is timed without the TP and EP overlaps, which it never reads
                both = replace(ctx, tp_overlap=rng.choice((False, True)), ep_overlap=True)
                assert layers._moe_body.__wrapped__(both) == layers._moe_body.__wrapped__(both.overlap_free)


def test_a_replaced_context_is_the_dataclass_replace():
    # `Ctx.replaced` copies the fields instead of running the frozen __init__: the same context (fields, equality,
    # hash) as `dataclasses.replace`, none of the original's cached values carried over, unknown fields refused.
    w, c = example("deepseek")
    rng = random.Random(5)
    for trial in sample(w, c, 10):
        cfg = w.effective(trial)
        ctx = layer_context(model_shape(w.model), cfg, c, constants(c.gpu), layout_facts(w.model, cfg, c.world_size))
        assert ctx.dense_view is ctx.dense_view  # computed once, kept on the object
        changes = {k: rng.choice(v) for k, v in MOE_KNOBS.items()} | {"tp_overlap": rng.choice((False, True)),
                                                                      "fp8": rng.choice((False, True))}
        got, want = ctx.replaced(**changes), replace(ctx, **changes)
        assert got == want and hash(got) == hash(want)
        assert got.__dict__ == want.__dict__  # fields only: no view of the original rides along
        assert got.dense_view == want.dense_view
    with pytest.raises(TypeError):
        ctx.replaced(no_such_field=1)
