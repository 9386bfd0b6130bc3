"""Stored activations per token, per layer type (bytes), after Korthikanti et al. 2022.

Units: bytes held by one GPU per token of the rank's local sequence chunk (s/CP tokens x micro-batch);
multiply by mbs*seq/cp for one micro-batch. `r` is the sequence-parallel divisor: tensors that are
replicated across the TP group without SP (norm inputs, linear inputs, dropout masks) are split TP ways
with SP. Tensors inside the TP-sharded region (Q/K/V, MLP intermediate) are always split TP ways.

Korthikanti's GPT layer (LayerNorm, GeLU, dropout, MHA, TP = 1) stores 34*h + 5*a*s bytes per token:
  attention 11h + 5as: QKV input 2h, Q and K 4h, V 2h, softmax output 2as, softmax-dropout mask as,
            dropout output 2as, output-projection input 2h, output-dropout mask 1h
  MLP 19h:  fc1 input 2h, GeLU input 8h, fc2 input 8h, dropout mask 1h
  norms 4h: two LayerNorm inputs of 2h
The code below derives the same terms from the architecture, so the 34 becomes:
  - Q is heads*head_dim wide, K and V num_query_groups*head_dim (GQA);
  - SwiGLU stores its activation input 2*ffn wide (gate and up) and fc2 input ffn wide;
  - no dropout masks (nor softmax-dropout output) when the model trains without dropout; PyTorch's
    dropout with p = 0 returns its input and saves nothing;
  - flash attention stores neither scores nor softmax: only Q, K, V, the output (which is also the
    output-projection input, counted once) and the fp32 log-sum-exp per head;
  - fused norm kernels also keep fp32 per-token statistics (LayerNorm mean+rstd, RMSNorm rstd);
  - a Q/K norm (Qwen3's qk_layernorm, Llama 4's L2 norm) keeps the un-normed Q and K and its fp32
    statistics per head besides the normed ones attention keeps;
  - MLA stores the compressed latents (q_lora, kv_lora) at norm and up-projection input, and per-head
    Q/K of qk_head_dim + qk_pos_emb_head_dim and V of v_head_dim;
  - an MoE layer stores the router input and fp32 scores, the routed tokens (topk x capacity factor
    per token, gathered over ETP) at expert fc1 input, activation input and fc2 input, the fp32
    routing probabilities the weighted activation keeps (megatron-core 0.16.1 experts.py applies the
    probs in the activation, `weighted_bias_swiglu_impl`, and unpermutes without them, so the expert
    outputs are not kept), and the shared-expert MLP.
For GPT-3-style models this reproduces 34 (plus 16 bytes of LayerNorm statistics) exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..model_shape import ModelShape, padded_vocab
from .constants import (
    ACT_BYTES,
    FLASH_LSE_BYTES,
    FP8_INPUT_BYTES,
    LAYERNORM_STAT_BYTES,
    PROB_BYTES,
    RMSNORM_STAT_BYTES,
    ROUTER_SCORE_BYTES,
    TOKEN_ID_BYTES,
)


@dataclass(frozen=True, slots=True)
class LayerActs:
    dense: float  # full stored activations of a dense layer, bytes per token
    moe: float  # ... of an MoE layer
    layer_input: float  # what full recompute keeps per recomputed layer (the layer's input)
    dense_wgrad: float  # zero-bubble W-pass stash of a dense layer (linear inputs + output grads)
    moe_wgrad: float


def norm_stat_bytes(g: ModelShape) -> int:
    """fp32 statistics one norm saves per token: RMSNorm its rstd, LayerNorm mean and rstd."""
    return RMSNORM_STAT_BYTES if g.rms else LAYERNORM_STAT_BYTES


@lru_cache(maxsize=8192)
def layer_acts(
    g: ModelShape, tp: int, sp: bool, flash: bool, modules: tuple[str, ...], seq: int, etp: int, fp8: bool = False
) -> LayerActs:
    """Stored bytes per token of one dense and one MoE layer; `modules` are the selective-recompute
    modules (megatron-core 0.16.1 transformer_config.py `recompute_modules`), each of which keeps only
    what its checkpoint needs:
      core_attn: the attention core keeps nothing beyond its Q, K, V inputs;
      layernorm: the two norm outputs are discarded (output-discarding checkpoint), their inputs stay;
      mla_up_proj: MLA's up-projected Q, K, V are discarded, the latents stay;
      mlp: a dense MLP keeps only its input; moe: an MoE layer keeps only its input;
      moe_act: the expert activation output (fc2 input) is discarded;
      shared_experts: the shared-expert MLP keeps only its input (the router's input)."""
    h, a = g.h, g.heads
    selective = "core_attn" in modules
    # Bytes of a saved GEMM input: under FP8, TE quantises the input of every FP8 GEMM and keeps only
    # that FP8 copy (column-wise usage, for the weight gradient): 1 B instead of 2 B. Tensors another
    # op also needs in high precision (flash-attention output, router input, activation-function
    # input) stay 2 B; norm inputs stay 2 B.
    li = FP8_INPUT_BYTES if fp8 else ACT_BYTES
    r = tp if sp else 1
    stat = norm_stat_bytes(g) / r
    mask = h / r if g.dropout else 0.0  # 1-byte dropout mask after attention and after the MLP

    # ---- attention block -------------------------------------------------------------------------
    ln1 = ACT_BYTES * h / r + stat  # input_layernorm input
    norm_out = 0.0 if "layernorm" in modules else 1.0  # norm outputs kept (1) or recomputed (0)
    qkv_in = norm_out * li * h / r  # norm output, saved by the QKV (or MLA down/q) linears for their wgrad
    latents = 0.0
    if g.mla:
        qk = g.qk_head_dim + g.qk_pos_dim
        q_w, k_w, v_w, ctx_w = a * qk, a * qk, a * g.v_head_dim, a * g.v_head_dim
        # kv latent at kv_layernorm input and at kv_up input; same for the q latent when q_lora is used
        latents = (ACT_BYTES + li) * g.kv_lora_rank / r + stat
        if g.q_lora_rank:
            latents += (ACT_BYTES + li) * g.q_lora_rank / r + stat
    else:
        q_w = a * g.head_dim
        k_w = v_w = g.groups * g.head_dim
        ctx_w = q_w
    qkv = ACT_BYTES * (q_w + k_w + v_w) / tp  # Q, K (for QK^T or flash) and V
    if g.qk_norm:  # the Q/K norm keeps its input (the un-normed Q and K) and fp32 rstd per head
        qkv += (ACT_BYTES * (q_w + k_w) + norm_stat_bytes(g) * (a + g.groups)) / tp
    if g.mla and "mla_up_proj" in modules:
        qkv = 0.0
    # attention output = output-projection input; flash saves it too (the same bf16 tensor), so under
    # FP8 with flash both the bf16 output and the FP8 GEMM input are kept
    ctx = (ACT_BYTES * ctx_w / tp) if not fp8 else ((ACT_BYTES + li) if flash else li) * ctx_w / tp
    if selective:
        core = 0.0  # core attention recomputed: nothing beyond its Q, K, V inputs is kept
    elif flash:
        core = FLASH_LSE_BYTES * a / tp
    else:
        # per query token: heads x s scores; softmax output 2 B, plus with dropout a 1 B mask and the
        # 2 B dropout output (Korthikanti's 5as/h; 2as/h without dropout). Keys span the whole sequence.
        scores = a * seq / tp
        core = ACT_BYTES * scores + ((1 + ACT_BYTES) * scores if g.dropout else 0.0)
    attention = ln1 + qkv_in + latents + qkv + ctx + core + mask

    # ---- dense MLP -------------------------------------------------------------------------------
    ln2 = ACT_BYTES * h / r + stat
    fc1_in = li * h / r
    act_in = ACT_BYTES * g.gated * g.ffn / tp  # GeLU input, or SwiGLU's gate and up halves
    fc2_in = li * g.ffn / tp  # activation output
    if "mlp" in modules:  # the checkpointed MLP keeps its input (the norm output) only
        dense = attention + ln2 + fc1_in + mask
    else:
        dense = attention + ln2 + norm_out * fc1_in + act_in + fc2_in + mask

    # zero-bubble W stash: inputs of every linear and the gradients of their outputs
    attn_lin_in = qkv_in + ctx + (li * (g.kv_lora_rank + g.q_lora_rank) / r if g.mla else 0.0)
    attn_lin_grad = qkv + ACT_BYTES * h / r
    dense_wgrad = attn_lin_in + attn_lin_grad + (fc1_in + fc2_in) + (act_in + ACT_BYTES * h / r)

    moe = dense
    moe_wgrad = dense_wgrad
    if g.is_moe:
        k_eff = g.routed_peak
        routed_local = k_eff / r  # (token, expert) pairs this rank dispatches, per token
        pairs = routed_local * etp  # pairs it computes after the all-to-all and the ETP all-gather
        ffn_e = g.expert_ffn / etp
        moe_in = ACT_BYTES * h / r  # norm output: the router's and the shared experts' input
        router = norm_out * moe_in + ROUTER_SCORE_BYTES * g.experts / r
        experts = (
            li * h * pairs  # expert fc1 input (permuted tokens)
            + ACT_BYTES * g.gated * ffn_e * pairs  # activation input
            + (0.0 if "moe_act" in modules else li * ffn_e * pairs)  # fc2 input (activation output)
            + PROB_BYTES * pairs  # the permuted probs the weighted activation keeps
        )
        # shared experts read the router's bf16 input; under FP8 their fc1 keeps its own FP8 copy
        shared = 0.0
        if g.shared_ffn and "shared_experts" not in modules:
            shared = (ACT_BYTES * g.gated * g.shared_ffn + li * g.shared_ffn) / tp + (li * h / r if fp8 else 0.0)
        if "moe" in modules:  # the checkpointed MoE layer keeps its input only
            moe = attention + ln2 + moe_in + mask
        else:
            moe = attention + ln2 + router + experts + shared + mask
        moe_wgrad = (
            attn_lin_in
            + attn_lin_grad
            + ACT_BYTES * h / r  # router / shared fc1 input
            + ACT_BYTES * h * pairs * 2  # expert fc1 input and fc2 output grad
            + ACT_BYTES * ffn_e * pairs * (1 + g.gated)  # expert fc2 input and fc1 output grad
            + (ACT_BYTES * g.shared_ffn * (1 + g.gated) / tp + ACT_BYTES * h / r if g.shared_ffn else 0.0)
        )
    return LayerActs(dense, moe, ACT_BYTES * h / r, dense_wgrad, moe_wgrad)


@dataclass(frozen=True, slots=True)
class EdgeActs:
    embedding: float  # first chunk, per in-flight micro-batch, bytes per token
    logits: float  # last chunk, one micro-batch (final norm, output-layer input, logits/loss)
    mtp_extra: float  # per MTP module, beyond its transformer layer, per in-flight micro-batch


@lru_cache(maxsize=4096)
def edge_acts(g: ModelShape, tp: int, sp: bool, fused_ce: bool) -> EdgeActs:
    r = tp if sp else 1
    h = g.h
    # Embedding: int64 token ids (and position ids for learned positions) saved by the lookups, and the
    # embedding-dropout mask (the embedding output itself is layer 1's norm input, counted there).
    ids = TOKEN_ID_BYTES * (2 if g.learned_positions else 1)
    embedding = ids + (h / r if g.dropout else 0.0)
    # Output: final-norm input and output-layer input (2h each), then the logits over V/TP; each MTP
    # module has its own norm, output-layer pass and loss.
    # Unfused Megatron loss: bf16 logits (2 B) are cast to fp32 and the fp32 softmax (4 B) is saved for
    # backward; both exist while the loss runs -> 6 B per vocab entry at the peak.
    # Fused loss (cross_entropy_loss_fusion, TE/Primus kernel): computed from the bf16 logits, gradient
    # written in place -> only the 2 B logits buffer (assumption: no fp32 copy materialised).
    vp = padded_vocab(g.vocab, tp)
    per_vocab = ACT_BYTES if fused_ce else ACT_BYTES + 4
    logits_one = per_vocab * vp / tp
    logits = (2 * ACT_BYTES * h / r + norm_stat_bytes(g) / r + logits_one) * (1 + g.mtp_layers)
    # MTP module extras: enorm input, hnorm input (2h each), eh_proj input (the 2h concatenation),
    # and the ids of the shifted tokens.
    mtp_extra = (ACT_BYTES * h + ACT_BYTES * h + 2 * ACT_BYTES * h) / r + TOKEN_ID_BYTES if g.mtp_layers else 0.0
    return EdgeActs(embedding, logits, mtp_extra)
