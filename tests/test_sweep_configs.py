"""The sweep's per-point configurations (`space.point_configs`: the layout's fields from one `resolve` of the
layout, the feature fields from one `resolve` per feature setting) equal `resolve` of each whole point: every
field and the config key, which ranks ties and names the layout to the user.

The reference is `workload.effective(trial)` itself (tests/test_search.py and tests/test_knob_registry.py check
`resolve` against Megatron's defaults). Cases: every shipped example and the README's main job (a workload that
recomputes one layer per chunk, so the feature settings meet a baseline with full recompute), plus a Bridge and a
Primus stack; random layouts of the larger spaces, every layout of the small one.

The sweep's memory of its points (`estimate_points` over one part per layout and one per feature setting, no
config per point) equals `estimate_memory` of each point's config to the last bit, and its group keys part the
points of a layout as the layout facts of their configs do (`sweep._group` before issue 26: FP8, grouped GEMMs,
dispatch backend, EP and TP overlap in effect, weight sharding)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from paratune.oracle.layout import layout_facts
from paratune.oracle.memory import estimate_memory
from paratune.planner.search import sweep as sweep_module
from paratune.planner.search.space import (
    base_config,
    enumerate_layouts,
    knob_points,
    layout_knobs,
    menu,
    point_configs,
    point_ids,
)

from .conftest import EXAMPLES, example
from .test_array_oracle import _case

LAYOUTS = 150  # random layouts per case (the whole space where it is smaller)
CASES = [
    ("mixtral-8x22b-mi355x-recipe.yaml", "mi355x-4n.yaml", None),  # the README's main job
    ("qwen3-30b-a3b-h100-recipe.yaml", "h100-2n.yaml", "megatron-bridge"),
    ("llama3-70b-h100.yaml", "h100-2n.yaml", "primus"),
]


def layout_configs(workload, layout, m) -> list:
    """The configs of every point of `layout` as the sweep builds them (`sweep._score_block`: `point_configs` over
    the layout's `base_config` and its `point_ids`)."""
    return point_configs(workload, m, layout, base_config(workload, layout), point_ids(workload, layout, m))


def _same(workload, cluster, layouts) -> int:
    m = menu(workload, cluster)
    n = 0
    for layout in layouts:
        got = layout_configs(workload, layout, m)
        want = [workload.effective(t) for t in knob_points(*layout_knobs(workload, layout, m))]
        assert [c.key for c in got] == [c.key for c in want], layout
        assert [c.__dict__ for c in got] == [c.__dict__ for c in want], layout
        n += len(got)
    return n


@pytest.mark.parametrize("name", ["mixtral", "llama70b", "deepseek", "llama8b"])
def test_sweep_configs_equal_resolve_on_the_shipped_examples(name):
    workload, cluster = example(name)
    rng = random.Random(name)
    layouts = []
    for i, layout in enumerate(enumerate_layouts(workload, cluster)):  # reservoir sample: the space in one pass
        if i < LAYOUTS:
            layouts.append(layout)
        elif (j := rng.randrange(i + 1)) < LAYOUTS:
            layouts[j] = layout
        if i > 20 * LAYOUTS and name == "deepseek":
            break  # its 2.6M points: the first layouts of every TP suffice for the rules this checks
    assert _same(workload, cluster, layouts) >= len(layouts)


@pytest.mark.parametrize(("w_file", "c_file", "stack"), CASES)
def test_sweep_configs_equal_resolve_across_stacks(w_file, c_file, stack):
    assert (EXAMPLES / "workloads" / w_file).exists()
    workload, cluster, layouts = _case(w_file, c_file, stack)
    rng = random.Random(w_file)
    assert _same(workload, cluster, rng.sample(layouts, min(LAYOUTS, len(layouts)))) > 0


@pytest.mark.parametrize(("w_file", "c_file", "stack"), CASES)
def test_sweep_memory_and_groups_equal_those_of_each_point_config(w_file, c_file, stack):
    workload, cluster, layouts = _case(w_file, c_file, stack)
    layouts = random.Random(stack).sample(layouts, min(60, len(layouts)))
    sweep_module._init(workload, cluster, 10)
    m = menu(workload, cluster)
    bases = [base_config(workload, x) for x in layouts]
    ids = [point_ids(workload, x, m) for x in layouts]
    li = np.repeat(np.arange(len(layouts)), [len(x) for x in ids])
    memory, groups = sweep_module._memory_and_groups(layouts, bases, ids, li, np.concatenate(ids))
    cfgs = [cfg for x in layouts for cfg in layout_configs(workload, x, m)]
    assert len(cfgs) == len(memory) > 2 * len(layouts)
    assert [estimate_memory(workload.model, cfg, cluster).total_gb for cfg in cfgs] == memory.tolist()
    for n in range(len(layouts)):
        mine = np.flatnonzero(li == n)
        facts = [layout_facts(workload.model, cfgs[k], cluster.world_size) for k in mine]
        want = [(cfgs[k].fp8, cfgs[k].moe_grouped_gemm, f.dispatch, f.overlaps.ep, f.overlaps.tp, f.sharding.weights)
                for k, f in zip(mine, facts)]
        got = groups[mine].tolist()
        assert [[want[j] == want[k] for k in range(len(mine))] for j in range(len(mine))] == \
               [[got[j] == got[k] for k in range(len(mine))] for j in range(len(mine))]
    assert len(set(groups.tolist())) > len(layouts)  # layouts hold several groups
