"""Seed plan, search space and sweep: legal, distinct candidates and the true optimum under the oracle."""

from __future__ import annotations

import heapq

import pytest

from paratune.oracle.constraints import rule_violations, search_rules
from paratune.oracle.evaluate import evaluate_config
from paratune.oracle.legality import validate
from paratune.oracle.performance.bound import mean_rank_bounds
from paratune.oracle.specs import TrialConfig
from paratune.planner.search import sweep as sweep_module
from paratune.planner.search.seed_plan import seed_plan
from paratune.planner.search.space import (
    bound_group,
    bound_variants,
    enumerate_layouts,
    enumerate_space,
    knob_points,
    layout_knobs,
    menu,
)
from paratune.planner.search.sweep import sweep

from .conftest import example


def test_seed_plan_is_legal_distinct_ordered_and_capped(shipped):
    w, c = shipped
    plan = seed_plan(w, c, budget=200)
    keys = [w.effective(t).key for _, t in plan]
    assert len(keys) == len(set(keys))
    rules = search_rules(w, c)
    assert all(not validate(w.model, w.effective(t), c) and not rule_violations(rules, w.effective(t)) for _, t in plan)
    assert plan[0] == ("seed:baseline", TrialConfig())
    tiers = [o.split(":")[1] for o, _ in plan]
    order = ["baseline", "recompute", "moe_backend", "tp_overlap", "fp8", "tier_a", "schedule", "neighbours",
             "dp_sharding", "grid"]
    ranks = [order.index(t) for t in tiers]
    assert ranks == sorted(ranks)  # tiers come in the documented order
    assert len(seed_plan(w, c, budget=7)) == 7


def test_seed_plan_covers_moe_backends_and_keeps_baseline_in_grid():
    w, c = example("mixtral")
    plan = seed_plan(w, c, budget=200)
    trials = [t for _, t in plan]
    assert any(t.use_turbo_deepep for t in trials)  # MI355X runs Primus: its DeepEP is offered
    assert not any(t.sync_free_stage for t in trials)  # sync-free stages: effect not modelled, never proposed
    grid = [w.effective(t) for o, t in plan if o == "seed:grid"]
    base = w.effective()
    # the grid keeps the baseline's own value of each axis in its lists
    for axis in ("tp", "pp", "ep", "cp"):
        assert getattr(base, axis) in {getattr(g, axis) for g in grid}


def test_space_points_are_legal_and_distinct():
    w, c = example("llama8b")
    points = list(enumerate_space(w, c))
    keys = {w.effective(t).key for t in points}
    assert len(keys) == len(points)
    assert all(not validate(w.model, w.effective(t), c) for t in points)
    # 8 GPUs, 32 heads / 8 groups: TP in {1,2,4,8}; the baseline layout is in the space
    # the workload's own layout (with the always-on fused loss) is one of the points
    assert w.effective(TrialConfig(cross_entropy_loss_fusion=True)).key in keys


def _brute_force_top(w, c, trials, k):
    """(tokens/s/GPU, config key) of the k best fitting points, by scoring every one; and how many fit."""
    scored = []
    for t in trials:
        cfg = w.effective(t)
        if evaluate_config(w, c, cfg, performance=False).fits:
            scored.append((evaluate_config(w, c, cfg, performance=True).tokens_per_s_per_gpu, cfg.key))
    return heapq.nlargest(k, scored), len(scored)


def _ranking(result):
    return [(r.tokens_per_s_per_gpu, r.config_key) for r in result.top]


@pytest.fixture(scope="module")
def llama8b_sweep():
    """One serial top-5 sweep of the Llama 3 8B example, shared by the tests that only read it."""
    w, c = example("llama8b")
    return sweep(w, c, top_k=5, jobs=1)


def test_sweep_finds_the_brute_force_optimum(llama8b_sweep):
    """On a small space the sweep's top-k equals scoring every enumerated point, and its counts add up."""
    w, c = example("llama8b")
    result = llama8b_sweep
    points = list(enumerate_space(w, c))
    brute, fitting = _brute_force_top(w, c, points, 5)
    assert _ranking(result) == brute
    assert result.space_size == len(points)
    assert result.scored <= result.fits <= fitting
    assert result.fits - result.scored <= result.pruned <= result.space_size - result.scored


def test_sweep_prunes_yet_matches_brute_force_on_a_mixtral_slice(monkeypatch):
    """On a slice of the Mixtral space that holds its optimum (TP 1, PP 4, CP <= 2: every schedule,
    ~5k points) the bound skips most points, and the top-k still equals scoring every fitting one, in one
    process and in two workers that prune against each other's k-th best (`sweep._floor`)."""
    w, c = example("mixtral")
    layouts = [x for x in enumerate_layouts(w, c) if x["tp"] == 1 and x["pp"] == 4 and x["cp"] <= 2]
    monkeypatch.setattr(sweep_module, "candidate_layouts", lambda *_: iter(layouts))
    m = menu(w, c)
    points = [t for x in layouts for t in knob_points(*layout_knobs(w, x, m))]
    brute = _brute_force_top(w, c, points, 5)[0]
    for jobs in (1, 2):
        result = sweep(w, c, top_k=5, jobs=jobs)
        assert _ranking(result) == brute, jobs
        assert result.space_size == len(points)
        if jobs == 1:  # what two workers prune depends on which of them scores what first
            assert result.pruned > result.space_size / 2


@pytest.mark.parametrize("name", ["mixtral", "deepseek", "llama70b"])
def test_layouts_of_one_bound_group_have_one_cheap_bound(name):
    """The sweep takes the cheap bound once per `bound_group` (VPP, schedule and split left out); every layout of a
    group, bounded on its own first point, gives that same bound (a sample of groups of each shipped space)."""
    w, c = example(name)
    m = menu(w, c)
    groups: dict[tuple, list[dict]] = {}
    for layout in enumerate_layouts(w, c):
        groups.setdefault(bound_group(w, layout), []).append(layout)
    many = [g for g in groups.values() if len(g) > 1]
    assert len(many) > 10  # the shortcut has work to do: groups of layouts that differ in VPP, schedule or split
    for group in many[:: max(1, len(many) // 40)]:
        cfgs = [w.effective(next(knob_points(*layout_knobs(w, x, m)))) for x in group[:12]]
        bounds = mean_rank_bounds(w.model, cfgs, c, variants=bound_variants(m))
        assert len(set(bounds)) == 1, group[:12]


def test_parallel_sweep_matches_serial(llama8b_sweep):
    w, c = example("llama8b")
    a = llama8b_sweep
    b = sweep(w, c, top_k=5, jobs=2)
    assert _ranking(a) == _ranking(b)
    assert a.space_size == b.space_size  # what each worker prunes depends on what it has scored


def test_seed_best_never_beats_sweep(llama8b_sweep):
    w, c = example("llama8b")
    best_seed = max(r.tokens_per_s_per_gpu for r in (
        evaluate_config(w, c, w.effective(t), performance=True) for _, t in seed_plan(w, c, 200)) if r.fits)
    assert best_seed <= llama8b_sweep.top[0].tokens_per_s_per_gpu * (1 + 1e-9)


def test_grid_helper_near():
    from paratune.planner.search.seed_plan import _near

    assert _near([1, 2, 4, 8], 4) == [2, 4, 8]
    assert _near([1, 2, 4, 8], 1) == [1, 2]
    assert _near([1, 2, 4, 8], 3) == [1, 2, 4]  # anchor not legal: the smallest values
