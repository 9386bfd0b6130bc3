"""A Hugging Face `config.json` read as a model card in Megatron argument names.

The field names are the `transformers` config classes' (LlamaConfig, MistralConfig, MixtralConfig,
Qwen2Config, Qwen3Config, Qwen3MoeConfig, DeepseekV2Config / DeepseekV3Config, GptOssConfig,
Llama4TextConfig, NemotronConfig, and Kimi-K2's DeepSeek-V3 layout); each maps to the Megatron argument
Megatron-Bridge's converters fill from it (`src/megatron/bridge/models/*/*_bridge.py` at 067f987). What the oracle
cannot express is refused with the field that asks for it, never guessed: layer types other than full,
sliding-window and chunked attention, hybrid (Mamba) models, model types it does not know.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import InputError
from .read_guard import read_text

ATTENTION_TYPES = {"full_attention", "sliding_attention", "chunked_attention"}
# A field that asks for a layer the oracle does not model (Gemma's local/global pattern).
UNMODELLED = ("sliding_window_pattern",)


def is_hf_config(path: Path) -> bool:
    """A `config.json`, or a folder holding one."""
    return path.name == "config.json" or (path.is_dir() and (path / "config.json").is_file())


def hf_card(path: Path) -> dict[str, Any]:
    """The model card (Megatron names) of a Hugging Face config file or folder."""
    file = path / "config.json" if path.is_dir() else path
    try:
        cfg = json.loads(read_text(file))
    except (RecursionError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read it as JSON ({exc})", file=str(file)) from None
    if not isinstance(cfg, dict):
        raise InputError("expected a JSON object of config fields", file=str(file))
    kind = cfg.get("model_type")
    if kind not in KNOWN:
        raise InputError(f"model_type {kind!r} is not one paratune reads (it reads {', '.join(sorted(KNOWN))}); "
                         "write the card in Megatron argument names instead", file=str(file), key="model_type")
    notes = ""
    if kind == "llama4":  # Llama4ForConditionalGeneration: the text decoder is what Megatron trains here
        if not isinstance(cfg.get("text_config"), dict):
            raise InputError("missing text_config (needed for a llama4 model)", file=str(file), key="text_config")
        cfg, kind = {**cfg["text_config"], "_name_or_path": cfg.get("_name_or_path")}, "llama4_text"
        notes = "; text decoder only (vision_config not modelled)"

    def need(key: str) -> Any:
        if cfg.get(key) is None:
            raise InputError(f"missing {key} (needed for a {kind} model)", file=str(file), key=key)
        return cfg[key]

    for key in UNMODELLED:
        if cfg.get(key):
            raise InputError(f"{key} asks for a layer type the oracle does not model", file=str(file), key=key)
    heads, layers = need("num_attention_heads"), need("num_hidden_layers")
    rope = (cfg.get("rope_scaling") or {}).get("rope_type") or (cfg.get("rope_scaling") or {}).get("type")
    card: dict[str, Any] = {
        "name": cfg.get("_name_or_path") or file.parent.name,
        "source": f"Hugging Face config.json ({file}){notes}",
        "num_layers": layers, "hidden_size": need("hidden_size"), "num_attention_heads": heads,
        "ffn_hidden_size": need("intermediate_size"), "vocab_size": need("vocab_size"),
        "num_query_groups": cfg.get("num_key_value_heads") or heads,
        "swiglu": cfg.get("hidden_act", "silu") == "silu", "normalization": "RMSNorm", "add_bias_linear": False,
        "untie_embeddings_and_output_weights": not cfg.get("tie_word_embeddings", False),
        "position_embedding_type": "yarn" if rope == "yarn" else "rope",
        "hidden_dropout": float(cfg.get("attention_dropout") or 0.0),
    }
    if cfg.get("head_dim"):
        card["kv_channels"] = cfg["head_dim"]
    card |= _attention_pattern(cfg, kind, layers, file)
    if kind in FAMILY:
        card |= FAMILY[kind](cfg, need, layers)
    return card


def _attention_pattern(cfg: dict, kind: str, layers: int, file: Path) -> dict[str, Any]:
    """Sliding-window and chunked layers as megatron-core's `window_size` / `window_attn_skip_freq`
    (Megatron-Bridge `gpt_oss_bridge.py`: window (sliding_window - 1, 0)) and Llama 4's
    `attention_chunk_size` on its RoPE layers (`no_rope_freq`, 1 = NoPE)."""
    types = cfg.get("layer_types")
    if types is not None:
        bad = sorted(set(types) - ATTENTION_TYPES)
        if bad:
            raise InputError(f"layer_types {bad} are layers the oracle does not model (it models "
                             f"{', '.join(sorted(ATTENTION_TYPES))})", file=str(file), key="layer_types")
        if len(types) != layers:
            raise InputError(f"layer_types has {len(types)} entries, num_hidden_layers is {layers}", file=str(file),
                             key="layer_types")
    elif cfg.get("sliding_window") and cfg.get("use_sliding_window", True):
        first = cfg.get("max_window_layers", 0) if kind in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe") else 0
        types = ["sliding_attention" if i >= first else "full_attention" for i in range(layers)]
    out: dict[str, Any] = {}
    if types and "sliding_attention" in types:
        window = cfg.get("sliding_window")
        if not window:
            raise InputError("layer_types has sliding_attention but sliding_window is unset", file=str(file),
                             key="sliding_window")
        out["window_size"] = (window - 1, 0)
        if "full_attention" in types or "chunked_attention" in types:
            out["window_attn_skip_freq"] = [int(t == "sliding_attention") for t in types]
    chunk = cfg.get("attention_chunk_size")
    if kind == "llama4_text" and chunk:
        # Llama4TextConfig: no_rope_layers[i] = 1 when layer i uses RoPE (default: every 4th layer is NoPE)
        interval = cfg.get("no_rope_layer_interval", 4)
        uses_rope = cfg.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(layers)]
        skip = [1 - int(x) for x in uses_rope]
        regular = skip == [int((i + 1) % interval == 0) for i in range(layers)] and layers % interval == 0
        out |= {"attention_chunk_size": chunk, "no_rope_freq": interval if regular else skip}
    elif chunk or (types and "chunked_attention" in types):
        raise InputError("chunked attention is modelled for Llama 4 only", file=str(file), key="attention_chunk_size")
    return out


def _qwen2(cfg: dict, need: Callable[[str], Any], layers: int) -> dict[str, Any]:
    """Qwen2 adds a bias to Q, K and V only (Megatron-Bridge `qwen2_bridge.py`: add_qkv_bias)."""
    return {"add_qkv_bias": True}


def _qwen3(cfg: dict, need: Callable[[str], Any], layers: int) -> dict[str, Any]:
    """Qwen3 norms each head's Q and K (q_norm / k_norm; Megatron-Bridge `qwen3_bridge.py`: qk_layernorm)."""
    return {"qk_layernorm": True}


def _qwen_moe(cfg: dict, need: Callable[[str], Any], layers: int) -> dict[str, Any]:
    """Qwen MoE: experts every `decoder_sparse_step` layers except `mlp_only_layers`; Qwen2-MoE's shared
    expert (`shared_expert_intermediate_size`) and QKV bias; Qwen3-MoE's Q/K norm."""
    step, dense_only = cfg.get("decoder_sparse_step", 1), set(cfg.get("mlp_only_layers") or [])
    pattern = [int(i not in dense_only and (i + 1) % step == 0) for i in range(layers)]
    out = {"num_experts": need("num_experts"), "moe_router_topk": need("num_experts_per_tok"),
           "moe_ffn_hidden_size": need("moe_intermediate_size"), "moe_layer_freq": pattern if 0 in pattern else 1}
    if cfg.get("shared_expert_intermediate_size"):
        out["moe_shared_expert_intermediate_size"] = cfg["shared_expert_intermediate_size"]
    return out | (_qwen3(cfg, need, layers) if cfg.get("model_type") == "qwen3_moe" else _qwen2(cfg, need, layers))


def _mixtral(cfg: dict, need: Callable[[str], Any], layers: int) -> dict[str, Any]:
    return {"num_experts": need("num_local_experts"), "moe_router_topk": need("num_experts_per_tok"),
            "moe_ffn_hidden_size": need("intermediate_size")}


def _gpt_oss(cfg: dict, need: Callable[[str], Any], layers: int) -> dict[str, Any]:
    """GPT-OSS (Megatron-Bridge `gpt_oss_bridge.py`): every linear has a bias (the router's too), a
    learnable softmax offset per head (attention sinks), gated experts of `intermediate_size`. Its
    clamped activation is costed as SwiGLU."""
    return {"num_experts": need("num_local_experts"),
            "moe_router_topk": cfg.get("num_experts_per_tok") or need("experts_per_token"),
            "moe_ffn_hidden_size": need("intermediate_size"), "swiglu": True, "add_bias_linear": True,
            "add_qkv_bias": bool(cfg.get("attention_bias", True)), "softmax_type": "learnable"}


def _llama4(cfg: dict, need: Callable[[str], Any], layers: int) -> dict[str, Any]:
    """Llama 4 text (Llama4TextConfig): MoE layers every `interleave_moe_layer_step` (HF `moe_layers`,
    from the step - 1'th layer), each with one shared expert; dense layers of `intermediate_size_mlp`;
    `use_qk_norm` is a weightless L2 norm (megatron-core `qk_l2_norm`)."""
    step = cfg.get("interleave_moe_layer_step", 1)
    moe = set(cfg.get("moe_layers") or range(step - 1, layers, step))
    pattern = [int(i in moe) for i in range(layers)]
    expert_ffn = need("intermediate_size")
    return {"num_experts": need("num_local_experts"), "moe_router_topk": need("num_experts_per_tok"),
            "moe_ffn_hidden_size": expert_ffn, "moe_shared_expert_intermediate_size": expert_ffn,
            "ffn_hidden_size": cfg.get("intermediate_size_mlp") or expert_ffn,
            "moe_layer_freq": pattern if 0 in pattern else 1, "qk_l2_norm": bool(cfg.get("use_qk_norm"))}


def _nemotron(cfg: dict, need: Callable[[str], Any], layers: int) -> dict[str, Any]:
    """Nemotron (NemotronConfig; Megatron-Bridge `nemotron_bridge.py`): LayerNorm1P (weight and bias),
    squared-ReLU MLP without a gate, RoPE on `partial_rotary_factor` of each head (costed as full)."""
    return {"normalization": "LayerNorm", "swiglu": False,
            "add_bias_linear": bool(cfg.get("attention_bias") or cfg.get("mlp_bias"))}


def _deepseek(cfg: dict, need: Callable[[str], Any], layers: int) -> dict[str, Any]:
    """DeepSeek-V2/V3 and Kimi-K2: MLA, `first_k_dense_replace` dense layers, then MoE every
    `moe_layer_freq` layers with `n_shared_experts` shared experts; multi-token prediction
    (`num_nextn_predict_layers`)."""
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


FAMILY: dict[str, Callable[[dict, Callable[[str], Any], int], dict[str, Any]]] = {
    "qwen2": _qwen2, "qwen3": _qwen3, "qwen2_moe": _qwen_moe, "qwen3_moe": _qwen_moe, "mixtral": _mixtral,
    "gpt_oss": _gpt_oss, "llama4_text": _llama4, "nemotron": _nemotron,
    "deepseek_v2": _deepseek, "deepseek_v3": _deepseek, "kimi_k2": _deepseek,
}
# Llama and Mistral need nothing beyond the common fields; llama4 wraps a llama4_text decoder.
KNOWN = set(FAMILY) | {"llama", "mistral", "llama4"}
