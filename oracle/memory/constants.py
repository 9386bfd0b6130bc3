"""Named constants of the memory model. Each says where it comes from; none is fitted per row.

All sizes are bytes unless the name says GiB. GiB = 2**30 bytes.
"""

from __future__ import annotations

GIB = float(1 << 30)

# ---- precision ------------------------------------------------------------------------------------
# Megatron mixed precision with Adam (Megatron-LM `theoretical_memory_usage.py`, Korthikanti 2022 §2):
# bf16/fp16 model weight 2 B, fp32 main gradient 4 B, fp32 master weight 4 B + Adam m 4 B + v 4 B.
WEIGHT_BYTES = 2
GRAD_BYTES = 4
OPTIMIZER_BYTES = 12
# Activations are stored in the training dtype (bf16/fp16).
ACT_BYTES = 2
# Under FP8, Transformer Engine keeps a GEMM's input for the weight gradient as its FP8 copy only
# (column-wise/transposed usage; TE 1.x `inputmat_t`, TE 2.x quantised tensor with rowwise usage
# dropped before saving): 1 B per element.
FP8_INPUT_BYTES = 1
# FP8 training keeps, per linear-layer weight, an FP8 copy and its transpose (TE's cached weight
# workspaces, reused across micro-batches): 1 B + 1 B per linear parameter. Embedding, output layer,
# norms and the MoE router stay in bf16/fp32 and get no copy.
FP8_WEIGHT_COPY_BYTES = 2
# Token / position ids are int64 and are saved by the embedding lookup for its backward.
TOKEN_ID_BYTES = 8
# fp32 per-token normalisation statistics saved by the (TE / Apex) fused norm kernels:
# LayerNorm saves mean and rstd (2 x 4 B), RMSNorm saves rstd (4 B).
LAYERNORM_STAT_BYTES = 8
RMSNORM_STAT_BYTES = 4
# Flash attention saves the softmax log-sum-exp per (query token, head) in fp32.
FLASH_LSE_BYTES = 4
# MoE router: fp32 logits and fp32 normalised scores per (token, expert) kept for backward / aux loss.
ROUTER_SCORE_BYTES = 2 * 4
# The fp32 routing probability of each dispatched (token, expert) row, kept by the weighted activation.
PROB_BYTES = 4

# ---- FSDP2 -----------------------------------------------------------------------------------------
# Torch FSDP2 all-gathers one layer's weights ahead of use (the current and the prefetched layer are
# unsharded at the same time) and reduce-scatters one layer's unsharded fp32 gradient.
FSDP_UNSHARDED_WEIGHT_LAYERS = 2
FSDP_UNSHARDED_GRAD_LAYERS = 1

# ---- communication buffers --------------------------------------------------------------------------
# NCCL/RCCL device buffers per communicator that carries traffic: NCCL_BUFFSIZE (4 MiB) per channel and
# ring peer (2) for the Simple protocol, ~16 channels on NVLink/xGMI, plus the smaller LL/LL128 buffers:
# 4 MiB x 2 x 16 = 128 MiB + LL/LL128 ~ 64 MiB -> 192 MiB (NCCL docs: NCCL_BUFFSIZE, NCCL_MAX_NCHANNELS).
NCCL_BUFFER_BYTES_PER_GROUP = 192 * (1 << 20)
# With sequence parallelism each TP linear all-gathers its [s, b, h] input; Megatron keeps the gathered
# tensor in a global memory buffer reused by forward and backward (two of them live at once at most).
SP_ALLGATHER_BUFFERS = 2

# ---- DeepEP (use_turbo_deepep) ---------------------------------------------------------------------
# Buffer sizes follow DeepEP's Config::get_{nvl,rdma}_buffer_size_hint with its default configs
# (Buffer.num_sms = 20 -> 10 channels; up to 288 NVLink receive tokens and 128 RDMA receive tokens per
# channel and peer); each buffered token carries its hidden vector plus top-k indices/weights and FP8
# scales (128 x 8 B + 128 x 4 B + 128 x 4 B = 2 KiB of metadata). Megatron sizes the buffer from the
# maximum of the dispatch and combine hints; the RDMA buffer holds send and receive halves.
DEEPEP_CHANNELS = 10
DEEPEP_NVL_RECV_TOKENS = 288
DEEPEP_RDMA_RECV_TOKENS = 128
DEEPEP_TOKEN_META_BYTES = 2048
DEEPEP_MAX_NVL_PEERS = 8

# ---- CUDA graphs (cuda_graph_impl) -------------------------------------------------------------------
# Transformer Engine's make_graphed_callables shares static grad-output buffers per tensor signature;
# with a few grad inputs alive at once that is about three hidden-state buffers (TE 2.12 graph.py, 5671fd36).
CUDA_GRAPH_GRAD_BUFFERS = 3

# ---- runtime and allocator --------------------------------------------------------------------------
# CUDA/HIP context, kernel images and BLAS workspaces reserved outside the tensor allocator
# (~0.3-0.6 GiB measured on H100/MI300X with lazy module loading); take 0.5 GiB.
RUNTIME_CONTEXT_GIB = 0.5
# PyTorch caching-allocator fragmentation on the dynamic (activation and buffer) allocations. Megatron's
# own estimate uses the same 5 % ("overhead_factor = 1.05" in theoretical_memory_usage.py). Weights,
# gradients and optimizer state live in Megatron's contiguous buffers and do not fragment.
ALLOCATOR_FRAGMENTATION = 0.05
