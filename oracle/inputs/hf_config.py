"""A Hugging Face `config.json` read as a model card in Megatron argument names.

The field names are the `transformers` config classes' (LlamaConfig, MistralConfig, MixtralConfig,
Qwen2Config, Qwen3Config, Qwen3MoeConfig, DeepseekV2Config / DeepseekV3Config); each maps to the
Megatron argument Megatron-Bridge's converters fill from it (`src/megatron/bridge/models/*/`
`*_bridge.py`). What the oracle cannot express is refused with the field that asks for it, never
guessed: sliding-window or chunked attention, attention sinks, model types it does not know.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import InputError

DENSE = {"llama", "mistral", "qwen2", "qwen3"}
MOE = {"mixtral", "qwen3_moe", "qwen2_moe"}
MLA = {"deepseek_v2", "deepseek_v3"}
# Fields that name an attention or layer type the oracle does not model (GPT-OSS, Llama 4, Gemma).
UNMODELLED = ("layer_types", "attention_chunk_size", "sliding_window_pattern", "no_rope_layers")


def is_hf_config(path: Path) -> bool:
    """A `config.json`, or a folder holding one."""
    return path.name == "config.json" or (path.is_dir() and (path / "config.json").is_file())


def hf_card(path: Path) -> dict[str, Any]:
    """The model card (Megatron names) of a Hugging Face config file or folder."""
    file = path / "config.json" if path.is_dir() else path
    try:
        cfg = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read it as JSON ({exc})", file=str(file)) from None
    kind = cfg.get("model_type")

    def need(key: str) -> Any:
        if cfg.get(key) is None:
            raise InputError(f"missing {key} (needed for a {kind} model)", file=str(file), key=key)
        return cfg[key]

    if kind not in DENSE | MOE | MLA:
        known = ", ".join(sorted(DENSE | MOE | MLA))
        raise InputError(f"model_type {kind!r} is not one paratune reads (it reads {known}); write the card "
                         "in Megatron argument names instead", file=str(file), key="model_type")
    for key in UNMODELLED:
        if cfg.get(key) and not (key == "layer_types" and set(cfg[key]) <= {"full_attention"}):
            raise InputError(f"{key} asks for an attention or layer type the oracle does not model", file=str(file),
                             key=key)
    if cfg.get("sliding_window") and cfg.get("use_sliding_window", True):
        raise InputError("sliding-window attention is not modelled", file=str(file), key="sliding_window")
    heads = need("num_attention_heads")
    card: dict[str, Any] = {
        "name": cfg.get("_name_or_path") or file.parent.name,
        "source": f"Hugging Face config.json ({file})",
        "num_layers": need("num_hidden_layers"), "hidden_size": need("hidden_size"), "num_attention_heads": heads,
        "ffn_hidden_size": need("intermediate_size"), "vocab_size": need("vocab_size"),
        "num_query_groups": cfg.get("num_key_value_heads") or heads,
        "swiglu": cfg.get("hidden_act", "silu") == "silu", "normalization": "RMSNorm", "add_bias_linear": False,
        "untie_embeddings_and_output_weights": not cfg.get("tie_word_embeddings", False),
    }
    if cfg.get("head_dim"):
        card["kv_channels"] = cfg["head_dim"]
    if kind == "mixtral":
        card |= {"num_experts": need("num_local_experts"), "moe_router_topk": need("num_experts_per_tok"),
                 "moe_ffn_hidden_size": card["ffn_hidden_size"]}
    elif kind in ("qwen3_moe", "qwen2_moe"):
        card |= _qwen_moe(cfg, need, card["num_layers"])
    elif kind in MLA:
        card |= _deepseek(cfg, need, card["num_layers"])
    return card


def _qwen_moe(cfg: dict, need: Any, layers: int) -> dict[str, Any]:
    """Qwen MoE: experts every `decoder_sparse_step` layers except `mlp_only_layers`; Qwen2-MoE's shared
    expert (`shared_expert_intermediate_size`)."""
    step, dense_only = cfg.get("decoder_sparse_step", 1), set(cfg.get("mlp_only_layers") or [])
    pattern = [int(i not in dense_only and (i + 1) % step == 0) for i in range(layers)]
    out = {"num_experts": need("num_experts"), "moe_router_topk": need("num_experts_per_tok"),
           "moe_ffn_hidden_size": need("moe_intermediate_size"), "moe_layer_freq": pattern if 0 in pattern else 1}
    if cfg.get("shared_expert_intermediate_size"):
        out["moe_shared_expert_intermediate_size"] = cfg["shared_expert_intermediate_size"]
    return out


def _deepseek(cfg: dict, need: Any, layers: int) -> dict[str, Any]:
    """DeepSeek-V2/V3: MLA, `first_k_dense_replace` dense layers, then MoE every `moe_layer_freq` layers
    with `n_shared_experts` shared experts; V3's multi-token prediction (`num_nextn_predict_layers`)."""
    first, freq = cfg.get("first_k_dense_replace", 0), cfg.get("moe_layer_freq", 1)
    pattern = [int(i >= first and i % freq == 0) for i in range(layers)]
    moe_ffn = need("moe_intermediate_size")
    out = {"multi_latent_attention": True, "q_lora_rank": cfg.get("q_lora_rank"), "kv_lora_rank": need("kv_lora_rank"),
           "qk_head_dim": need("qk_nope_head_dim"), "qk_pos_emb_head_dim": need("qk_rope_head_dim"),
           "v_head_dim": need("v_head_dim"), "num_experts": need("n_routed_experts"),
           "moe_router_topk": need("num_experts_per_tok"), "moe_ffn_hidden_size": moe_ffn,
           "moe_layer_freq": pattern if 0 in pattern else 1, "mtp_num_layers": cfg.get("num_nextn_predict_layers", 0)}
    if cfg.get("n_shared_experts"):
        out["moe_shared_expert_intermediate_size"] = cfg["n_shared_experts"] * moe_ffn
    return out
