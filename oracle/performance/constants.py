"""Named constants of the time model, each with its source or derivation (fitted values live in
calibration.yaml, not here). Byte counts are per element moved through HBM."""

from __future__ import annotations

# ---- element sizes --------------------------------------------------------------------------------
E_BYTES = 2  # activations and their gradients: BF16/FP16
BF16_BYTES = 2  # weights the distributed optimizer / FSDP all-gathers (Megatron gathers the bf16 copy)
FP32_BYTES = 4

# ---- optimizer --------------------------------------------------------------------------------------
# Adam step per parameter under mixed precision (Megatron's fused Adam over fp32 main params): read the
# fp32 grad, master weight, m and v (16 B); write master, m and v (12 B); write the bf16 weight copy (2 B);
# read the grad once more for the global grad norm (4 B): 34 B.
ADAM_BYTES_PER_PARAM = 16.0 + 12.0 + 2.0 + 4.0

# ---- attention ----------------------------------------------------------------------------------------
# Flash attention's backward runs 5 GEMM-shaped products against the forward's 2 (dQ, dK, dV, the
# recomputed scores and dP; Dao 2023 FlashAttention-2 §3.1): 2.5x the forward FLOPs.
FA_BWD = 2.5
# Unfused attention materialises the s x s scores: softmax forward reads and writes them (2 + 2 B),
# backward reads scores and their gradient and writes the gradient (2 + 2 + 2 B).
SOFTMAX_FWD_BYTES = 2.0 * E_BYTES
SOFTMAX_BWD_BYTES = 3.0 * E_BYTES
ATTN_DROPOUT_BYTES = 2.0 * E_BYTES + 1.0  # read + write the scores and a 1-byte mask, per pass

# ---- MoE router -----------------------------------------------------------------------------------------
# Router scores in fp32 (megatron-core router.py casts the logits for softmax / top-k): the logits are
# written, read by the softmax, written as probabilities and read by top-k: 4 passes of 4 B.
ROUTER_PASSES = 4
# Row indices of the unfused permutation (megatron-core moe_utils.py `permute`: masked_select of an int64
# arange over the routing map, then index_select): 8 B each.
TOKEN_INDEX_BYTES = 8

# ---- embedding and loss ---------------------------------------------------------------------------------
# The embedding backward reads the output gradient (2 B) and scatter-adds into the fp32 weight-gradient
# rows (read + write 4 + 4 B) per token element.
EMBEDDING_GRAD_BYTES = E_BYTES + 2 * FP32_BYTES
# Cross entropy per logit (fwd, bwd): unfused, the fp32 upcast, max, exp, sum and log-softmax passes
# read/write the logits 14 B forward and 10 B backward; Megatron's fused vocab-parallel CE
# (cross_entropy_loss_fusion) reads and writes each logit once per pass (2 + 2 B).
LOSS_BYTES = {False: (14.0, 10.0), True: (4.0, 4.0)}
