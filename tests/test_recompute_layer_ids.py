"""Primus's `recompute_layer_ids` modelled: exactly the listed global layers recompute, each alone.

Source: AMD-AGI/Primus fd1eeab primus/backends/megatron/patches/recompute_layer_patches.py (the wrapped
`TransformerBlock._checkpointed_forward` checkpoints block layer i with `custom(i, i + 1)` iff
`i + layer_offset` is listed; `validate_specified_recompute_layers` needs recompute_granularity full and
recompute_method null, and ids within decoder layers + MTP depths). Expected values are hand derivations
written in each test: which layers of which chunk a list names, and Megatron's block method on the same
layers (megatron-core 0.16.1 transformer_block.py: block with recompute_num_layers 1 checkpoints the first
layer of each chunk, alone)."""

from __future__ import annotations

import pytest
import yaml

from paratune.oracle.errors import InputError
from paratune.oracle.evaluate import evaluate_simulate
from paratune.oracle.inputs import load_cluster, load_workload
from paratune.oracle.layout import layout_facts
from paratune.oracle.performance.pipeline import chunks
from paratune.oracle.specs import TrialConfig

from .conftest import EXAMPLES
from .stack_snapshots import artifact, snapshot

CLUSTER = EXAMPLES / "clusters" / "mi300x-1n.yaml"


def _llama8b(tmp_path, **extra):
    """Llama 3 8B (32 dense layers) on 8 GPUs, PP 2: chunks of layers 0-15 and 16-31."""
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump({"extends": "llama3-8b", "seq_length": 8192, "global_batch_size": 64,
                                    "micro_batch_size": 1, "pipeline_model_parallel_size": 2,
                                    "recompute_granularity": "full", **extra}))
    return load_workload(path), load_cluster(CLUSTER)


def test_the_listed_layers_recompute_in_their_chunks(tmp_path):
    """ids 0, 5 | 17, 18, 19 over chunks 0-15 | 16-31: 2 layers redone in the first chunk, 3 in the second."""
    w, c = _llama8b(tmp_path, recompute_layer_ids="19,0,5,17,18")
    cfg = w.effective()
    assert (cfg.recompute_layer_ids, cfg.recompute_method, cfg.recompute_num_layers) == ((0, 5, 17, 18, 19), None,
                                                                                         None)
    stages = chunks(w.model, layout_facts(w.model, cfg, c.world_size))
    assert [(s.recompute_dense, s.recompute_moe) for s in stages] == [(2, 0), (3, 0)]


def test_one_listed_first_layer_per_chunk_is_megatrons_block_of_one(tmp_path):
    """ids 0 and 16 are the first layer of each chunk, each checkpointed alone: exactly what Megatron's block
    method with recompute_num_layers 1 recomputes, so memory and time agree; uniform recompute (every layer)
    keeps less and runs longer."""
    w, c = _llama8b(tmp_path, recompute_layer_ids=[0, 16])
    by_ids = evaluate_simulate(w, c, TrialConfig())
    block = evaluate_simulate(w, c, TrialConfig(recompute_granularity="full", recompute_method="block",
                                                recompute_num_layers=1))
    plain, _ = _llama8b(tmp_path)
    uniform = evaluate_simulate(plain, c, TrialConfig())
    assert by_ids.legal and block.legal and uniform.legal
    assert by_ids.memory_per_gpu_gb == block.memory_per_gpu_gb and by_ids.iteration_ms == block.iteration_ms
    assert by_ids.memory_per_gpu_gb > uniform.memory_per_gpu_gb and by_ids.iteration_ms < uniform.iteration_ms


def test_more_listed_layers_keep_less_and_take_longer(tmp_path):
    """Adding ids only moves layers from kept-whole to recomputed: memory falls, time rises."""
    w1, c = _llama8b(tmp_path, recompute_layer_ids=[0, 16])
    few = evaluate_simulate(w1, c, TrialConfig())
    w2, _ = _llama8b(tmp_path, recompute_layer_ids=list(range(0, 32, 2)))
    many = evaluate_simulate(w2, c, TrialConfig())
    assert many.memory_per_gpu_gb < few.memory_per_gpu_gb and many.iteration_ms > few.iteration_ms


def test_primus_rules_on_the_ids(tmp_path):
    """validate_specified_recompute_layers: full granularity only; ids within the layers (32 here, no MTP)."""
    w, c = _llama8b(tmp_path, recompute_layer_ids=[0, 16])
    selective = evaluate_simulate(w, c, TrialConfig(recompute_granularity="selective"))
    assert "recompute_layer_ids_full" in {v.code for v in selective.violations}
    w, c = _llama8b(tmp_path, recompute_layer_ids=[0, 32])
    assert "recompute_layer_ids_range" in {v.code for v in evaluate_simulate(w, c, TrialConfig()).violations}


def test_the_published_deepseek_v3_ids_are_modelled(monkeypatch):
    """Primus's DeepSeek-V3 MI355X experiment sets 21 ids under full recompute: read as the layout's, not
    listed as not modelled."""
    root = snapshot("primus")
    path = root / "examples" / "megatron" / "configs" / "MI355X" / "deepseek_v3-BF16-pretrain.yaml"
    written = yaml.safe_load(path.read_text())["modules"]["pre_trainer"]["overrides"]["recompute_layer_ids"]
    w = load_workload(path, primus_root=str(root))
    assert w.effective().recompute_layer_ids == tuple(sorted(int(x) for x in written.split(","))), artifact(
        "primus", path)
    assert "recompute_layer_ids" not in w.not_modelled


@pytest.mark.parametrize("bad", ["", []])
def test_an_empty_list_is_refused(tmp_path, bad):
    with pytest.raises(InputError, match="recompute_layer_ids"):
        _llama8b(tmp_path, recompute_layer_ids=bad)
