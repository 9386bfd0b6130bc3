"""Achieved bandwidth of each MoE token-dispatch backend, as the kernels' authors publish it.

Each backend moves tokens inside the scale-up domain (NVLink / NVL72 / xGMI) and across it (the GPU's
RDMA NIC). The achieved rate is a published figure divided by the line rate of the link it was
measured on, applied to the catalog GPU's line rate (`intra_node_gb_s`, `inter_node_gb_s`), so each
entry below is one published measurement and its derivation. Byte counts are the backend's own
(`oracle.performance.moe_layer`): NCCL all-to-all moves one copy per selected expert, DeepEP and
HybridEP one copy per distinct destination rank (and one per distinct remote node over RDMA).
"""

from __future__ import annotations

from collections.abc import Callable
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
# 158 GB/s combine of its ~160 GB/s NVLink; internode EP16/32/64 "RDMA bottleneck bandwidth" 43/58/51
# (dispatch), 43/57/50 (combine) GB/s on a 50 GB/s CX7 400G NIC per GPU, 8 GPUs per node.
DEEPEP_V1_INTRA = 155.5 / 160.0
DEEPEP_V1_INTER_BY_RANKS = ((16, 43.0 / 50.0), (32, 57.5 / 50.0), (64, 50.5 / 50.0))
# The internode figures above and HybridEP's below count one copy per distinct node a token touches with
# the sender's own node included (DeepEP tests/test_internode.py `num_rdma_token_sent =
# rdma_idx.ne(-1).sum()`; hybrid-ep tests/utils.py `count_rdma_send_from_routing_map`: "to align with the
# implementation in the DeepEP, we do not set the local node map to zeros"). Measured at the NIC
# (deepseek-ai/DeepEP issue #51, mlnx_perf counters) the printed rate is N/(N-1) times the RDMA traffic of
# N nodes, and the maintainer reads EP16's 43 GB/s as 43 x 0.5 = 21.5 GB/s on the wire (issue #285). Under
# uniform routing a token touches each node alike, so of the counted bytes (N-1)/N cross the NIC: the rate
# of the bytes `moe_layer` sends over RDMA (remote nodes only) is the printed one times (N-1)/N, N = the
# benchmark's ranks / 8 (`_remote_share`).
BENCH_GPUS_PER_NODE = 8  # DeepEP's and HybridEP's internode tables: 8-GPU H800 / H100 nodes
# DeepEP's intranode rate is bounded by the SMs it runs on: B200, 16 SMs, Torch API, BF16 dispatch 348 GB/s
# and combine 302 GB/s (DeepEP/hybrid-ep docs/README_Hybrid-EP.md comparison table): 20.3 GB/s per SM.
DEEPEP_GB_S_PER_SM = (348.0 + 302.0) / 2 / 16
DEEPEP_SMS = 20  # DeepEP `Buffer.num_sms` default, megatron-core 0.16.1 `moe_deepep_num_sms` default


def _shares(line: float, *entries: tuple[int, float, float]) -> tuple[tuple[int, float], ...]:
    """((ranks, share of `line`), ...) from published (ranks, dispatch GB/s, combine GB/s): their mean."""
    return tuple((ranks, (dispatch + combine) / 2 / line) for ranks, dispatch, combine in entries)


# HybridEP's rates by the SMs its dispatch and combine run on (`moe_hybridep_num_sms`; DeepEP branch hybrid-ep
# 94a9f8f6b1 docs/README_Hybrid-EP.md, Torch API, mean of BF16 dispatch and combine, GB/s), each table
# {SMs: ((ranks, share of the line rate), ...)}:
# B200, 8 ranks in one node, 16 SMs: 535.94 / 530.86 of 900 (the only SM count published there; on GB200 the
# 8-rank rate moves 2.4 % from 16 to 32 SMs, so it is held for every SM count).
HYBRIDEP_INTRA = 533.4 / 900.0
# GB200 NVL72 domain (MNNVL), 16 and 32 SMs, of 900 GB/s:
HYBRIDEP_NVL72 = {
    16: _shares(900.0, (8, 550.10, 538.44), (16, 472.84, 474.48), (32, 485.50, 423.19), (36, 469.96, 418.27)),
    32: _shares(900.0, (8, 545.71, 568.94), (16, 523.48, 521.55), (32, 484.22, 464.54), (36, 479.02, 447.89)),
}
# H100 internode (8-GPU nodes, 50 GB/s NIC), 4, 8 and 16 SMs, counted with the own node included like DeepEP's
# (above; the 16-rank figures exceed the NIC's line rate only that way).
HYBRIDEP_INTER = {
    4: _shares(50.0, (16, 37.08, 42.47), (32, 44.88, 43.60), (64, 40.63, 41.00)),
    8: _shares(50.0, (16, 57.74, 56.96), (32, 46.54, 50.68), (64, 41.46, 47.68)),
    16: _shares(50.0, (16, 54.47, 53.35), (32, 47.36, 52.53), (64, 41.24, 46.57)),
}
# HybridEP's own SM count when megatron-core passes none: 24 inside one NVLink domain, 8 across domains
# (DeepEP hybrid-ep 94a9f8f6b1 csrc/hybrid_ep/config.cuh `Configurer`, num_sms_dispatch_api / _combine_api).
HYBRIDEP_OWN_SMS = (24, 8)
# Primus-Turbo DeepEP (ROCm): no bandwidth table is published. AMD's breakdown of the MoE-2T model
# (448 experts, top-16, Primus moe_2T.yaml) on MI300X at EP 8, RCCL all-to-all against Turbo DeepEP
# (AMD-AGI/Primus examples/moe_package/README.md Figure 11, same compute in both runs): the exchange is
# 13.2 % of an iteration whose compute is 43.8 %, and 8.9 % of one whose compute is 55.8 %, so DeepEP
# takes (8.9 / 55.8) / (13.2 / 43.8) = 0.529 of the all-to-all's time. It moves one copy per distinct
# destination rank, 7 x (1 - C(392, 16) / C(448, 16)) = 6.205 per token (`moe_layer._distinct`), where
# the all-to-all moves 16 x 7/8 = 14: 0.4432 of the bytes. Its achieved rate is therefore
# 0.4432 / 0.529 = 0.8375 of RCCL's all-to-all rate (derived). RDMA: no ROCm figure is published; DeepEP's
# internode table is borrowed (`link_rates`).
TURBO_VS_RCCL_TIME = (8.9 / 55.8) / (13.2 / 43.8)
TURBO_VS_RCCL_BYTES = 6.2053 / 14.0
TURBO_DEEPEP_INTRA = RCCL_AMD.intra * TURBO_VS_RCCL_BYTES / TURBO_VS_RCCL_TIME


def _entry(table: tuple[tuple[int, float], ...], ranks: int) -> tuple[int, float]:
    """The (rank count, share) entry of the largest published rank count not above `ranks` (the first
    below the table)."""
    out = table[0]
    for entry in table:
        if ranks >= entry[0]:
            out = entry
    return out


def _by_ranks(table: tuple[tuple[int, float], ...], ranks: int) -> float:
    """The share of `_entry`."""
    return _entry(table, ranks)[1]


def _remote_share(table: tuple[tuple[int, float], ...], ranks: int) -> float:
    """Share of the NIC's line rate that remote-node bytes move at, from an internode table whose printed
    rates count the own node's copies too: printed share x (N-1)/N for the N = ranks / 8 nodes of the
    table entry used (DeepEP issues #51, #285; see above)."""
    count, share = _entry(table, ranks)
    nodes = count // BENCH_GPUS_PER_NODE
    return share * (nodes - 1) / nodes


def _by_sms(tables: dict[int, tuple[tuple[int, float], ...]], sms: int,
            share: Callable[[tuple[tuple[int, float], ...]], float]) -> float:
    """`share(table)` at `sms` SMs: linear between the published SM counts around it, held at the nearest
    published count outside them (no figure is published there)."""
    counts = sorted(tables)
    lo = max((n for n in counts if n <= sms), default=counts[0])
    hi = min((n for n in counts if n >= sms), default=counts[-1])
    if lo == hi:
        return share(tables[lo])
    w = (sms - lo) / (hi - lo)
    return (1 - w) * share(tables[lo]) + w * share(tables[hi])


def link_rates(backend: str, gpu: GPUSpec, ranks: int, domain: int, sms: int | None = None) -> tuple[float, float]:
    """(scale-up, RDMA) achieved GB/s of one rank's dispatch traffic for `backend` on `gpu`, in an EP group
    of `ranks` whose scale-up domain holds `domain` GPUs; `sms`: the SMs DeepEP or HybridEP runs on
    (`moe_deepep_num_sms`, `moe_hybridep_num_sms`; None: the kernel's own default)."""
    line_intra, line_inter = gpu.intra_node_gb_s, gpu.inter_node_gb_s
    if backend in (ALLGATHER, ALLTOALL):
        share = RCCL_AMD if gpu.vendor == "amd" else NCCL_NVIDIA
        return line_intra * share.intra, line_inter * share.inter
    deepep_inter = line_inter * _remote_share(DEEPEP_V1_INTER_BY_RANKS, ranks)
    if backend == TURBO_DEEPEP:
        return line_intra * TURBO_DEEPEP_INTRA, deepep_inter
    if backend == HYBRIDEP:
        sms = sms or HYBRIDEP_OWN_SMS[0 if ranks <= domain else 1]
        in_domain = min(ranks, domain)
        intra = (_by_sms(HYBRIDEP_NVL72, sms, lambda t: _by_ranks(t, in_domain)) if domain > 8
                 else HYBRIDEP_INTRA)
        inter = _by_sms(HYBRIDEP_INTER, sms, lambda t: _remote_share(t, ranks))
        return line_intra * intra, line_inter * inter
    return min(line_intra * DEEPEP_V1_INTRA, (sms or DEEPEP_SMS) * DEEPEP_GB_S_PER_SM), deepep_inter
