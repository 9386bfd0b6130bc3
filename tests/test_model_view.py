"""One model view, one parameter count, one layout-facts record: memory and time read the same numbers.

The memory estimate reports the weights on its most-loaded pipeline rank; the time model's per-rank
weights (which its DP traffic and optimizer step read) must be exactly those, on every layout kind:
even and uneven splits, interleaving, ZB-V, MTP, tied and untied outputs, biases and sinks."""

from __future__ import annotations

import pytest

from paratune.oracle.catalog import gpu, model_card
from paratune.oracle.layout import layout_facts
from paratune.oracle.memory import estimate_memory
from paratune.oracle.model_shape import model_shape
from paratune.oracle.performance.pipeline import chunks, rank_weights
from paratune.oracle.specs import ClusterSpec, ModelArch, TrainingArgs, TrialConfig, Workload

from .conftest import example

LAYOUTS = [
    ("llama70b", TrialConfig(tp=8, pp=8, vpp=1, pp_schedule="1f1b")),
    ("llama70b", TrialConfig(tp=4, pp=4, vpp=5, pp_schedule="interleaved")),
    ("llama70b", TrialConfig(tp=8, pp=4, vpp=1, pp_schedule="1f1b", pp_first_layers=18, pp_last_layers=22)),
    ("llama70b", TrialConfig(tp=8, pp=4, vpp=2, pp_schedule="zbv")),
    ("deepseek", TrialConfig()),  # MLA, MTP, uneven last stage (the example's own split)
    ("mixtral", TrialConfig()),
    ("mixtral", TrialConfig(pp=4, vpp=2, pp_schedule="interleaved")),
    ("llama8b", TrialConfig()),  # PP 1: the whole model on one rank
]


@pytest.mark.parametrize("name, knobs", LAYOUTS)
def test_time_counts_the_weights_memory_counts_on_its_rank(name, knobs):
    workload, cluster = example(name)
    cfg = workload.effective(knobs)
    mem = estimate_memory(workload.model, cfg, cluster).breakdown
    rank = int(mem["mem_stage"])
    dense, expert = rank_weights(workload.model, cfg, cluster)[rank]
    # the same terms summed in another order: equal to the last few ulps
    assert dense == pytest.approx(mem["mem_params_dense_count"], rel=1e-12)
    assert expert == pytest.approx(mem["mem_params_expert_count"], rel=1e-12)


def test_a_model_with_biases_sinks_and_tied_weights_is_counted_once_for_both():
    # GPT-OSS: QKV and linear biases, learnable softmax offsets, MoE with a biased router
    model = ModelArch(**model_card("gpt-oss-20b"))
    training = TrainingArgs(seq_length=4096, global_batch_size=256, micro_batch_size=1,
                            pipeline_model_parallel_size=2, expert_model_parallel_size=8)
    workload = Workload(name="gpt-oss", model=model, training=training)
    cluster = ClusterSpec(name="h100", num_nodes=2, gpus_per_node=8, gpu=gpu("h100-sxm"), hbm_capacity_gb=80)
    cfg = workload.effective()
    mem = estimate_memory(model, cfg, cluster).breakdown
    weights = rank_weights(model, cfg, cluster)
    assert weights[int(mem["mem_stage"])] == pytest.approx(
        (mem["mem_params_dense_count"], mem["mem_params_expert_count"]), rel=1e-12)


def test_the_stages_time_runs_are_the_layout_facts_stages():
    # uneven split: 18 + 20 + 20 + 22 decoder layers; time's chunks carry exactly the facts' layers
    workload, cluster = example("llama70b")
    cfg = workload.effective(TrialConfig(tp=8, pp=4, vpp=1, pp_schedule="1f1b", pp_first_layers=18,
                                         pp_last_layers=22))
    facts = layout_facts(workload.model, cfg, cluster.world_size)
    assert [st.layers for st in facts.chunks] == [18, 20, 20, 22]
    assert [(c.dense, c.moe) for c in chunks(workload.model, facts)] == [(st.dense, st.moe) for st in facts.chunks]


def test_one_shape_object_per_model_with_one_vocabulary():
    workload, _ = example("deepseek")
    a = model_shape(workload.model)
    assert a is model_shape(workload.model)
    m = workload.model  # DeepSeek-V3: qk_head_dim 128 + rotary 64, v 128; 256 routed experts, top-8
    assert (a.qk_head_dim, a.qk_pos_dim, a.qk_dim, a.v_head_dim) == (128, 64, 192, 128)
    assert (a.experts, a.topk, a.routed_mean) == (m.num_experts, 8, 8)
    dense, _ = example("llama70b")
    d = model_shape(dense.model)
    assert (d.experts, d.qk_pos_dim, d.qk_dim) == (0, 0, d.head_dim)  # a dense GQA model
