"""A Hugging Face config.json is a model card: one model of each family the reader covers, with the
parameter count the oracle derives checked against the one the model's authors publish (within
0.5 %), and what the oracle cannot express refused with the field that asks for it.

Fixtures (tests/fixtures/hf/*/config.json) are the published configs' fields: meta-llama/Meta-Llama-3-8B,
mistralai/Mixtral-8x7B-v0.1, Qwen/Qwen2.5-7B, Qwen/Qwen2.5-72B, Qwen/Qwen3-8B, Qwen/Qwen3-32B,
Qwen/Qwen3-30B-A3B, deepseek-ai/DeepSeek-V2, deepseek-ai/DeepSeek-V3, mistralai/Mistral-7B-v0.1
(Hugging Face Hub)."""

from __future__ import annotations

import json
import subprocess

import pytest

from oracle.catalog import model_card
from oracle.errors import InputError
from oracle.inputs import load_workload
from oracle.memory.geometry import geometry
from oracle.memory.params import edge_params, layer_params
from oracle.specs import ModelArch

from .conftest import EXAMPLES
from .test_server_common import PARATUNE

HF = EXAMPLES.parent / "tests" / "fixtures" / "hf"
# Published totals: Meta's Llama 3 model card (8.03B), Mistral's Mixtral announcement (46.7B), the Qwen
# model cards (Qwen2.5-7B 7.61B, Qwen2.5-72B 72.7B, Qwen3-8B 8.2B, Qwen3-32B 32.8B, Qwen3-30B-A3B 30.5B),
# DeepSeek-V2's README (236B) and DeepSeek-V3's (671B main model, 14B MTP apart).
PUBLISHED = {"llama-3-8b": 8.03e9, "mixtral-8x7b": 46.7e9, "qwen2.5-7b": 7.61e9, "qwen2.5-72b": 72.7e9,
             "qwen3-8b": 8.2e9, "qwen3-32b": 32.8e9, "qwen3-30b-a3b": 30.5e9, "deepseek-v2": 236e9,
             "deepseek-v3": 671e9}
CATALOG = {"qwen2.5-7b": "qwen2.5-7b", "qwen2.5-72b": "qwen2.5-72b", "qwen3-8b": "qwen3-8b", "qwen3-32b": "qwen3-32b",
           "deepseek-v2": "deepseek-v2", "deepseek-v3": "deepseek-v3", "qwen3-30b-a3b": "qwen3-30b-a3b"}


def _total_params(model) -> float:
    """All weights at TP = EP = 1, from the oracle's own per-layer and edge counts (MTP left out)."""
    g = geometry(model)
    dense, moe = layer_params(g, 1, 1, 1)
    layers = sum(moe.dense + moe.expert if is_moe else dense.dense for is_moe in model.moe_layer_pattern)
    edge = edge_params(g, 1, 1, 1, 1, 4096)
    return layers + edge.embedding + edge.output + edge.final_norm


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_a_config_json_folder_is_a_workload_with_the_published_parameter_count(name):
    w = load_workload(HF / name)
    assert _total_params(w.model) == pytest.approx(PUBLISHED[name], rel=0.005)


@pytest.mark.parametrize("fixture", sorted(CATALOG))
def test_catalog_cards_count_what_their_hf_configs_count(fixture):
    card = ModelArch(**model_card(CATALOG[fixture]))
    assert _total_params(card) == pytest.approx(_total_params(load_workload(HF / fixture).model), rel=1e-9)


def test_families_map_to_megatrons_names():
    ds = load_workload(HF / "deepseek-v3" / "config.json").model
    assert ds.multi_latent_attention and (ds.q_lora_rank, ds.kv_lora_rank, ds.qk_head_dim, ds.qk_pos_emb_head_dim) == (
        1536, 512, 128, 64)
    assert ds.moe_layer_pattern[:4] == (0, 0, 0, 1) and ds.moe_shared_expert_intermediate_size == 2048
    assert ds.mtp_num_layers == 1 and ds.num_experts == 256 and ds.moe_router_topk == 8
    q = load_workload(HF / "qwen3-30b-a3b").model
    assert (q.num_experts, q.moe_ffn_hidden_size, q.kv_channels, q.num_query_groups) == (128, 768, 128, 4)


def test_what_the_oracle_cannot_express_is_refused_naming_the_field(tmp_path):
    with pytest.raises(InputError) as err:
        load_workload(HF / "mistral-7b-v0.1")
    assert err.value.key == "sliding_window"
    cfg = json.loads((HF / "llama-3-8b" / "config.json").read_text())
    for key, value, kind in (("layer_types", ["sliding_attention", "full_attention"], "llama"),
                             ("model_type", "gpt_oss", "gpt_oss"), ("attention_chunk_size", 8192, "llama")):
        folder = tmp_path / key
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({**cfg, "model_type": kind, key: value}))
        with pytest.raises(InputError) as err:
            load_workload(folder)
        assert err.value.key == key


def test_the_cli_projects_a_config_json_folder():
    proc = subprocess.run([PARATUNE, "project", "memory", "--workload", str(HF / "qwen3-30b-a3b"), "--target-cluster",
                           str(EXAMPLES / "clusters" / "h100-8n.yaml"), "--json", "--set", "ep=8"],
                          capture_output=True, text=True, timeout=120, check=True)
    result = json.loads(proc.stdout)
    assert result["legal"] and result["memory_per_gpu_gb"] > 0
