"""Workload and cluster files: both workload forms, templates, extends chains, bad input."""

from __future__ import annotations

import pytest

from paratune.oracle.catalog import gpu_names, model_names
from paratune.oracle.errors import InputError
from paratune.oracle.evaluate import evaluate_simulate
from paratune.oracle.inputs import load_cluster, load_workload
from paratune.oracle.inputs.yaml_io import resolve_templates
from paratune.oracle.specs import TrialConfig

from .conftest import CALIBRATION_DATA, EXAMPLES, example

NATIVE_MIXTRAL = """
extends: mixtral-8x22b
seq_length: 8192
global_batch_size: 128
micro_batch_size: 2
tensor_model_parallel_size: 1
pipeline_model_parallel_size: 4
expert_model_parallel_size: 8
use_distributed_optimizer: true
overlap_grad_reduce: true
overlap_param_gather: true
recompute_granularity: null
cross_entropy_loss_fusion: true
moe_token_dispatcher_type: alltoall
moe_grouped_gemm: true
position_embedding_type: rope  # Primus's mixtral_base.yaml says so; Megatron-LM's default is learned_absolute
"""


def test_catalog_covers_calibration_models_and_gpus():
    import yaml

    cal_models = yaml.safe_load((CALIBRATION_DATA / "models.yaml").read_text())
    cal_gpus = yaml.safe_load((CALIBRATION_DATA / "gpus.yaml").read_text())
    assert set(cal_models) <= set(model_names())
    assert {"mixtral-8x22b", "deepseek-v2-lite", "deepseek-v3"} <= set(model_names())
    assert set(cal_gpus) <= set(gpu_names())
    assert {"a100-40g", "gb200", "mi300a"} <= set(gpu_names())


def test_primus_and_native_forms_resolve_to_the_same_workload(tmp_path):
    primus, cluster = example("mixtral")
    native_file = tmp_path / "mixtral.yaml"
    native_file.write_text(NATIVE_MIXTRAL)
    native = load_workload(native_file)
    card_fields = {"name", "source"}
    assert primus.model.model_dump(exclude=card_fields) == native.model.model_dump(exclude=card_fields)
    assert primus.effective() == native.effective()  # Primus says "block recompute of 0 layers"; native says none
    # ... and therefore identical evaluations
    a = evaluate_simulate(primus, cluster).model_dump()
    b = evaluate_simulate(native, cluster).model_dump()
    assert a == b


def test_templates_take_their_defaults_with_yaml_types():
    data = {"a": "${MBS:2}", "b": "run-${NAME:x}-1", "c": ["${F:true}"], "d": "${EMPTY}"}
    assert resolve_templates(data) == {"a": 2, "b": "run-x-1", "c": [True], "d": None}


def test_primus_extends_chain_is_deep_merged():
    w, _ = example("mixtral")
    # normalization and swiglu come from mixtral_base.yaml, sizes from the child, parallelism from overrides
    assert w.model.normalization == "RMSNorm" and w.model.swiglu and w.model.num_experts == 8
    assert w.model.num_layers == 56 and w.model.hidden_size == 6144
    assert w.training.expert_model_parallel_size == 8 and w.training.micro_batch_size == 2


def test_trial_config_spellings_share_one_canonical_key():
    w, _ = example("llama70b")
    base = w.effective(TrialConfig(vpp=1))
    assert w.effective(TrialConfig(vpp=None, pp_schedule="1f1b")).key != base.key  # workload has vpp 5
    assert w.effective(TrialConfig(vpp=1, pp_schedule="1f1b")).key == base.key
    assert w.effective(TrialConfig(recompute_granularity="none")).key == w.effective(
        TrialConfig(recompute_granularity="null")).key == w.effective().key
    assert w.effective(TrialConfig(fp8=False)).key == w.effective(TrialConfig(fp8="none")).key


@pytest.mark.parametrize(
    "text, key, fragment",
    [
        ("extends: llama3-70b\nseq_length: [1, 2\n", None, "malformed YAML at line 3"),
        ("extends: llama-99b\n", "extends", "known models"),
        ("extends: llama3-70b\ntensor_model_paralel_size: 2\n", "tensor_model_paralel_size", "did you mean"),
        ("extends: llama3-70b\nseq_length: -5\n", "seq_length", "greater than 0"),
        ("extends: llama3-70b\nmicro_batch_size: two\n", "micro_batch_size", "valid integer"),
        ("num_layers: 4\n", "hidden_size", "missing"),
        ("- a\n- b\n", None, "expected a mapping"),
    ],
)
def test_bad_workload_files_name_the_file_and_key(tmp_path, text, key, fragment):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(InputError) as info:
        load_workload(f)
    err = info.value
    assert err.file == str(f)
    assert err.key == key
    assert fragment in str(err)


def test_missing_workload_file():
    with pytest.raises(InputError, match="file not found"):
        load_workload(EXAMPLES / "workloads" / "nope.yaml")


@pytest.mark.parametrize(
    "text, key, fragment",
    [
        ("target_cluster: {num_nodes: 2, gpu_arch: h999}\n", "target_cluster.gpu_arch", "known GPUs"),
        ("target_cluster: {num_nodes: 0, gpu_arch: h100-sxm}\n", "target_cluster.num_nodes", "greater than 0"),
        ("target_cluster: {num_nodes: 2, gpu_arch: h100-sxm}\nhardware: {hbm_gbs: 3}\n", "hardware.hbm_gbs",
         "did you mean 'hbm_gb'"),
        ("target_cluster: {num_nodes: 2, gpu_arch: h100-sxm}\noptimization: {memory_safety_margin: 2}\n",
         "optimization.memory_safety_margin", "less than 1"),
        ("target_cluster: {gpu_arch: h100-sxm}\n", "target_cluster.num_nodes", "missing"),
    ],
)
def test_bad_cluster_files_name_the_file_and_key(tmp_path, text, key, fragment):
    f = tmp_path / "cluster.yaml"
    f.write_text(text)
    with pytest.raises(InputError) as info:
        load_cluster(f)
    assert info.value.file == str(f) and info.value.key == key
    assert fragment in str(info.value)


def test_hardware_block_overrides_catalog_figures(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("target_cluster: {num_nodes: 2, gpu_arch: h100-sxm}\nhardware: {inter_node_gb_s: 25}\n")
    c = load_cluster(f)
    assert c.gpu.inter_node_gb_s == 25 and c.gpu.bf16_tflops == 989.4
    assert c.world_size == 16 and c.hbm_capacity_gb == 80


def test_values_megatron_accepts_are_read_as_it_reads_them(tmp_path):
    """megatron/training/arguments.py (core_v0.16.1): `moe_freq_type` reads "N" as the int N, and
    validate_args reads the deprecated cuda_graph_scope "full" as the empty scope (whole layer)."""
    f = tmp_path / "w.yaml"
    f.write_text("extends: mixtral-8x7b\nmoe_layer_freq: '1'\ncuda_graph_scope: full\nrecompute_layer_ids: '0,3'\n")
    w = load_workload(f)
    assert w.model.moe_layer_freq == 1 and w.training.cuda_graph_scope is None
    assert any("cuda_graph_scope 'full' is deprecated" in n for n in w.notes)
    # Primus's argument, read as Primus's validator reads "0,3" (tests/test_recompute_layer_ids.py models it)
    assert w.training.recompute_layer_ids == (0, 3) and "recompute_layer_ids" not in w.not_modelled


def test_the_clusters_stack_decides_and_a_disagreeing_workload_names_both_files(tmp_path):
    f = tmp_path / "w.yaml"
    f.write_text("extends: mixtral-8x7b\n")
    bridge = load_workload(f, stack="megatron-bridge", stack_from="c.yaml")
    assert bridge.stack == "megatron-bridge" and bridge.training.grad_reduce_in_fp32 is False
    assert bridge.training.moe_grouped_gemm is True  # Bridge's MoE recipes run grouped GEMM
    f.write_text("extends: mixtral-8x7b\nstack: megatron-lm\n")
    with pytest.raises(InputError, match="says megatron-lm, but c.yaml runs megatron-bridge") as info:
        load_workload(f, stack="megatron-bridge", stack_from="c.yaml")
    assert info.value.file == str(f) and info.value.key == "stack"


MINIMAL_FLAGS = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --global-batch-size 8 --bf16"


@pytest.mark.parametrize(("text", "key", "fragment"), [
    (MINIMAL_FLAGS.replace("--num-layers 2", "--num-layers $NL"), "--num-layers", "shell variable"),
    (MINIMAL_FLAGS.replace(" --global-batch-size 8", ""), "--global-batch-size", "missing"),
    (f"torchrun pretrain_gpt.py {MINIMAL_FLAGS}\ntorchrun pretrain_gpt.py {MINIMAL_FLAGS}", None, r"2 pretrain_\*\.py"),
    (f"{MINIMAL_FLAGS} --num-layers", "--num-layers", "expects one value"),
])
def test_megatron_flags_file_refusals_name_the_flag_and_file(tmp_path, text, key, fragment):
    """What a Megatron-LM flags file cannot give the projection is refused naming the flag (oracle/inputs/
    megatron_flags.py): a shell variable on a modelled flag, no global batch, more than one training run."""
    path = tmp_path / "run.sh"
    path.write_text(text + "\n")
    with pytest.raises(InputError, match=fragment) as refused:
        load_workload(path)
    assert refused.value.file == str(path) and refused.value.key == key


def test_megatron_flags_file_states_its_stack(tmp_path):
    """A flags file is Megatron-LM's (by its form, whatever its name: here no suffix, first word a flag): on a
    Primus cluster it is an error naming both; a shell variable on an argument paratune does not read is kept."""
    path = tmp_path / "flags"
    path.write_text(f"# my run\n{MINIMAL_FLAGS} \\\n  --data-path $DATA --lr 1e-4\n")
    workload = load_workload(path)
    assert workload.stack == "megatron-lm" and workload.model.num_layers == 2
    assert workload.not_modelled == ("data_path", "lr")
    assert any("--vocab-size" in n for n in workload.notes)
    with pytest.raises(InputError, match="runs primus") as refused:
        load_workload(path, stack="primus", stack_from="mi355x-4n.yaml")
    assert refused.value.key == "stack" and "mi355x-4n.yaml" in str(refused.value)
