"""Primus tree lookup (oracle/inputs/primus_tree.py) on the small Primus-shaped fixture tree."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from paratune.oracle.errors import InputError
from paratune.oracle.inputs.primus_tree import (
    PRIMUS_ROOT_ENV,
    extends_chain,
    find_primus_root,
    model_file,
    module_config_chain,
    resolve_model_file,
    resolve_trainer,
)
from paratune.oracle.inputs.yaml_io import read_mapping

TREE = Path(__file__).resolve().parent / "fixtures" / "primus_tree"
EXPERIMENT = TREE / "examples" / "megatron" / "configs" / "MI355X" / "mixtral_8x22B_v0.1-BF16-pretrain.yaml"
MODULES = TREE / "primus" / "configs" / "modules"
MODELS = TREE / "primus" / "configs" / "models" / "megatron"


@pytest.fixture(autouse=True)
def _no_primus_root_env(monkeypatch):
    monkeypatch.delenv(PRIMUS_ROOT_ENV, raising=False)


def _experiment_outside(tmp_path: Path) -> Path:
    exp = tmp_path / "exp" / "mixtral.yaml"
    exp.parent.mkdir(parents=True)
    shutil.copy(EXPERIMENT, exp)
    return exp


def test_root_found_by_walking_up_from_the_experiment():
    assert find_primus_root(EXPERIMENT, None) == TREE


def test_explicit_root_wins_over_env_and_walking_up(tmp_path, monkeypatch):
    other = tmp_path / "other_primus"
    shutil.copytree(TREE / "primus", other / "primus")
    monkeypatch.setenv(PRIMUS_ROOT_ENV, str(TREE))
    assert find_primus_root(EXPERIMENT, str(other)) == other.resolve()


def test_env_root_used_for_an_experiment_outside_the_tree(tmp_path, monkeypatch):
    exp = _experiment_outside(tmp_path)
    assert find_primus_root(exp, None) is None
    monkeypatch.setenv(PRIMUS_ROOT_ENV, str(TREE))
    assert find_primus_root(exp, None) == TREE


def test_a_named_root_that_is_not_a_primus_tree_is_an_error(tmp_path, monkeypatch):
    with pytest.raises(InputError) as err:
        find_primus_root(EXPERIMENT, str(tmp_path))
    assert err.value.key == "--primus-root"
    monkeypatch.setenv(PRIMUS_ROOT_ENV, str(tmp_path))
    with pytest.raises(InputError) as err:
        find_primus_root(EXPERIMENT, None)
    assert err.value.key == PRIMUS_ROOT_ENV


def test_module_chain_in_merge_order():
    chain = module_config_chain(TREE, "pre_trainer.yaml")
    megatron = MODULES / "megatron"
    assert chain == [
        MODULES / "module_base.yaml",
        megatron / "primus_megatron_module.yaml",
        megatron / "primus_turbo.yaml",
        megatron / "trainer_base.yaml",
        megatron / "pre_trainer.yaml",
    ]
    assert module_config_chain(TREE, "pre_trainer") == chain  # PresetLoader appends .yaml


def test_missing_module_config_names_the_key():
    with pytest.raises(InputError) as err:
        module_config_chain(TREE, "pre_trainr.yaml", file=str(EXPERIMENT))
    assert err.value.key == "modules.pre_trainer.config"
    assert err.value.file == str(EXPERIMENT)
    assert "did you mean 'pre_trainer.yaml'" in err.value.message


def test_model_found_in_the_primus_model_folder():
    assert model_file(TREE, "mixtral_8x22B_v0.1.yaml") == MODELS / "mixtral_8x22B_v0.1.yaml"
    assert model_file(TREE, "mixtral_8x22B_v0.1") == MODELS / "mixtral_8x22B_v0.1.yaml"
    assert model_file(TREE, "mixtral_8x7B_v0.1.yaml") is None
    assert model_file(TREE, "../../../../README.md") is None  # leaves primus/configs


def test_missing_model_is_an_input_error_naming_the_key():
    with pytest.raises(InputError) as err:
        resolve_model_file(TREE, "mixtral_8x22B_v01.yaml", experiment=EXPERIMENT)
    assert err.value.key == "modules.pre_trainer.model"
    assert err.value.file == str(EXPERIMENT)
    assert "did you mean 'mixtral_8x22B_v0.1.yaml'" in err.value.message


def test_model_beside_the_experiment_when_no_tree(tmp_path):
    exp = _experiment_outside(tmp_path)
    local = exp.parent / "mixtral_8x22B_v0.1.yaml"
    shutil.copy(MODELS / "mixtral_8x22B_v0.1.yaml", local)
    assert resolve_model_file(None, "mixtral_8x22B_v0.1.yaml", experiment=exp) == local.resolve()
    with pytest.raises(InputError, match="no Primus tree found"):
        resolve_model_file(None, "other.yaml", experiment=exp)


def test_precedence_module_over_model_then_overrides():
    trainer = read_mapping(EXPERIMENT)["modules"]["pre_trainer"]
    resolved = resolve_trainer(EXPERIMENT, trainer, find_primus_root(EXPERIMENT, None))
    args = resolved.args
    assert resolved.model_chain == [
        MODELS / "language_model.yaml", MODELS / "mixtral_base.yaml", MODELS / "mixtral_8x22B_v0.1.yaml",
    ]
    assert args["use_distributed_optimizer"] is True  # pre_trainer.yaml over trainer_base.yaml, and over the model file
    assert resolved.source["use_distributed_optimizer"].endswith("pre_trainer.yaml")
    assert args["accumulate_allreduce_grads_in_fp32"] is False and args["grad_reduce_in_bf16"] is False
    assert args["fp8_param_gather"] is False
    assert args["overlap_grad_reduce"] is True and resolved.source["overlap_grad_reduce"] == "overrides"
    assert args["cross_entropy_fusion_impl"] == "te"  # override over language_model.yaml's "native"
    assert args["moe_token_dispatcher_type"] == "alltoall"  # mixtral_base.yaml over language_model.yaml
    assert args["num_layers"] == 56  # template default
    assert args["global_batch_size"] == 128 and args["trainable"] is True
    assert "extends" not in args


def test_extends_cycle_is_an_input_error(tmp_path):
    (tmp_path / "a.yaml").write_text("extends: b.yaml\nx: 1\n")
    (tmp_path / "b.yaml").write_text("extends: [a.yaml]\ny: 2\n")
    with pytest.raises(InputError, match="cycle"):
        extends_chain(tmp_path / "a.yaml")
    (tmp_path / "c.yaml").write_text("extends: missing.yaml\n")
    with pytest.raises(InputError) as err:
        extends_chain(tmp_path / "c.yaml")
    assert err.value.key == "extends"
