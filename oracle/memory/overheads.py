"""Memory outside weights and activations: communication buffers, DeepEP, runtime, fragmentation."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from ..model_shape import ModelShape
from .constants import (
    ACT_BYTES,
    ALLOCATOR_FRAGMENTATION,
    CUDA_GRAPH_GRAD_BUFFERS,
    DEEPEP_CHANNELS,
    DEEPEP_MAX_NVL_PEERS,
    DEEPEP_NVL_RECV_TOKENS,
    DEEPEP_RDMA_RECV_TOKENS,
    DEEPEP_TOKEN_META_BYTES,
    NCCL_BUFFER_BYTES_PER_GROUP,
    SP_ALLGATHER_BUFFERS,
)


def comm_buffers(g: ModelShape, tp: Any, pp: Any, cp: Any, ep: Any, etp: Any, dp: Any, edp: Any, sp: Any, tokens: Any,
                 deepep: Any, allgather: Any = 0) -> tuple[Any, Any]:
    """(NCCL communicator buffers, transient collective buffers), bytes: numbers, or numpy arrays of a batch
    of points (`estimate._row`), `sp`, `deepep` and `allgather` 0/1 flags (sequence parallelism, the flex
    dispatcher's DeepEP-style buffers, the allgather dispatcher), each branch a flag times its term.

    DP gradient buckets are views into Megatron's contiguous fp32 gradient buffer (already counted as
    gradients) and the distributed optimizer all-gathers parameters into the bf16 parameter buffer, so
    DP adds only its communicator. Transients, for one micro-batch of one layer:
      - SP: the all-gathered [s/cp, b, h] linear input (Megatron's global memory buffer), x2;
      - PP: the received forward activation and backward gradient [s/cp/r, b, h];
      - EP all-to-all (not DeepEP): the permuted send buffer, topk x capacity x [s/cp/r, b, h];
      - EP allgather dispatcher: the hidden states gathered from the EP group, EP x [s/cp/r, b, h]
        (megatron-core moe/token_dispatcher.py MoEAllGatherTokenDispatcher).
    """
    groups = 1 * (tp > 1) + 1 * (cp > 1) + 1 * (dp * cp > 1) + 1 * (pp > 1)
    r = sp * tp + (1 - sp)  # TP with SP, else 1
    transient = sp * (SP_ALLGATHER_BUFFERS * ACT_BYTES * g.h * tokens) + (pp > 1) * (2 * ACT_BYTES * g.h * tokens / r)
    if g.is_moe:
        groups = groups + 1 * (ep > 1) + 1 * ((etp > 1) * (etp != tp)) + 1 * ((edp > 1) * (edp != dp * cp))
        moved = (allgather * (ACT_BYTES * g.h * tokens * ep / r)
                 + (1 - allgather) * (ACT_BYTES * g.h * tokens * g.routed_peak / r))
        transient = transient + (ep > 1) * (1 - deepep) * moved
    return groups * NCCL_BUFFER_BYTES_PER_GROUP, transient


@lru_cache(maxsize=1024)
def deepep_buffers(g: ModelShape, ep: int, etp: int, gpus_per_node: int) -> float:
    """DeepEP's NVLink (+ RDMA when the EP group spans nodes) buffers, bytes (see constants)."""
    if not g.is_moe or ep <= 1:
        return 0.0
    per_node = max(1, min(DEEPEP_MAX_NVL_PEERS, gpus_per_node) // max(etp, 1))
    nvl_peers = min(ep, per_node)
    rdma_peers = -(-ep // nvl_peers) if ep > nvl_peers else 0
    token_bytes = ACT_BYTES * g.h + DEEPEP_TOKEN_META_BYTES
    nvl = DEEPEP_CHANNELS * nvl_peers * DEEPEP_NVL_RECV_TOKENS * token_bytes
    rdma = 2 * DEEPEP_CHANNELS * rdma_peers * DEEPEP_RDMA_RECV_TOKENS * token_bytes
    return float(nvl + rdma)


def allocator_overhead(dynamic_bytes: float) -> float:
    """Caching-allocator fragmentation on activations and transient buffers."""
    return ALLOCATOR_FRAGMENTATION * dynamic_bytes


def cuda_graph_sample_bytes(scope: tuple[str, ...] | None, token_bytes: float, mask_bytes: float) -> float:
    """Memory CUDA graphs keep beside the eager activations per captured layer x micro-batch sample, bytes
    (megatron-core 0.16.1 transformer/cuda_graphs.py, Transformer Engine 2.12 pytorch/graph.py at 5671fd36,
    the version megatron-core pins; read for this term).
    A graph is captured per layer and micro-batch, and a captured sample's static inputs are reused
    once its backward has run, so as many are alive as layer x micro-batch activations are stored
    (`cuda_graph_buffers`): with the whole layer graphed (empty scope) each keeps a static hidden-state
    input (`token_bytes`: [tokens, h] BF16, h / TP under SP) besides the eager copy, and with the
    layer or its attention graphed a boolean attention-mask sample (`mask_bytes`: [MBS, seq/CP, seq]).
    Not modelled: the graphs' private pool being closed to eager allocations, and full-iteration graphs."""
    scope = scope or ()
    whole = not scope
    return (token_bytes if whole else 0.0) + (mask_bytes if whole or "attn" in scope else 0.0)


def cuda_graph_buffers(stored_layer_mbs: Any, sample_bytes: Any, token_bytes: Any) -> Any:
    """Bytes CUDA graphs keep with `stored_layer_mbs` layer x micro-batch samples alive, each of
    `cuda_graph_sample_bytes`; grad-output buffers are shared per shape: about three hidden-state buffers
    (TE 2.12 graph.py). Numbers or numpy arrays (a batch of layouts, `estimate.py`)."""
    return stored_layer_mbs * sample_bytes + CUDA_GRAPH_GRAD_BUFFERS * token_bytes
