"""Alpha-beta collectives over intra-node and inter-node links, for groups laid out in rank order.

A group of `size` ranks `stride` apart (Megatron orders ranks tp-cp-ep-dp-pp, so TP has stride 1, CP
stride TP, DP stride TP·CP, PP stride TP·CP·DP) shares a node while it fits in `gpus_per_node`;
past that it spans nodes with `members per node` ranks on each. Collectives on a spanning group are
costed as bandwidth-optimal hierarchical ones: the intra-node part over NVLink/xGMI, the rest over
each GPU's NIC. Byte counts are the full (gathered) buffer; times are milliseconds. The MoE token
exchange is `moe_layer.dispatch_combine`'s, at its backend's published rates (`ep_bandwidth.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from ..specs import GPUSpec
from .calibration import Constants


@dataclass(frozen=True)
class Net:
    """Effective link speeds (bytes per ms) and latencies (ms) of one cluster."""

    intra: float
    inter: float
    gpus_per_node: int
    alpha_intra: float
    alpha_inter: float
    a2a_peer: float

    @classmethod
    def of(cls, gpu: GPUSpec, gpus_per_node: int, c: Constants) -> Net:
        intra, inter = gpu.intra_node_gb_s * 1e6, gpu.inter_node_gb_s * 1e6  # GB/s -> bytes/ms
        return cls(
            intra * c.link_eff, inter * c.link_eff, gpus_per_node, c.alpha_intra_us * 1e-3,
            c.alpha_inter_us * 1e-3, c.a2a_peer_us * 1e-3,
        )

    def span(self, size: int, stride: int) -> tuple[int, int]:
        """(members per node, nodes) of a group of `size` ranks `stride` apart."""
        if size * stride <= self.gpus_per_node:
            return size, 1
        per_node = max(1, self.gpus_per_node // stride)
        return per_node, ceil(size / per_node)

    def reduce_scatter(self, nbytes: float, size: int, stride: int) -> float:
        """Reduce-scatter (or all-gather) of an `nbytes` buffer: intra-node ring, then inter-node ring."""
        return self.ring(nbytes, size, stride, self.intra, self.inter)

    def ring(self, nbytes: float, size: int, stride: int, intra: float, inter: float) -> float:
        """A ring reduce-scatter / all-gather of `nbytes` at the given link rates (bytes per ms): each rank
        sends (k-1)/k of the buffer inside its node, then 1/k of it (nodes-1)/nodes across nodes."""
        if size <= 1 or nbytes <= 0:
            return 0.0
        k, nodes = self.span(size, stride)
        t = nbytes * (k - 1) / k / intra + (k - 1) * self.alpha_intra
        if nodes > 1:
            t += nbytes / k * (nodes - 1) / nodes / inter + (nodes - 1) * self.alpha_inter
        return t

    all_gather = reduce_scatter

    def all_reduce(self, nbytes: float, size: int, stride: int) -> float:
        return 2.0 * self.reduce_scatter(nbytes, size, stride)

    def p2p(self, nbytes: float, inter_node: bool) -> float:
        """One send/recv between neighbouring pipeline stages."""
        if inter_node:
            return self.alpha_inter + nbytes / self.inter
        return self.alpha_intra + nbytes / self.intra
