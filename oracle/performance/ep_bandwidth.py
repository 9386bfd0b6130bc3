"""Achieved bandwidth of each MoE token-dispatch backend, as the kernels' authors publish it.

Each backend moves tokens inside the scale-up domain (NVLink / NVL72 / xGMI) and across it (the GPU's
RDMA NIC). The achieved rate is a published figure divided by the line rate of the link it was
measured on, applied to the catalog GPU's line rate (`intra_node_gb_s`, `inter_node_gb_s`), so each
entry below is one published measurement and its derivation. Byte counts are the backend's own
(`oracle.performance.moe_layer`): NCCL all-to-all moves one copy per selected expert, DeepEP and
HybridEP one copy per distinct destination rank (and one per distinct remote node over RDMA).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..layout import ALLGATHER, ALLTOALL, FLEX_BACKENDS, HYBRIDEP, TURBO_DEEPEP
from ..specs import GPUSpec

# The flex dispatcher's kernels (DeepEP, HybridEP, Primus-Turbo's DeepEP) send one copy per destination rank,
# not per expert.
DEDUP_BACKENDS = FLEX_BACKENDS


@dataclass(frozen=True)
class LinkShare:
    """Fraction of a link's one-direction line rate a backend achieves, with its derivation."""

    intra: float  # scale-up domain (NVLink, NVL72, xGMI)
    inter: float  # RDMA NIC across domains
    source: str


# NCCL / RCCL all-to-all and all-gather (megatron-core alltoall and allgather dispatchers).
NCCL_NVIDIA = LinkShare(
    intra=370.0 / 450.0, inter=24.0 / 25.0,
    source="NCCL maintainer, nccl-tests issue #212: 370 GB/s busBw of H100's 450 GB/s NVLink line rate; "
           "NVIDIA/nccl issue #412: ~24 GB/s of a 25 GB/s HDR NIC")
RCCL_AMD = LinkShare(
    intra=48.0 / 64.0, inter=24.0 / 25.0,
    source="AMD ROCm blog 'Understanding RCCL Bandwidth and xGMI Performance on MI300X' (2025-03-02): "
           "~48 GB/s usable of each 64 GB/s xGMI link; NIC share as NCCL's")
# DeepEP V1 normal kernels (deepseek-ai/DeepEP docs/legacy.md): intranode EP8 on H800 153 GB/s dispatch,
# 158 GB/s combine of its ~160 GB/s NVLink; internode EP16/32/64 RDMA 43/58/51 (dispatch), 43/57/50
# (combine) GB/s of a 50 GB/s CX7 400G NIC, mean 50.3 GB/s.
DEEPEP_V1 = LinkShare(
    intra=155.5 / 160.0, inter=50.3 / 50.0,
    source="DeepEP docs/legacy.md (H800, CX7 400G): intranode 153/158 GB/s of 160; internode mean 50.3 GB/s of 50")
# DeepEP's intranode rate is bounded by the SMs it runs on: B200, 16 SMs, Torch API, BF16 dispatch 348 GB/s
# and combine 302 GB/s (DeepEP/hybrid-ep docs/README_Hybrid-EP.md comparison table): 20.3 GB/s per SM.
DEEPEP_GB_S_PER_SM = (348.0 + 302.0) / 2 / 16
DEEPEP_SMS = 20  # megatron-core fused_a2a.py set_deepep_num_sms default
# HybridEP (DeepEP branch hybrid-ep, docs/README_Hybrid-EP.md, Torch API, BF16 dispatch / combine):
# B200 8 ranks 16 SMs 535.94 / 530.86 GB/s of 900; H100 internode (8 SMs) 16 ranks 57.74 / 56.96,
# 32 ranks 46.54 / 50.68, 64 ranks 41.46 / 47.68 GB/s of a 50 GB/s NIC: "logical" rates, above the
# NIC's line rate at 16 ranks, taken as the rate of the bytes `moe_layer` counts (one copy per remote
# node). Read instead as rates over all of a rank's bytes, node-local share included (half the RDMA rate
# at 16 ranks), they overstate Megatron-Bridge's published EP-overlap pair (Qwen3-30B-A3B, 16 H100,
# HybridEP: 1.177x; 1.31x projected against 1.15x as taken here; tests/test_sharded_comm.py).
HYBRIDEP_INTRA = 533.4 / 900.0
HYBRIDEP_INTER_BY_RANKS = ((16, 57.35 / 50.0), (32, 48.61 / 50.0), (64, 44.57 / 50.0))
# Not resolved: the benchmark that prints these rates (DeepEP hybrid-ep tests/test_hybrid_ep.py) divides
# `count_rdma_send_from_routing_map` bytes by the time, one copy per distinct node a token touches with the
# own node counted ("to align with the implementation in the DeepEP, we do not set the local node map to
# zeros", tests/utils.py), and its NVL rate counts every row a rank receives, its own included. Counting
# `moe_layer`'s bytes that way doubles a 2-node group's RDMA bytes, and the Bridge pair above then projects
# 1.31x: the EP overlap would have to hide about half the exchange, which the model of it does not derive.
# HybridEP across a GB200 NVL72 domain (same table, MNNVL, 32 SMs): 8 ranks 550.10 / 568.94, 16 ranks
# 523.48 / 521.55, 32 ranks 484.22 / 464.54, 36 ranks 479.02 / 447.89 GB/s of 900.
HYBRIDEP_NVL72_BY_RANKS = ((8, 559.5 / 900.0), (16, 522.5 / 900.0), (32, 474.4 / 900.0), (36, 463.5 / 900.0))
# Primus-Turbo DeepEP (ROCm): no bandwidth table is published. AMD's breakdown of the MoE-2T model
# (448 experts, top-16, Primus moe_2T.yaml) on MI300X at EP 8, RCCL all-to-all against Turbo DeepEP
# (AMD-AGI/Primus examples/moe_package/README.md Figure 11, same compute in both runs): the exchange is
# 13.2 % of an iteration whose compute is 43.8 %, and 8.9 % of one whose compute is 55.8 %, so DeepEP
# takes (8.9 / 55.8) / (13.2 / 43.8) = 0.529 of the all-to-all's time. It moves one copy per distinct
# destination rank, 7 x (1 - C(392, 16) / C(448, 16)) = 6.205 per token (`moe_layer._distinct`), where
# the all-to-all moves 16 x 7/8 = 14: 0.4432 of the bytes. Its achieved rate is therefore
# 0.4432 / 0.529 = 0.8375 of RCCL's all-to-all rate (derived). RDMA: no figure, DeepEP's NVIDIA share is
# borrowed.
TURBO_VS_RCCL_TIME = (8.9 / 55.8) / (13.2 / 43.8)
TURBO_VS_RCCL_BYTES = 6.2053 / 14.0
TURBO_DEEPEP_SHARE = LinkShare(
    intra=RCCL_AMD.intra * TURBO_VS_RCCL_BYTES / TURBO_VS_RCCL_TIME, inter=DEEPEP_V1.inter,
    source="Primus examples/moe_package/README.md Figure 11 (MI300X EP8, MoE-2T: Turbo DeepEP 0.529 of "
           "RCCL all-to-all's time for 0.443 of its bytes -> 0.8375 of RCCL's rate, derived); RDMA share "
           "borrowed from DeepEP (no ROCm figure published)")


def _by_ranks(table: tuple[tuple[int, float], ...], ranks: int) -> float:
    """The entry of the largest published rank count not above `ranks` (the first below the table)."""
    value = table[0][1]
    for n, share in table:
        if ranks >= n:
            value = share
    return value


def link_rates(backend: str, gpu: GPUSpec, ranks: int, domain: int) -> tuple[float, float]:
    """(scale-up, RDMA) achieved GB/s of one rank's dispatch traffic for `backend` on `gpu`, in an EP group
    of `ranks` whose scale-up domain holds `domain` GPUs."""
    line_intra, line_inter = gpu.intra_node_gb_s, gpu.inter_node_gb_s
    if backend in (ALLGATHER, ALLTOALL):
        share = RCCL_AMD if gpu.vendor == "amd" else NCCL_NVIDIA
        return line_intra * share.intra, line_inter * share.inter
    if backend == TURBO_DEEPEP:
        return line_intra * TURBO_DEEPEP_SHARE.intra, line_inter * TURBO_DEEPEP_SHARE.inter
    if backend == HYBRIDEP:
        intra = (_by_ranks(HYBRIDEP_NVL72_BY_RANKS, min(ranks, domain)) if domain > 8 else HYBRIDEP_INTRA)
        return line_intra * intra, line_inter * _by_ranks(HYBRIDEP_INTER_BY_RANKS, ranks)
    return (min(line_intra * DEEPEP_V1.intra, DEEPEP_SMS * DEEPEP_GB_S_PER_SM), line_inter * DEEPEP_V1.inter)
