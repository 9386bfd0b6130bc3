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
# The softmax's exponentials run on the SMs' special function units (MUFU.EX2) beside the tensor cores, one
# per attention score in the forward and one in the backward, which recomputes P = exp(S - LSE)
# (FlashAttention-2 Algorithm 2); within a tile the second product waits on them (NVIDIA technical blog
# "Making Softmax More Efficient with NVIDIA Blackwell Ultra", 2026: on GB200 BMM2 cannot start before the
# softmax ends). Dense BF16 tensor FLOPs per exponential an SM issues, per family: Hopper 989 TFLOPS of
# matmul against 3.9 TFLOPS of special functions on H100 SXM5 (Shah et al. 2024, FlashAttention-3 §3.1),
# 256; Ampere 1,024 dense FP16 FMAs per clock per SM (NVIDIA A100 whitepaper) against 16 exponentials
# (CUDA C++ Programming Guide, arithmetic instruction throughput, compute capability 8.x-10.x), 128;
# Blackwell twice Hopper's tensor rate per SM (B200 2,250 TFLOPS over 148 SMs against H100's 989 over 132)
# with the same 16, 512; Blackwell Ultra doubles the special function units' throughput (the blog above),
# 256. AMD's families: no published rate, the term is not modelled there.
FLOPS_PER_EXP = {"ampere": 128.0, "hopper": 256.0, "blackwell": 512.0, "blackwell-ultra": 256.0}
# Unfused attention materialises the s x s scores: softmax forward reads and writes them (2 + 2 B),
# backward reads scores and their gradient and writes the gradient (2 + 2 + 2 B).
SOFTMAX_FWD_BYTES = 2.0 * E_BYTES
SOFTMAX_BWD_BYTES = 3.0 * E_BYTES
ATTN_DROPOUT_BYTES = 2.0 * E_BYTES + 1.0  # read + write the scores and a 1-byte mask, per pass

# ---- rotary ------------------------------------------------------------------------------------------------
# Element moves (reads + writes) per element of Q or K. Fused RoPE (TE's fused_apply_rotary_pos_emb) reads and
# writes it once forward and its gradient twice backward. Megatron disables the fusion for every position type
# but plain RoPE (Megatron-LM 2edffadb52 training/arguments.py: `position_embedding_type != 'rope'` ->
# `apply_rope_fusion = False`; Megatron-Bridge v0.4.2/v0.6.0 utils/fusions.py
# `validate_rope_fusion_compatibility`, called by GPTModelProvider.provide), and megatron-core's dispatcher
# falls back to it for YaRN's mscale != 1 anyway (models/common/embeddings/rope_utils.py
# `apply_rotary_pos_emb`). The unfused `_apply_rotary_pos_emb_bshd` (same file), forward: t * cos (read +
# write: 2), `_rotate_half`'s negated half (1) and its cat (2), * sin (2), the sum (3), the final cat with
# the empty pass-through part (2): 12; backward (autograd): grad * sin (2), the negated half (1), chunk's
# gradient cat (2), grad * cos (2), the two gradients summed into t's (3), the empty pass-through slice's
# zero gradient written (1) and summed into t's too (3): 14 (tests/test_gpt_oss_terms.py counts both on
# megatron-core 0.16.1's own function).
ROPE_FUSED_MOVES = (2.0, 4.0)
ROPE_UNFUSED_MOVES = (12.0, 14.0)

# ---- MoE router -----------------------------------------------------------------------------------------
# Router scores in fp32 (megatron-core router.py casts the logits for softmax / top-k): the logits are
# written, read by the softmax, written as probabilities and read by top-k: 4 passes of 4 B.
ROUTER_PASSES = 4
# Row indices of the unfused permutation (megatron-core moe_utils.py `permute`: masked_select of an int64
# arange over the routing map, then index_select): 8 B each.
TOKEN_INDEX_BYTES = 8
# The routed experts' fc2 bias outside the op fuser (megatron-core 2edffadb52 transformer/moe/experts.py
# `TEGroupedMLP._apply_bias`, the same eager path at cd4afffa64): fc2 returns its bias (skip_bias_add), and
# per local expert `t + b * p` over that expert's rows, then torch.cat, with the probs p in the logits' BF16
# (router_dtype unset; TE router.py: probs "in the same dtype as the logits"). Bytes per element of the
# [rows, H] output, forward: b * p written (2), the sum read 2 + 2 and written (6), the cat read and written
# (4): 12; backward: bias grad (grad * p written and read by the row sum: 2 + 2 + 2) and probs grad
# (grad * b, then its sum over H: 6), torch.split's gradient cat (4): 16 (counted on megatron-core 0.16.1's
# own function in tests/test_gpt_oss_terms.py).
EXPERT_BIAS_BYTES = (12.0, 16.0)

# ---- embedding and loss ---------------------------------------------------------------------------------
# The embedding backward reads the output gradient (2 B) and scatter-adds into the fp32 weight-gradient
# rows (read + write 4 + 4 B) per token element.
EMBEDDING_GRAD_BYTES = E_BYTES + 2 * FP32_BYTES
# Cross entropy per logit (fwd, bwd): unfused, the fp32 upcast, max, exp, sum and log-softmax passes
# read/write the logits 14 B forward and 10 B backward; Megatron's fused vocab-parallel CE
# (cross_entropy_loss_fusion) reads and writes each logit once per pass (2 + 2 B).
LOSS_BYTES = {False: (14.0, 10.0), True: (4.0, 4.0)}
