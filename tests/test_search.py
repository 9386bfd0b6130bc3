"""Seed plan, search space and sweep: legal, distinct candidates and the true optimum under the oracle."""

from __future__ import annotations

from oracle.evaluate import evaluate_config
from oracle.legality import validate
from oracle.specs import TrialConfig
from planner.seed_plan import seed_plan
from planner.space import enumerate_space
from planner.sweep import sweep

from .conftest import example


def test_seed_plan_is_legal_distinct_ordered_and_capped(shipped):
    w, c = shipped
    plan = seed_plan(w, c, budget=200)
    keys = [w.effective(t).key for _, t in plan]
    assert len(keys) == len(set(keys))
    assert all(not validate(w.model, w.effective(t), c) for _, t in plan)
    assert plan[0] == ("seed:baseline", TrialConfig())
    tiers = [o.split(":")[1] for o, _ in plan]
    order = ["baseline", "recompute", "moe_backend", "fp8", "tier_a", "schedule", "neighbours", "dp_sharding", "grid"]
    ranks = [order.index(t) for t in tiers]
    assert ranks == sorted(ranks)  # tiers come in the documented order
    assert len(seed_plan(w, c, budget=7)) == 7


def test_seed_plan_covers_moe_backends_and_keeps_baseline_in_grid():
    w, c = example("mixtral")
    plan = seed_plan(w, c, budget=200)
    trials = [t for _, t in plan]
    assert any(t.use_turbo_deepep for t in trials)
    assert {t.sync_free_stage for t in trials if t.sync_free_stage} == {1, 2, 3}
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


def test_sweep_finds_the_brute_force_optimum():
    """On a small space the sweep's winner equals a brute-force max over every enumerated point."""
    w, c = example("llama8b")
    result = sweep(w, c, top_k=5, jobs=1)
    brute = []
    for t in enumerate_space(w, c):
        cfg = w.effective(t)
        if evaluate_config(w, c, cfg, performance=False).fits:
            brute.append(evaluate_config(w, c, cfg, performance=True).tokens_per_s_per_gpu)
    assert result.space_size == sum(1 for _ in enumerate_space(w, c))
    assert result.fits == len(brute)
    assert result.top[0].tokens_per_s_per_gpu == max(brute)
    tops = [r.tokens_per_s_per_gpu for r in result.top]
    assert tops == sorted(tops, reverse=True)


def test_parallel_sweep_matches_serial():
    w, c = example("llama8b")
    a = sweep(w, c, top_k=3, jobs=1)
    b = sweep(w, c, top_k=3, jobs=2)
    assert [r.config_key for r in a.top] == [r.config_key for r in b.top]
    assert (a.space_size, a.fits) == (b.space_size, b.fits)


def test_seed_best_never_beats_sweep():
    w, c = example("llama8b")
    best_seed = max(r.tokens_per_s_per_gpu for r in (
        evaluate_config(w, c, w.effective(t), performance=True) for _, t in seed_plan(w, c, 200)) if r.fits)
    assert best_seed <= sweep(w, c, top_k=1, jobs=1).top[0].tokens_per_s_per_gpu * (1 + 1e-9)


def test_grid_helper_near():
    from planner.seed_plan import _near

    assert _near([1, 2, 4, 8], 4) == [2, 4, 8]
    assert _near([1, 2, 4, 8], 1) == [1, 2]
    assert _near([1, 2, 4, 8], 3) == [1, 2, 4]  # anchor not legal: the smallest values
