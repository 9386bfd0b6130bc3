"""A Hugging Face config.json is a model card: one model of each family the reader covers, with the
parameter count the oracle derives checked against the one the model's authors publish (within
0.5 %), and what the oracle cannot express refused with the field that asks for it.

Fixtures (tests/fixtures/hf/*/config.json) are the published configs' fields: meta-llama/Meta-Llama-3-8B,
mistralai/Mixtral-8x7B-v0.1, Qwen/Qwen2.5-7B, Qwen/Qwen2.5-72B, Qwen/Qwen3-8B, Qwen/Qwen3-32B,
Qwen/Qwen3-30B-A3B, deepseek-ai/DeepSeek-V2, deepseek-ai/DeepSeek-V3, mistralai/Mistral-7B-v0.1,
openai/gpt-oss-20b, openai/gpt-oss-120b, meta-llama/Llama-4-Scout-17B-16E, meta-llama/Llama-4-Maverick-17B-128E,
moonshotai/Kimi-K2-Instruct (Hugging Face Hub); nemotron-4-340b is written in NemotronConfig's field names
from the Nemotron-4 340B Technical Report (arXiv 2406.11704) Table 1 and its NeMo model_config.yaml."""

from __future__ import annotations

import json
import subprocess
from fractions import Fraction

import pytest

from paratune.oracle.catalog import model_card
from paratune.oracle.errors import InputError
from paratune.oracle.inputs import load_cluster, load_workload
from paratune.oracle.model_shape import model_shape
from paratune.oracle.param_count import edge_params, layer_params
from paratune.oracle.performance.calibration import constants
from paratune.oracle.performance.flops import attended_keys, model_flops_per_token, span_keys
from paratune.oracle.performance.simulate import simulate
from paratune.oracle.specs import ModelArch

from .conftest import EXAMPLES
from .test_server_common import PARATUNE

HF = EXAMPLES.parent / "tests" / "fixtures" / "hf"
# Published totals: Meta's Llama 3 model card (8.03B), Mistral's Mixtral announcement (46.7B), the Qwen
# model cards (Qwen2.5-7B 7.61B, Qwen2.5-72B 72.7B, Qwen3-8B 8.2B, Qwen3-32B 32.8B, Qwen3-30B-A3B 30.5B),
# DeepSeek-V2's README (236B) and DeepSeek-V3's (671B main model, 14B MTP apart), the gpt-oss model card
# (arXiv 2508.10925) Table 1 (20.91B, 116.83B), Meta's Llama 4 model card (Maverick 400B total; Scout's
# 109B counts its vision tower, which the card leaves out: see the hand count below), the Nemotron-4
# 340B report (9.4B embedding + 331.6B non-embedding).
PUBLISHED = {"llama-3-8b": 8.03e9, "mixtral-8x7b": 46.7e9, "qwen2.5-7b": 7.61e9, "qwen2.5-72b": 72.7e9,
             "qwen3-8b": 8.2e9, "qwen3-32b": 32.8e9, "qwen3-30b-a3b": 30.5e9, "deepseek-v2": 236e9,
             "deepseek-v3": 671e9, "gpt-oss-20b": 20.91e9, "gpt-oss-120b": 116.83e9,
             "llama-4-maverick-17b-128e": 400e9, "nemotron-4-340b": 341.0e9}
CATALOG = {"qwen2.5-7b": "qwen2.5-7b", "qwen2.5-72b": "qwen2.5-72b", "qwen3-8b": "qwen3-8b", "qwen3-32b": "qwen3-32b",
           "deepseek-v2": "deepseek-v2", "deepseek-v3": "deepseek-v3", "qwen3-30b-a3b": "qwen3-30b-a3b",
           "gpt-oss-20b": "gpt-oss-20b", "gpt-oss-120b": "gpt-oss-120b",
           "llama-4-scout-17b-16e": "llama4-scout-17b-16e",
           "llama-4-maverick-17b-128e": "llama4-maverick-17b-128e", "kimi-k2": "kimi-k2",
           "nemotron-4-340b": "nemotron-4-340b"}


def _total_params(model) -> float:
    """All weights at TP = EP = 1, from the oracle's own per-layer and edge counts (MTP left out)."""
    g = model_shape(model)
    dense, moe = layer_params(g, 1, 1, 1)
    layers = sum(moe.dense + moe.expert if is_moe else dense.dense for is_moe in model.moe_layer_pattern)
    edge = edge_params(g, 1, 1, 1, False, 4096)
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


def _hand_count(layers: int, dense: int, h: int, heads: int, groups: int, head_dim: int, ffn: int, experts: int,
                expert_ffn: int, shared_ffn: int, vocab: int, padded: int) -> int:
    """A SwiGLU GQA decoder counted from its architecture table: attention (Q, K, V, O), gated MLPs
    (3 matrices), router, two RMSNorms a layer plus the final one, untied embedding and output
    (Megatron pads the vocabulary to a multiple of 128)."""
    attention = h * head_dim * (2 * heads + 2 * groups)
    moe = experts * 3 * h * expert_ffn + 3 * h * shared_ffn + experts * h
    return (layers * (attention + 2 * h) + dense * 3 * h * ffn + (layers - dense) * moe + h + 2 * padded * h)


def test_llama4_scout_and_kimi_k2_match_their_architecture_tables():
    # Llama 4 Scout (Meta's model card: 48 layers, 16 experts + 1 shared of 8192, h 5120, 40/8 heads of 128,
    # vocabulary 202,048 padded to 202,112): the text decoder is 107.77B of the published 109B total.
    scout = _total_params(load_workload(HF / "llama-4-scout-17b-16e").model)
    assert scout == _hand_count(48, 0, 5120, 40, 8, 128, 16384, 16, 8192, 8192, 202048, 202112)
    assert 107.7e9 < scout < 109e9
    # Kimi-K2 (its model card's table: 61 layers, 1 dense of 18432, 384 experts of 2048 + 1 shared, MLA
    # with 64 heads, q_lora 1536, kv_lora 512, qk 128 + rope 64, v 128, vocabulary 163,840): MLA attention
    # counted by hand per layer; the card's "1T total" is a rounded figure.
    h, heads = 7168, 64
    mla = (h * 1536 + 1536 + 1536 * heads * 192 + h * (512 + 64) + 512 + 512 * heads * (128 + 128) + heads * 128 * h)
    moe = 384 * 3 * h * 2048 + 3 * h * 2048 + 384 * h
    kimi = 61 * (mla + 2 * h) + 3 * h * 18432 + 60 * moe + h + 2 * 163840 * h
    assert _total_params(load_workload(HF / "kimi-k2").model) == kimi
    assert 0.95e12 < kimi < 1.05e12


def test_windows_and_nope_layers_sit_where_megatron_core_puts_them():
    """megatron-core 0.16.1 decides per layer (`is_layer_window_attention`, `TransformerConfig.no_rope_freq`)."""
    from megatron.core.transformer.transformer_config import TransformerConfig
    from megatron.core.transformer.utils import is_layer_window_attention

    for card in (load_workload(HF / "gpt-oss-20b").model, ModelArch(**model_card("gpt-oss-20b"))):
        windowed = [is_layer_window_attention(card.window_size, card.window_attn_skip_freq, n)
                    for n in range(1, card.num_layers + 1)]
        assert [s > 0 for s in card.attention_spans] == windowed and windowed[:2] == [True, False]
        assert set(card.attention_spans) == {0, 128}  # window (127, 0): the query and 127 keys before it
    scout = load_workload(HF / "llama-4-scout-17b-16e").model
    nope = TransformerConfig(num_layers=48, hidden_size=64, num_attention_heads=4, no_rope_freq=scout.no_rope_freq)
    assert [not r for r in scout.rope_layers] == [bool(x) for x in nope.no_rope_freq]
    assert [s < 0 for s in scout.attention_spans] == list(scout.rope_layers)  # chunks on the RoPE layers


def test_attended_keys_count_what_each_query_sees():
    # by hand, 10 tokens: a 4-key window sees 1,2,3,4,4,...,4 keys (34 in all); chunks of 4 see 1,2,3,4,1,2,3,4,1,2 (23)
    assert span_keys(4, 10) == pytest.approx(3.4) and span_keys(-4, 10) == pytest.approx(2.3)
    assert span_keys(0, 10) == span_keys(64, 10) == span_keys(-64, 10) == 5.0  # full: the half square
    assert attended_keys(((0, 1), (4, 1)), 10) == pytest.approx((5.0 + 3.4) / 2)


def test_a_sliding_window_lowers_attention_flops_and_time_by_the_keys_it_skips(tmp_path):
    w = load_workload(HF / "gpt-oss-20b")
    assert w.model.attention_spans[:2] == (128, 0)  # computed before the copy: the copy must not keep them
    full = w.model.model_copy(update={"window_size": None, "window_attn_skip_freq": None})
    assert set(full.attention_spans) == {0}
    s, heads, width = 4096, 64, 64 + 64
    windowed_keys = Fraction(128) - Fraction(128 * 127, 2 * s)  # span_keys by hand: 126.015625
    saved = 12 * (Fraction(s, 2) - windowed_keys)  # 12 of 24 layers windowed
    # FLOPs/token: fwd+bwd = 3 x forward; forward core attention = 2 · keys · heads · (dqk + dv)
    assert model_flops_per_token(full, s) - model_flops_per_token(w.model, s) == pytest.approx(
        float(3 * 2 * saved * heads * width), rel=1e-9)
    cluster = load_cluster(EXAMPLES / "clusters" / "h100-8n.yaml")
    cfg = w.training.model_copy(update={"tensor_model_parallel_size": 1, "expert_model_parallel_size": 8,
                                        "seq_length": s, "micro_batch_size": 1, "global_batch_size": 64})
    eff = w.model_copy(update={"training": cfg}).effective()
    a, b = simulate(w.model, eff, cluster), simulate(full, eff, cluster)
    m = eff.gbs // (eff.mbs * cluster.world_size)  # micro-batches per rank (TP = PP = CP = 1)
    c = constants(cluster.gpu)
    rate = cluster.gpu.bf16_tflops * 1e9 * c.attn_eff  # flops per ms
    scores_saved = float(1 * heads * s * (Fraction(s, 2) - windowed_keys))  # one micro-batch, one layer
    per_layer_saved = 2 * scores_saved * width
    # H100's special function units: 989 TFLOPS of matmul against 3.9 TFLOPS of exponentials (FlashAttention-3
    # §3.1), 256 FLOPs per exponential; one exponential per score forward and one in the backward's recompute
    exp_ms = 256 / (cluster.gpu.bf16_tflops * 1e9)
    expected = m * 12 * ((1 + 2.5) * per_layer_saved / rate + 2 * scores_saved * exp_ms)  # flash backward 2.5 x
    assert b.breakdown["attention"] - a.breakdown["attention"] == pytest.approx(expected, rel=1e-6)


def test_what_the_oracle_cannot_express_is_refused_naming_the_field(tmp_path):
    mistral = load_workload(HF / "mistral-7b-v0.1").model  # Mistral 7B v0.1: a 4,096-token window on every layer
    assert mistral.window_size == (4095, 0) and mistral.window_attn_skip_freq is None
    cfg = json.loads((HF / "llama-3-8b" / "config.json").read_text())
    for key, value, kind in (("layer_types", ["linear_attention"] * 32, "llama"),
                             ("model_type", "nemotron_h", "nemotron_h"),
                             ("attention_chunk_size", 8192, "llama"), ("sliding_window_pattern", 6, "llama")):
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
