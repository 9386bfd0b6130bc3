"""Megatron-LM: a `torchrun ... pretrain_gpt.py` line whose flags are `megatron/training/arguments.py`'s
at core_v0.16.1. Boolean flags there are store_true with no `--no-` form, so a knob that is off is
left out and named in a comment line after the command."""

from __future__ import annotations

import shlex

from paratune.oracle.specs import ClusterSpec, EffectiveConfig, ModelArch, Workload
from paratune.oracle.specs.knobs import KNOB_SPECS

from .settings import COMPANIONS, companions, knob_values

# ModelArch field -> Megatron-LM flag (arguments.py `_add_network_size_args`, `_add_moe_args`,
# `_add_mla_args`, `_add_multi_token_prediction_args` at core_v0.16.1).
MODEL_FLAGS = {
    "num_layers": "--num-layers", "hidden_size": "--hidden-size", "num_attention_heads": "--num-attention-heads",
    "ffn_hidden_size": "--ffn-hidden-size", "num_query_groups": "--num-query-groups", "kv_channels": "--kv-channels",
    "normalization": "--normalization", "num_experts": "--num-experts", "moe_router_topk": "--moe-router-topk",
    "moe_ffn_hidden_size": "--moe-ffn-hidden-size",
    "moe_shared_expert_intermediate_size": "--moe-shared-expert-intermediate-size",
    "moe_layer_freq": "--moe-layer-freq", "q_lora_rank": "--q-lora-rank", "kv_lora_rank": "--kv-lora-rank",
    "qk_head_dim": "--qk-head-dim", "qk_pos_emb_head_dim": "--qk-pos-emb-head-dim", "v_head_dim": "--v-head-dim",
    "mtp_num_layers": "--mtp-num-layers", "position_embedding_type": "--position-embedding-type",
    "hidden_dropout": "--hidden-dropout", "softmax_type": "--softmax-type", "window_size": "--window-size",
    "window_attn_skip_freq": "--window-attn-skip-freq", "no_rope_freq": "--no-rope-freq",
    "rotary_base": "--rotary-base", "rotary_percent": "--rotary-percent",
    "rotary_scaling_factor": "--rotary-scaling-factor", "norm_epsilon": "--norm-epsilon",
}
# Boolean ModelArch fields written as store_true flags when on (TransformerConfig fields in arguments.py).
_SWITCHES = {"qk_layernorm": "--qk-layernorm", "qk_l2_norm": "--qk-l2-norm", "add_qkv_bias": "--add-qkv-bias"}
# Fields only an MLA or a MoE model sets (the others keep their defaults, which are no flags to write).
_MLA_FIELDS = {"q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim",
               "rotary_scaling_factor"}
_MOE_FIELDS = {"moe_layer_freq", "moe_router_topk"}

WHERE = "a Megatron-LM checkout"


def _text(value: object) -> str:
    """A flag's value: a list as nargs values."""
    if isinstance(value, (tuple, list)):
        return " ".join(shlex.quote(str(v)) for v in value)
    return shlex.quote(str(value))


def _model_text(value: object) -> str:
    """A model flag's value as arguments.py parses it: a tuple as "a,b" (`tuple_type`), a per-layer list
    as a Python list expression (`moe_freq_type`, `no_rope_freq_type`)."""
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, list):
        return shlex.quote("[" + ",".join(str(v) for v in value) + "]")
    return shlex.quote(str(value))


def model_flags(model: ModelArch, seq_length: int) -> list[str]:
    """The architecture as Megatron-LM flags (the ones `pretrain_gpt.py` needs to build the model)."""
    # --vocab-size: the card's, for the tokenizers that read it (NullTokenizer, TikTokenizer; others set their
    # own) and for reading the launch back as a workload (oracle/inputs/megatron_flags.py)
    out = [f"--seq-length {seq_length}", f"--max-position-embeddings {seq_length}", f"--vocab-size {model.vocab_size}"]
    skip = (set() if model.multi_latent_attention else _MLA_FIELDS) | (set() if model.is_moe else _MOE_FIELDS)
    if model.position_embedding_type is None:  # the kind the card implies, written: Megatron's default is learned
        out.append(f"--position-embedding-type {'learned_absolute' if model.learned_positions else 'rope'}")
    for name, flag in MODEL_FLAGS.items():
        value = model.__dict__.get(name)
        if name not in skip and value is not None and not (name == "mtp_num_layers" and not value):
            out.append(f"{flag} {_model_text(value)}")
    if model.num_query_groups:
        out.append("--group-query-attention")
    # the dropout the card implies (ModelArch.has_dropout; Megatron's default is 0.1), attention's the same
    dropout = (0.1 if model.has_dropout else 0.0) if model.hidden_dropout is None else model.hidden_dropout
    if model.hidden_dropout is None:
        out.append(f"--hidden-dropout {dropout}")
    out.append(f"--attention-dropout {dropout}")
    out += [flag for name, flag in _SWITCHES.items() if model.__dict__.get(name)]
    if model.swiglu:
        out.append("--swiglu")
    if model.untie_embeddings_and_output_weights:
        out.append("--untie-embeddings-and-output-weights")
    if not model.add_bias_linear:
        out.append("--disable-bias-linear")
    if model.multi_latent_attention:
        out.append("--multi-latent-attention")
    return out


def layout_flags(cfg: EffectiveConfig, workload: Workload, vendor: str) -> tuple[list[str], list[str]]:
    """(flags that set the winner's knobs, flags of knobs it leaves off)."""
    on: list[str] = []
    off: list[str] = []
    for name, value in knob_values(cfg, workload.model, "megatron-lm", vendor).items():
        flag = KNOB_SPECS[name].megatron_lm
        assert flag is not None  # knob_values yields only the knobs this stack has
        if "megatron-lm" in KNOB_SPECS[name].inverted:  # the CLI's flag is the knob's negation
            (off if value else on).append(flag)
        elif value is True:
            on.append(flag)
        elif value is False or value is None:
            off.append(flag)
        else:
            on.append(f"{flag} {_text(value)}")
    if cfg.sequence_parallel:  # resolve keeps it only with TP > 1
        on.append("--sequence-parallel")
    if cfg.use_distributed_optimizer and cfg.overlap_grad_reduce and workload.training.overlap_param_gather:
        on.append("--overlap-param-gather")  # needs the distributed optimizer and --overlap-grad-reduce
    if cfg.use_torch_fsdp2:
        on.append("--no-gradient-accumulation-fusion")  # FSDP2 refuses it (arguments.py)
    for dest, value in companions(cfg, workload.model, vendor).items():
        flag = COMPANIONS[dest][0]
        if value is True:
            on.append(flag)
        elif value is False:
            off.append(flag)
        else:
            on.append(f"{flag} {_text(value)}")
    if cfg.use_flash_attn:
        on.append("--attention-backend flash")  # --use-flash-attn only reaches legacy models
    return on, off


def environment(cfg: EffectiveConfig) -> dict[str, str]:
    """The environment `validate_args` requires of the layout (arguments.py core_v0.16.1): TP or CP > 1 needs
    CUDA_DEVICE_MAX_CONNECTIONS=1 (one kernel queue keeps the TP/CP communication ordered), except with an
    FSDP or MoE-overlap layout, where Megatron only warns and prefers the default."""
    if (cfg.tp > 1 or cfg.cp > 1) and not (cfg.use_torch_fsdp2 or cfg.use_megatron_fsdp
                                          or cfg.overlap_moe_expert_parallel_comm):
        return {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    return {}


def command(cfg: EffectiveConfig, workload: Workload, cluster: ClusterSpec) -> str:
    """The torchrun line (run on every node, from a Megatron-LM checkout; data, tokenizer and optimizer
    flags go in "$@")."""
    model = workload.model
    on, off = layout_flags(cfg, workload, cluster.gpu.vendor)
    env = " ".join(f"{k}={v}" for k, v in environment(cfg).items())
    launcher = (f"{env} torchrun --nnodes {cluster.num_nodes} --nproc-per-node {cluster.gpus_per_node} ".lstrip() +
                "--node-rank ${NODE_RANK:-0} --master-addr ${MASTER_ADDR:-localhost} "
                "--master-port ${MASTER_PORT:-6000}")
    dtype = "--fp16" if workload.training.fp16 else "--bf16"  # FP8 GEMMs run inside a BF16/FP16 model
    flags = [*model_flags(model, cfg.seq_length), *on, dtype]
    lines = [f"{launcher} pretrain_gpt.py \\", *(f"    {f} \\" for f in flags), '    "$@"']
    if model.attention_chunk_size:
        lines.append(f"# not a Megatron-LM argument: attention_chunk_size {model.attention_chunk_size} "
                     "(Llama 4's chunked attention, Megatron-Bridge llama4_utils.py); "
                     "this command runs full attention on those layers")
    if off:
        lines.append("# off (the Megatron-LM default: store_true flags with no --no- form, or value flags left unset): "
                     + " ".join(off))
    return "\n".join(lines)
