"""The oracle over arrays equals the oracle on one layout: `estimate_memory_batch` against `estimate_memory`
on more than 20,000 random legal layouts across dense, MoE and MLA models, every stack and every pipeline
schedule, the sweep's layout bounds (`iteration_bounds`) against `iteration_bound` on 900 of them, and the
batched simulation (`simulated_tokens_per_s_per_gpu_batch`) against the scalar one on 2,400, and with the
sweep's shared contexts (`same`) on every point of 90 layouts.

The scalar call runs the same formulas on plain numbers (`oracle/memory/estimate.py`), so the two must agree
to the last bit; the test allows a relative difference of 1e-9, as issue 26 states it. The reference numbers
are the scalar oracle's, which tests/test_memory.py checks against published measurements and hand sums.
"""

from __future__ import annotations

import random
from functools import cache
from pathlib import Path

from paratune.oracle.inputs import load_cluster, load_workload
from paratune.oracle.memory import estimate_memory
from paratune.oracle.memory.estimate import estimate_memory_batch
from paratune.oracle.performance import iteration_bound, schedule
from paratune.oracle.performance.bound import iteration_bounds
from paratune.oracle.performance.simulate import simulated_tokens_per_s_per_gpu, simulated_tokens_per_s_per_gpu_batch
from paratune.planner.search.space import (
    base_config,
    bound_variants,
    enumerate_layouts,
    knob_points,
    layout_knobs,
    menu,
    point_configs,
    point_ids,
    setting_class,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
# (workload, cluster, stack override): dense, MoE and MLA (with MTP); Megatron-LM, Megatron-Bridge and
# Primus (whose zero-bubble schedules 1F1B-ZB and ZB-V only Primus runs). One- and two-node clusters keep the
# enumeration of the legal layouts short.
CASES = [
    ("llama3-8b-mi300x.yaml", "mi300x-1n.yaml", None),
    ("llama3-70b-h100.yaml", "h100-2n.yaml", None),
    ("llama3-70b-h100.yaml", "h100-2n.yaml", "megatron-bridge"),
    ("mixtral-8x22b-mi355x.yaml", "mi300x-1n.yaml", None),
    ("qwen3-30b-a3b-h100-recipe.yaml", "h100-2n.yaml", "megatron-bridge"),
    ("deepseek-v3-h100.yaml", "h100-2n.yaml", None),
]
PER_CASE = 3500  # 6 cases: 21,000 layouts
REL = 1e-9


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= REL * max(abs(a), abs(b))


@cache
def _case(w_file: str, c_file: str, stack: str | None) -> tuple:
    """(workload, cluster, its legal layouts) of a case, read and enumerated once for both tests."""
    workload = load_workload(EXAMPLES / "workloads" / w_file)
    cluster = load_cluster(EXAMPLES / "clusters" / c_file)
    if stack:
        cluster = cluster.model_copy(update={"stack": stack})
    return workload, cluster, list(enumerate_layouts(workload, cluster))


def _random_points(workload, cluster, layouts: list, n: int, rng: random.Random, per_layout: int) -> list:
    """`n` random legal points: a random legal layout, then `per_layout` random feature-knob points of it
    (with replacement)."""
    m = menu(workload, cluster)
    out: list = []
    while len(out) < n:
        points = list(knob_points(*layout_knobs(workload, rng.choice(layouts), m)))
        out += [workload.effective(rng.choice(points)) for _ in range(min(per_layout, n - len(out)))]
    return out


def test_batched_memory_equals_the_scalar_oracle_on_random_legal_layouts():
    rng = random.Random(26)
    seen = {"schedules": set(), "stacks": set(), "kinds": set()}
    checked = 0
    for w_file, c_file, stack in CASES:
        workload, cluster, layouts = _case(w_file, c_file, stack)
        cfgs = _random_points(workload, cluster, layouts, PER_CASE, rng, per_layout=10)
        batch = estimate_memory_batch(workload.model, cfgs, cluster)
        for i, cfg in enumerate(cfgs):
            one = estimate_memory(workload.model, cfg, cluster)
            assert batch.total_gb[i] == one.total_gb, (w_file, cfg.key)  # the sweep's fit test reads the batch
            assert _close(batch.param_optimizer_gb[i], one.param_optimizer_gb), (w_file, cfg.key)
            assert _close(batch.activation_gb[i], one.activation_gb), (w_file, cfg.key)
            got = batch.estimate(i)
            assert got.breakdown.keys() == one.breakdown.keys()
            assert all(_close(got.breakdown[k], v) for k, v in one.breakdown.items()), (w_file, cfg.key)
            seen["schedules"].add(cfg.pp_schedule)
        seen["stacks"].add(cluster.stack)
        model = workload.model
        seen["kinds"].add("mla" if model.multi_latent_attention else "moe" if model.is_moe else "dense")
        checked += len(cfgs)
    assert checked >= 20_000
    assert seen["schedules"] == {"1f1b", "interleaved", "zb", "zbv"}
    assert seen["stacks"] == {"megatron-lm", "megatron-bridge", "primus"}
    assert seen["kinds"] == {"dense", "moe", "mla"}


def test_batched_layout_bounds_equal_the_scalar_bound():
    """`iteration_bounds` (pipeline timelines of one shape run together over arrays) against
    `iteration_bound` layout by layout: over every feature knob (a layout's bound) and per point. Each side
    computes its own timelines (the kept timeline ends, `schedule._ENDS`, emptied before each)."""
    rng = random.Random(2026)
    for w_file, c_file, stack in CASES:
        workload, cluster, layouts = _case(w_file, c_file, stack)
        variants = bound_variants(menu(workload, cluster))
        cfgs = _random_points(workload, cluster, layouts, 150, rng, per_layout=1)
        for any_knobs in (True, False):
            schedule._ENDS.clear()
            batch = iteration_bounds(workload.model, cfgs, cluster, any_knobs=any_knobs, variants=variants)
            for cfg, got in zip(cfgs, batch):
                schedule._ENDS.clear()
                one = iteration_bound(workload.model, cfg, cluster, any_knobs=any_knobs, variants=variants)
                assert _close(got, one), (w_file, cfg.key, any_knobs)


def test_batched_simulation_equals_the_scalar_simulation():
    """The sweep ranks by `simulated_tokens_per_s_per_gpu_batch` (timelines of one pipeline program run over
    arrays) and shows `simulate`'s figures; ties are broken by config key, so the two must agree to the last
    bit, not just within 1e-9. Ten points per layout: many share a program, and every shared timeline of two
    or more runs over arrays."""
    rng = random.Random(2027)
    piped = 0
    for w_file, c_file, stack in CASES:
        workload, cluster, layouts = _case(w_file, c_file, stack)
        cfgs = _random_points(workload, cluster, layouts, 400, rng, per_layout=10)
        batch = simulated_tokens_per_s_per_gpu_batch(workload.model, cfgs, cluster)
        for cfg, got in zip(cfgs, batch):
            assert got == simulated_tokens_per_s_per_gpu(workload.model, cfg, cluster), (w_file, cfg.key)
        piped += sum(cfg.pp > 1 for cfg in cfgs)
    assert piped >= 1000  # most points run a pipeline timeline


def test_points_sharing_a_context_in_the_sweep_simulate_as_alone():
    """The sweep passes `same` (one key per point: its layout and its setting's `setting_class`) so that points
    differing in recompute alone share one pipeline, layer context and blocks: each point's rate must still be
    the scalar oracle's on that point, to the last bit. Every point of 15 random layouts per case."""
    rng = random.Random(2028)
    shared = 0
    for w_file, c_file, stack in CASES:
        workload, cluster, layouts = _case(w_file, c_file, stack)
        m = menu(workload, cluster)
        cfgs, same, classes = [], [], {}
        for li, layout in enumerate(rng.sample(layouts, 15)):
            ids = point_ids(workload, layout, m)
            cfgs += point_configs(workload, m, layout, base_config(workload, layout), ids)
            same += [(li, classes.setdefault(setting_class(workload, m, i), len(classes))) for i in ids.tolist()]
        batch = simulated_tokens_per_s_per_gpu_batch(workload.model, cfgs, cluster, same)
        for cfg, got in zip(cfgs, batch):
            assert got == simulated_tokens_per_s_per_gpu(workload.model, cfg, cluster), (w_file, cfg.key)
        shared += len(same) - len(set(same))
    assert shared >= 1000  # most points share their context with another
