"""Which layers each GPU of the pipeline holds, and how many micro-batches it keeps at its peak.

The PP x VPP chunks are the layout facts' stages (`oracle.layout`, by Megatron's split: even, embedding/loss
accounting, first/last counts or a layout string). GPU i holds chunk i (1F1B, ZB-H1), chunks i, i+PP,
... (interleaved), or chunks i and 2PP-1-i (ZB-V's "V"). The peak is counted in chunk-micro-batches
whose activations are stored at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..layout import RecomputePlan, StageLayers
from ..model_shape import ModelShape


def device_chunk_ids(i: int, pp: int, vpp: int, zbv: bool) -> tuple[int, ...]:
    if zbv and vpp == 2:
        return (i, 2 * pp - 1 - i)
    return tuple(i + j * pp for j in range(vpp))


@lru_cache(maxsize=4096)
def candidate_devices(g: ModelShape, all_chunks: tuple[StageLayers, ...], pp: int, vpp: int, zbv: bool
                      ) -> tuple[tuple[int, tuple[StageLayers, ...]], ...]:
    """One GPU per distinct set of held layers (`all_chunks`: the layout facts' stages): the lowest-index
    one, which (for every schedule here) keeps at least as many micro-batches in flight as any later GPU
    with the same layers."""
    seen: set = set()
    out = []
    for i in range(pp):
        held = tuple(all_chunks[c] for c in device_chunk_ids(i, pp, vpp, zbv) if c < len(all_chunks))
        sig = tuple(
            (g.pattern[c.start : c.start + c.layers], c.has_embedding, c.has_output, c.has_mtp)
            for c in held
        )
        if sig not in seen:
            seen.add(sig)
            out.append((i, held))
    return tuple(out)


def saturated_microbatches(schedule: str, pp: int, vpp: int, nmb: int, extra: int = 0) -> int:
    """`nmb` capped where the peaks (`peak_chunk_microbatches`) stop changing: the plan cache's key,
    so layouts that differ only in how many micro-batches follow the warm-up share one plan.

    1F1B, ZB-H1 and ZB-V store at most PP; interleaving beyond PP micro-batches stores warm-up + 1 on
    every GPU once nmb x VPP exceeds GPU 0's warm-up, (PP-1)*2 + (VPP-1)*PP chunk forwards."""
    nmb = max(nmb, 1)
    if vpp == 1 or (schedule == "zbv" and vpp == 2):
        return min(nmb, pp)
    if nmb <= pp:
        return nmb
    warm0 = (pp - 1) * 2 + (vpp - 1) * pp + extra
    return max(pp + 1, min(nmb, warm0 // vpp + 1))


def peak_chunk_microbatches(schedule: str, pp: int, vpp: int, nmb: int, i: int, extra: int = 0
                            ) -> tuple[tuple[int, ...], int]:
    """(micro-batches stored at the peak for each chunk GPU i holds, deferred W passes (ZB-H1)).

    1F1B: GPU i runs PP-i warm-up/steady forwards before its first backward -> min(PP-i, m) stored.
    Interleaved (Megatron): warm-up (PP-i-1)*2 + (VPP-1)*PP chunk forwards, +1 in the steady state,
      all m*VPP when m == PP; forwards go in groups of PP micro-batches per chunk, so chunk j holds the
      forwards k < n with (k // PP) % VPP == j. For GPU 0 this is PP*VPP + PP-1 chunk-micro-batches =
      (1 + (PP-1)/(PP*VPP)) x PP stage-micro-batches (Korthikanti §4.2.3, Narayanan 2021).
    ZB-H1 ("zb"): the 1F1B peak, plus deferred weight-gradient passes: GPU i postpones up to PP-1-i
      W passes into the bubble, each keeping its linear inputs and output gradients (assumption: the
      Megatron/Primus zero-bubble port queues these beside the 1F1B in-flight activations).
    ZB-V ("zbv", VPP=2): 2*PP chunk-micro-batches at the peak on every GPU (balanced), PP per chunk.
    `extra` more warm-up chunk-forwards under interleaving: 1 with EP all-to-all overlap, which
    schedules one more forward before the steady state (megatron-core 0.16.1 schedules.py).
    """
    nmb = max(nmb, 1)
    if schedule == "zbv" and vpp == 2:
        n = min(pp, nmb)
        return (n, n), 0
    if vpp > 1:
        total = nmb * vpp
        warm = (pp - i - 1) * 2 + (vpp - 1) * pp + extra
        n = total if (nmb == pp or warm >= total) else warm + 1
        counts = [0] * vpp
        blocks, rem = divmod(n, pp)
        for b in range(blocks):
            counts[b % vpp] += pp
        if rem:
            counts[blocks % vpp] += rem
        return tuple(counts), 0
    n = min(pp - i, nmb)
    pending_w = min(pp - 1 - i, nmb) if schedule == "zb" else 0
    return (n,), pending_w


@dataclass(frozen=True, slots=True)
class DevicePlan:
    """What one candidate GPU holds and stores at its peak, in layer x micro-batch units."""

    index: int
    dense_layers: float  # layers held (parameters)
    moe_layers: float
    has_embedding: bool
    has_output: bool
    dense_full_mb: float  # sum over held chunks of (micro-batches stored) x (dense layers kept whole)
    moe_full_mb: float
    dense_input_mb: float  # ... x (stored layer inputs of recomputed dense layers / groups)
    moe_input_mb: float
    has_mtp: bool
    embedding_mb: int  # micro-batches stored by the chunk with the embedding
    output_mb: int  # ... by the chunk with the output layer
    mtp_mb: int  # ... by the chunk with the MTP block
    recompute_groups: tuple[tuple[float, bool, bool], ...]  # (layers recomputed at once, dense?, moe?)
    wgrad_dense_mb: float  # deferred W passes x dense layers (ZB-H1)
    wgrad_moe_mb: float
    inflight: float  # layer-weighted micro-batches in flight


@lru_cache(maxsize=16384)
def device_plans(
    g: ModelShape, all_chunks: tuple[StageLayers, ...], pp: int, vpp: int, schedule: str, nmb: int,
    rec: RecomputePlan, extra: int = 0
) -> tuple[DevicePlan, ...]:
    """The plan of every candidate GPU that could be the most loaded (none an earlier one covers)."""
    out = []
    for index, held in candidate_devices(g, all_chunks, pp, vpp, schedule == "zbv"):
        counts, pending_w = peak_chunk_microbatches(schedule, pp, vpp, nmb, index, extra)
        dense = moe = d_full = m_full = d_in = m_in = w_d = w_m = layer_mbs = 0.0
        emb_mb = out_mb = mtp_mb = 0
        groups = set()
        for ch, n in zip(held, counts):
            dense += ch.dense
            moe += ch.moe
            redo = rec.chunk(g.pattern, ch.start, ch.layers)  # recomputed layers keep only their inputs
            d_full += n * (ch.dense - redo.dense)
            m_full += n * (ch.moe - redo.moe)
            d_in += n * redo.dense_inputs
            m_in += n * redo.moe_inputs
            if redo.group:
                groups.add((float(redo.group), ch.dense > 0, ch.moe > 0))
            layer_mbs += n * ch.layers
            if ch.has_embedding:
                emb_mb = n
            if ch.has_output:
                out_mb = n
            if ch.has_mtp:
                mtp_mb = n
            w_d += pending_w * ch.dense
            w_m += pending_w * ch.moe
        out.append(
            DevicePlan(
                index, dense, moe, any(c.has_embedding for c in held), any(c.has_output for c in held),
                d_full, m_full, d_in, m_in, any(c.has_mtp for c in held), emb_mb, out_mb, mtp_mb,
                tuple(sorted(groups)), w_d, w_m,
                layer_mbs / (dense + moe) if dense + moe else 0.0,
            )
        )
    loads = [_load(p) for p in out]
    return tuple(p for i, p in enumerate(out) if not any(_covers(earlier, loads[i]) for earlier in loads[:i]))


def _load(p: DevicePlan) -> tuple[float, ...]:
    """Every quantity a GPU's memory grows with (the estimate weighs each by a non-negative size);
    a recompute group counts through the most layers it recomputes at once, per layer type."""
    dense_group = max((layers for layers, has_d, _ in p.recompute_groups if has_d), default=0.0)
    moe_group = max((layers for layers, _, has_m in p.recompute_groups if has_m), default=0.0)
    return (p.dense_layers, p.moe_layers, p.has_embedding, p.has_output, p.has_mtp, p.dense_full_mb, p.moe_full_mb,
            p.dense_input_mb, p.moe_input_mb, p.embedding_mb, p.output_mb, p.mtp_mb, dense_group, moe_group,
            p.wgrad_dense_mb, p.wgrad_moe_mb)


def _covers(earlier: tuple[float, ...], later: tuple[float, ...]) -> bool:
    """Whether a GPU with load `earlier` holds at least as much of everything as one with `later`:
    then the later GPU can never be the first most-loaded one, so the estimate need not look at it."""
    return all(a >= b for a, b in zip(earlier, later))
