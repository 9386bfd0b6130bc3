"""The layout facts of one configuration, derived once (torchtitan's `ParallelDims` idea): data-parallel
sizes, micro-batches, sequence parallelism, tokens per rank, the per-stage layer assignment (where
uneven pipeline splits live), the recompute plan, the MoE dispatch backend, the data-parallel sharding and
the communication overlaps in effect.

Legality, memory, time and benchmark mode read `layout_facts(model, cfg, world)`; none of them
derives these again. Sizes follow megatron-core 0.16.1 `parallel_state.initialize_model_parallel`
(dense grid TP·CP·DP·PP, expert grid ETP·EP·expert-DP·PP) and `num_microbatches_calculator.py`
(GBS / (MBS·DP)); the stages follow `oracle.pipeline_split`; the recompute plan follows
megatron-core 0.16.1 `transformer_block.py` `_checkpointed_forward` (uniform: every layer, in groups of
recompute_num_layers; block: the first recompute_num_layers layers of each chunk; default 1 layer) and
Primus's patch of it (`recompute_layer_ids`: exactly the listed global layers, each alone);
`RecomputePlan.chunk` is the one place that says which layers of a chunk are recomputed and what they keep.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from .identity_cache import by_identity
from .pipeline_split import PipelineSplit, SplitError, Stage, split_outcome
from .specs import EffectiveConfig, ModelArch

MEGATRON_RECOMPUTE_NUM_LAYERS = 1  # --recompute-num-layers default (megatron/training/arguments.py)


# MoE dispatch backends: the one reading of the three dispatcher knobs (megatron-core 0.16.1
# moe_token_dispatcher_type, its moe_flex_dispatcher_backend, Primus's use_turbo_deepep, which Primus runs as the
# flex dispatcher: primus/backends/megatron/patches/args/rocm_arg_validation.py).
ALLGATHER, ALLTOALL, DEEPEP, HYBRIDEP, TURBO_DEEPEP = "allgather", "alltoall", "deepep", "hybridep", "turbo_deepep"
DISPATCH_BACKENDS = (ALLGATHER, ALLTOALL, DEEPEP, HYBRIDEP, TURBO_DEEPEP)
FLEX_BACKENDS = frozenset({DEEPEP, HYBRIDEP, TURBO_DEEPEP})  # run as the flex dispatcher (token_dispatcher.py)
# The knobs that choose each backend (the search writes these; `dispatch_backend` reads them back).
DISPATCH_KNOBS: dict[str, dict[str, object]] = {
    ALLGATHER: {"moe_token_dispatcher_type": "allgather", "use_turbo_deepep": False},
    ALLTOALL: {"moe_token_dispatcher_type": "alltoall", "use_turbo_deepep": False},
    DEEPEP: {"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "deepep", "use_turbo_deepep": False},
    HYBRIDEP: {"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
               "use_turbo_deepep": False},
    TURBO_DEEPEP: {"moe_token_dispatcher_type": "flex", "use_turbo_deepep": True},
}


def dispatch_backend(dispatcher: str, flex_backend: str, turbo_deepep: bool) -> str:
    """The backend that moves a MoE layer's tokens for these dispatcher knobs: Primus-Turbo's DeepEP, the flex
    dispatcher's backend (DeepEP or HybridEP), or the all-to-all / allgather dispatcher."""
    if turbo_deepep:
        return TURBO_DEEPEP
    return flex_backend if dispatcher == "flex" else dispatcher


def replicas(world: int, group: int) -> int:
    """How many copies of a `group`-GPU model-parallel group fill `world`: 0 when it does not divide."""
    return world // group if world % group == 0 else 0


def microbatch_count(gbs: int, mbs: int, dp: int) -> int:
    """GBS / (MBS·DP), 0 when it does not divide (or DP is 0)."""
    return gbs // (mbs * dp) if dp and gbs % (mbs * dp) == 0 else 0


class StageLayers(NamedTuple):
    """One virtual pipeline stage (a model chunk): its dense and MoE decoder layers, where they start in
    the model, and whether it holds the embedding, the output layer and loss, the MTP block."""

    dense: int
    moe: int
    start: int  # index of its first decoder layer in the model
    has_embedding: bool
    has_output: bool
    has_mtp: bool

    @property
    def layers(self) -> int:
        return self.dense + self.moe


class ChunkRecompute(NamedTuple):
    """What full recompute does to one chunk's decoder layers: how many of each kind the backward reruns
    (time), and the layer inputs stored in their place (memory: one per checkpointed group, spread over the
    kinds in the chunk's proportion under "uniform"), with the most layers recomputed at once."""

    dense: int  # dense layers recomputed
    moe: int  # MoE layers recomputed
    dense_inputs: float  # stored inputs of the recomputed dense layers (their groups)
    moe_inputs: float
    group: int  # layers one checkpoint recomputes at once; 0 when none is


NO_CHUNK_RECOMPUTE = ChunkRecompute(0, 0, 0.0, 0.0, 0)


class RecomputePlan(NamedTuple):
    """Activation recomputation of a layout: full (`method`, `layers`) or selective (`modules`)."""

    full: bool
    method: str | None  # "uniform" or "block" under full recompute
    layers: int  # recompute_num_layers resolved (Megatron's default 1); 0 without full recompute
    modules: tuple[str, ...]  # selective-recompute modules
    layer_ids: frozenset[int] = frozenset()  # Primus recompute_layer_ids under full recompute (empty: none set)

    @property
    def block(self) -> int | None:
        """Layers recomputed at the start of each chunk under method "block"; None: every layer."""
        return self.layers if self.full and self.method == "block" else None

    def recomputed(self, pattern: tuple[int, ...], start: int, count: int) -> tuple[int, ...]:
        """The kinds (1 = MoE, model_shape's pattern) of the layers full recompute redoes in the chunk of `count`
        decoder layers from global layer `start`: every layer (uniform), the first `layers` (block), or with
        Primus's `recompute_layer_ids` exactly the listed ones (AMD-AGI/Primus fd1eeab
        primus/backends/megatron/patches/recompute_layer_patches.py: `_checkpointed_forward` checkpoints block
        layer i alone iff `i + layer_offset` is listed). `recompute_num_layers` 0 recomputes nothing (Megatron's
        uniform loop would not advance). MTP depths (ids from num_layers on) are not decoder layers of a chunk:
        `recomputes_mtp` says whether the MTP block's layers are."""
        if not self.full or self.layers <= 0:
            return ()
        layers = pattern[start:start + count]
        if self.layer_ids:
            return tuple(kind for i, kind in enumerate(layers, start) if i in self.layer_ids)
        return layers if self.block is None else layers[:self.block]

    def chunk(self, pattern: tuple[int, ...], start: int, count: int) -> ChunkRecompute:
        """The chunk of `count` decoder layers from global layer `start` under this plan (`recomputed`): block
        and `recompute_layer_ids` checkpoint each recomputed layer alone (megatron-core 0.16.1
        transformer_block.py `_checkpointed_forward`: `custom(l, l + 1)`; Primus's patch likewise); uniform
        checkpoints groups of `layers`, ceil(count / layers) stored inputs. Memory and time both read it."""
        redo = self.recomputed(pattern, start, count)
        if not redo:
            return NO_CHUNK_RECOMPUTE
        moe = sum(redo)
        dense = len(redo) - moe
        if self.layer_ids or self.block is not None:
            return ChunkRecompute(dense, moe, float(dense), float(moe), 1)
        groups = -(-count // self.layers)
        return ChunkRecompute(dense, moe, groups * dense / count, groups * moe / count, min(self.layers, count))

    def recomputes_mtp(self, num_layers: int) -> bool:
        """Whether full recompute also redoes the MTP block (so memory keeps only its input): always, but with
        Primus's `recompute_layer_ids`, which address MTP depth d as num_layers + d
        (recompute_layer_patches.py), only when one is listed. Time does not model MTP recompute."""
        return self.full and (not self.layer_ids or max(self.layer_ids) >= num_layers)


class Sharding(NamedTuple):
    """What the data-parallel groups shard: torch FSDP2 all three (Megatron-LM arguments.py: it excludes the
    distributed optimizer); Megatron-FSDP what its data_parallel_sharding_strategy names (optim, optim_grads,
    optim_grads_params: megatron-core 0.16.1 distributed_data_parallel_config.py; no_shard: none); otherwise the
    distributed optimizer shards the optimizer state (distrib_optimizer.py), and nothing else is."""

    weights: bool  # gathered layer by layer (ZeRO-3)
    grads: bool  # reduce-scattered and kept sharded (ZeRO-2)
    optimizer: bool  # optimizer state (ZeRO-1): gradients reduce-scattered, weights all-gathered each step


def _sharding(torch_fsdp2: bool, megatron_fsdp: bool, strategy: str, distributed_optimizer: bool) -> Sharding:
    if torch_fsdp2:
        return Sharding(True, True, True)
    if megatron_fsdp:
        return Sharding(strategy == "optim_grads_params", strategy in ("optim_grads", "optim_grads_params"),
                        strategy != "no_shard")
    return Sharding(False, False, distributed_optimizer)


class Overlaps(NamedTuple):
    """The communication overlaps in effect (a knob that asks for one where its traffic does not exist runs
    without it; legality reads the knobs themselves)."""

    tp: bool  # tp_comm_overlap with TP > 1: TP collectives pipelined with their GEMMs (TE userbuffers)
    ep: bool  # overlap_moe_expert_parallel_comm with EP > 1: dispatch/combine behind another micro-batch
    shared_experts: bool  # moe_shared_expert_overlap with the all-to-all dispatcher (transformer_config.py)
    grad_reduce: bool  # overlap_grad_reduce: gradient buckets reduced during the last backward


@lru_cache(maxsize=1024)
def _features(dispatcher: str, flex_backend: str, turbo_deepep: bool, torch_fsdp2: bool, megatron_fsdp: bool,
              strategy: str, distributed_optimizer: bool, tp_overlap: bool, tp_group: bool, ep_overlap: bool,
              ep_group: bool, shared_overlap: bool, grad_reduce: bool) -> tuple[str, Sharding, Overlaps]:
    """(dispatch backend, sharding, overlaps) of these knob values, one object each per distinct setting
    (`tp_group` / `ep_group`: TP > 1, EP > 1)."""
    dispatch = dispatch_backend(dispatcher, flex_backend, turbo_deepep)
    overlaps = Overlaps(tp_overlap and tp_group, ep_overlap and ep_group, shared_overlap and dispatch == ALLTOALL,
                        grad_reduce)
    return dispatch, _sharding(torch_fsdp2, megatron_fsdp, strategy, distributed_optimizer), overlaps


class LayoutFacts(NamedTuple):
    """What a layout is, in numbers every part of the oracle reads (0 = does not divide); a named
    tuple because one is built for every new layout of a search."""

    world: int
    dp: int  # world / (TP·PP·CP)
    edp: int  # world / (ETP·EP·PP), the expert-data-parallel size
    microbatches: int  # GBS / (MBS·DP) per pipeline per iteration
    microbatches_or_1: int  # for formulas that need a count even on an illegal layout: GBS // (MBS·max(DP, 1)), >= 1
    sp: bool  # sequence parallelism in effect (`resolve` keeps it only with TP > 1)
    vpp: int  # model chunks per pipeline rank (ZB-V: 2)
    tokens: float  # tokens of one micro-batch on one rank (MBS·seq / CP)
    split: PipelineSplit
    stages: tuple[Stage, ...]  # virtual stages in model order (`stages_or_spread`: an even spread when refused)
    split_error: SplitError | None  # why Megatron refuses the split, if it does
    chunks: tuple[StageLayers, ...]  # the layers of each virtual stage, in model order
    recompute: RecomputePlan
    dispatch: str  # MoE dispatch backend (`dispatch_backend`): one of DISPATCH_BACKENDS
    sharding: Sharding  # what the data-parallel groups shard
    overlaps: Overlaps  # the communication overlaps in effect

    @property
    def dp_or_1(self) -> int:
        """DP for formulas that need a size even on an illegal layout."""
        return self.dp or 1

    @property
    def edp_or_1(self) -> int:
        return self.edp or 1



@lru_cache(maxsize=4096)
def _split_of(layout: str | None, first: int | None, last: int | None, embedding: bool, loss: bool) -> PipelineSplit:
    """One `PipelineSplit` object per value (layouts of a search share a few splits)."""
    return PipelineSplit(layout, first, last, embedding, loss)


@by_identity(maxsize=4096)
def _stage_layers(pattern: tuple[int, ...], stages: tuple[Stage, ...]) -> tuple[StageLayers, ...]:
    """Each stage's dense and MoE layers, from the model's layer kinds (`pattern`, 1 = MoE); cached on the
    two objects (the model's pattern, and the split cache's stages shared by every layout with that split)."""
    out, start = [], 0
    for st in stages:
        moe = sum(pattern[start:start + st.decoders])
        out.append(StageLayers(st.decoders - moe, moe, start, st.embedding, st.loss, st.mtp > 0))
        start += st.decoders
    return tuple(out)


@lru_cache(maxsize=1024)
def _recompute_plan(granularity: str | None, method: str | None, layers: int | None,
                    modules: tuple[str, ...] | None, layer_ids: tuple[int, ...] | None) -> RecomputePlan:
    full = granularity == "full"
    n = (MEGATRON_RECOMPUTE_NUM_LAYERS if layer_ids or layers is None else layers) if full else 0
    return RecomputePlan(full, method if full else None, n, tuple(modules or ()) if granularity == "selective" else (),
                         frozenset(layer_ids or ()) if full else frozenset())


def _derive(model: ModelArch, cfg: EffectiveConfig, world: int) -> LayoutFacts:
    c = cfg.__dict__
    tp, pp, cp = c["tp"], c["pp"], c["cp"]
    vpp = 2 if c["pp_schedule"] == "zbv" else c["vpp"]  # ZB-V runs two chunks per rank (its "V")
    dp = replicas(world, tp * pp * cp)
    split = _split_of(c["pp_layout"], c["pp_first_layers"], c["pp_last_layers"], c["pp_embedding_in_split"],
                      c["pp_loss_in_split"])
    stages, error = split_outcome(model.num_layers, model.mtp_num_layers, pp, vpp if vpp > 1 else None, split)
    gbs, mbs = c["gbs"], c["mbs"]
    return LayoutFacts(  # positional, in field order: built for every new layout
        world, dp, replicas(world, c["etp"] * c["ep"] * pp), microbatch_count(gbs, mbs, dp),
        max(1, gbs // (mbs * (dp or 1))), c["sequence_parallel"], max(1, len(stages) // pp),
        mbs * c["seq_length"] / cp, split, stages, error, _stage_layers(model.moe_layer_pattern, stages),
        _recompute_plan(c["recompute_granularity"], c["recompute_method"], c["recompute_num_layers"],
                        c["recompute_modules"], c["recompute_layer_ids"]),
        *features(c, tp > 1, c["ep"] > 1))


def features(c: dict, tp_group: bool, ep_group: bool) -> tuple[str, Sharding, Overlaps]:
    """(dispatch backend, sharding, overlaps) of a config's fields `c` (`EffectiveConfig.__dict__`) on a layout
    with TP > 1 (`tp_group`) and EP > 1 (`ep_group`): a feature setting's facts, whatever its layout."""
    return _features(c["moe_token_dispatcher_type"], c["moe_flex_dispatcher_backend"], c["use_turbo_deepep"],
                     c["use_torch_fsdp2"], c["use_megatron_fsdp"], c["data_parallel_sharding_strategy"],
                     c["use_distributed_optimizer"], c["tp_comm_overlap"], tp_group,
                     c["overlap_moe_expert_parallel_comm"], ep_group, c["moe_shared_expert_overlap"],
                     c["overlap_grad_reduce"])


_CACHE: dict[tuple[int, str, int], tuple[ModelArch, LayoutFacts]] = {}
_CACHE_SIZE = 65536


def layout_facts(model: ModelArch, cfg: EffectiveConfig, world: int) -> LayoutFacts:
    """The facts of `cfg` on `model` over `world` GPUs, derived once per (model object, layout key, world)."""
    key = (id(model), cfg.key, world)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit[1]
    if len(_CACHE) >= _CACHE_SIZE:
        _CACHE.clear()
    facts = _derive(model, cfg, world)
    _CACHE[key] = (model, facts)  # the entry keeps the model alive, so its id is not reused meanwhile
    return facts
