"""A sweep winner megatron-core would reject is a bug: the top MoE layouts of an exhaustive sweep go
through megatron-core 0.16.1's own config validation and flex-dispatcher construction
(`megatron_reference.moe_refusal`). Qwen3-30B-A3B on one node of 8 H100s, FP8, CP pinned to 1 to keep
the sweep small; the sweep still chooses TP, EP, ETP, MBS, recompute modules, dispatcher and backend,
grouped GEMM and EP overlap."""

from __future__ import annotations

import pytest
import yaml

from paratune.oracle.inputs.cluster_file import load_cluster
from paratune.oracle.inputs.workload_file import load_workload
from paratune.oracle.specs import EffectiveConfig
from paratune.planner.search.sweep import sweep

from .conftest import EXAMPLES


def moe_refusal(*args):
    """`megatron_reference.moe_refusal`, imported on first use (it loads megatron-core and torch: seconds)."""
    from .megatron_reference import moe_refusal as refusal

    return refusal(*args)

WORKLOAD = """extends: qwen3-30b-a3b
seq_length: 4096
global_batch_size: 512
micro_batch_size: 1
expert_model_parallel_size: 8
moe_token_dispatcher_type: flex
moe_flex_dispatcher_backend: hybridep
moe_grouped_gemm: true
fp8: hybrid
fp8_recipe: tensorwise
use_distributed_optimizer: true
"""


@pytest.fixture(scope="module")
def winners(tmp_path_factory):
    root = tmp_path_factory.mktemp("q30")
    (root / "w.yaml").write_text(WORKLOAD, encoding="utf-8")
    cluster = yaml.safe_load((EXAMPLES / "clusters" / "h100-8n.yaml").read_text(encoding="utf-8"))
    cluster["target_cluster"]["num_nodes"] = 1
    cluster["search"] = {"fix": {"cp": 1}}
    (root / "c.yaml").write_text(yaml.safe_dump(cluster), encoding="utf-8")
    workload, cluster_spec = load_workload(root / "w.yaml"), load_cluster(root / "c.yaml")
    return workload, [EffectiveConfig(**r.config) for r in sweep(workload, cluster_spec, top_k=10).top]


def test_reference_refuses_what_megatron_core_refuses(winners):
    """The checker can fail: megatron-core itself refuses flex at TP x EP = 1, EP overlap with full
    recompute, and moe_act recompute beside FP8 delayed scaling."""
    workload, top = winners
    cfg = top[0]
    assert "TPxEP" in (moe_refusal(workload.model, cfg.model_copy(update={
        "tp": 1, "ep": 1, "etp": 1, "sequence_parallel": False, "moe_token_dispatcher_type": "flex",
        "moe_flex_dispatcher_backend": "deepep", "overlap_moe_expert_parallel_comm": False}), 8) or "")
    full = cfg.model_copy(update={"overlap_moe_expert_parallel_comm": True, "recompute_granularity": "full",
                                  "recompute_method": "uniform", "recompute_num_layers": 1, "recompute_modules": None})
    assert moe_refusal(workload.model, full, 8) is not None


def test_sweep_winners_pass_megatron_core(winners):
    workload, top = winners
    assert len(top) == 10
    for cfg in top:
        assert moe_refusal(workload.model, cfg, 8) is None, cfg


def test_moe_bias_needs_etp_1_as_megatron_core_says(winners):
    """A MoE model with linear biases runs its experts only at ETP 1: megatron-core's TransformerConfig refuses
    ETP 2 ("Bias in Moe is only supported when ETP==1") and accepts ETP 1, and legality's `etp_moe_bias` agrees
    on both; without biases ETP 2 passes both."""
    from paratune.oracle.legality import legal_axes, validate

    workload, top = winners
    biased = workload.model.model_copy(update={"add_bias_linear": True})
    cluster = load_cluster(EXAMPLES / "clusters" / "h100-8n.yaml").model_copy(update={"num_nodes": 1})
    base = top[0].model_copy(update={"tp": 2, "etp": 2, "ep": 4, "sequence_parallel": True,
                                     "moe_token_dispatcher_type": "alltoall",
                                     "overlap_moe_expert_parallel_comm": False})

    def codes(model, cfg):
        return {v.code for v in validate(model, cfg, cluster)}

    assert "Bias in Moe" in (moe_refusal(biased, base, 8) or "") and "etp_moe_bias" in codes(biased, base)
    etp1 = base.model_copy(update={"etp": 1})
    assert moe_refusal(biased, etp1, 8) is None and "etp_moe_bias" not in codes(biased, etp1)
    assert moe_refusal(workload.model, base, 8) is None and "etp_moe_bias" not in codes(workload.model, base)
    assert legal_axes(biased, cluster, seq_length=4096, gbs=512).etp == [1]
