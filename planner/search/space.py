"""The search space: every legal layout of a workload on a cluster, enumerated axis by axis.

Axes: TP, PP, CP, EP, ETP (= TP or 1, unless the user names ETP), VPP with the pipeline split (`oracle.pipeline_split.
candidate_splits`: the even split where Megatron accepts it, else embedding/loss accounting, balanced
first/last counts and a balanced layout string), MBS, pipeline schedule, recompute (none/selective/
full), FP8 (off or the hybrid recipe; E4M3-only projects the same GEMM speed, so it is not a separate
point), the MoE dispatcher (allgather, NCCL all-to-all, and DeepEP: Megatron's flex dispatcher on
NVIDIA, Primus-Turbo's on ROCm; and Megatron's HybridEP on NVIDIA), EP all-to-all overlap, TP
communication overlap, and DP sharding (distributed optimizer, or FSDP2 where Megatron allows it:
PP = EP = 1; plain DDP only where the user's pins refuse the distributed optimizer). GBS stays the
workload's: it is the training recipe, not a layout.
Every axis holds only the values the rules allow (`oracle.constraints`: the cluster's stack, the
workload's precision, the user's pins), so a knob the stack lacks never appears. Sync-free MoE stages
are not searched (a user's pin sets one): their one modelled effect, the removed host syncs, rests on an
unsourced prior (`host_sync_us`, `oracle.performance.moe_layer.host_syncs`).
Fused cross-entropy and overlapped gradient reduction are on (unless the user pins them off): in the
oracle they cost no memory and no time, so their off states are dominated and cannot hold the optimum.
A user's pin on any other knob is written into the workload (`oracle.constraints.pinned`), and each
point of such a search is checked against every rule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import product

import numpy as np

from paratune.oracle.constraints import (
    Rule,
    allowed,
    canonical,
    search_axes,
    search_rules,
)
from paratune.oracle.evaluate import layout_violations
from paratune.oracle.identity_cache import by_identity
from paratune.oracle.layout import (
    ALLGATHER,
    ALLTOALL,
    DEEPEP,
    DISPATCH_KNOBS,
    HYBRIDEP,
    TURBO_DEEPEP,
    microbatch_count,
    replicas,
)
from paratune.oracle.legality import LegalAxes, validate
from paratune.oracle.performance.bound import KnobVariants
from paratune.oracle.pipeline_split import PipelineSplit, candidate_splits, split_outcome
from paratune.oracle.specs import ClusterSpec, EffectiveConfig, ModelArch, TrialConfig, Workload
from paratune.oracle.specs.config import SPLIT_KNOBS, sequence_parallel_in_effect, trusted_config


def _schedules(pp: int, vpp: int, microbatches: int) -> list[str]:
    if pp == 1:
        return ["1f1b"] if vpp == 1 else []
    if vpp == 1:
        return ["1f1b", "zb"]
    out = ["interleaved"] if microbatches % pp == 0 else []
    return out + (["zbv"] if vpp == 2 else [])


@dataclass(frozen=True)
class Menu:
    """The feature-knob values the rules allow on one search, read once (`knob_points` combines them)."""

    recomputes: tuple[Recompute, ...]  # (granularity, selective modules)
    full_recompute: dict  # the user's pinned recompute_method / recompute_num_layers for full recompute
    fp8s: tuple[str, ...]
    dispatchers: tuple[tuple[str, dict], ...]  # MoE dispatch options (EP > 1): (backend, the knobs that set it)
    plain_moe: dict  # the MoE knobs of a point without EP: dispatcher settings off, each as far as the rules allow
    ep_overlaps: tuple[bool, ...]
    tp_overlaps: tuple[bool, ...]
    sharding: tuple[tuple[bool, bool], ...]  # (torch FSDP2, distributed optimizer)
    fixed: dict  # always-on settings (fused loss, overlapped grad reduce) as the rules allow them
    rules: tuple[Rule, ...]
    delayed_fp8: bool  # FP8 delayed scaling: no moe_act / layernorm recompute (legality `recompute_fp8_delayed`)
    legacy_gg: bool  # the legacy GroupedMLP: no moe_act recompute under FP8 (legality `legacy_gg_moe_act_fp8`)
    rocm: bool  # Primus's ROCm TP overlap does not run under FP8 (legality `tp_overlap_fp8_rocm`)
    graphs: bool  # CUDA graphs that rule full recompute out (legality `cuda_graph_recompute`)
    check: Callable[[TrialConfig], bool] | None  # with pins on other knobs, each point is also validated


Recompute = tuple[str, tuple[str, ...] | None]  # (recompute_granularity, recompute_modules)
OUTPUT_DISCARDING = frozenset({"moe_act", "layernorm"})  # refused under FP8 delayed scaling (transformer_config.py)


def selective_sets(model: ModelArch) -> tuple[tuple[str, ...], ...]:
    """The selective-recompute module sets the search tries: Megatron's default (core_attn) and, for MoE
    models, the sets MoE recipes use, each saving more than the last (megatron-core transformer_config.py
    `recompute_modules`; e.g. Megatron-Bridge's DeepSeek-V3 presets recompute mla_up_proj, mlp, moe_act,
    layernorm): the expert activation, then the norms, then every cheap module the model has (MLA's
    up-projection, the dense layers' MLP, the shared experts)."""
    if not model.is_moe:
        return (("core_attn",),)
    cheap = ("layernorm", "moe_act") + (("mla_up_proj",) if model.multi_latent_attention else ()) + (
        ("mlp",) if not all(model.moe_layer_pattern) else ()) + (
        ("shared_experts",) if model.moe_shared_expert_intermediate_size else ())
    return tuple(dict.fromkeys((("core_attn",), ("moe_act",), ("layernorm", "moe_act"), tuple(sorted(cheap)))))


def _first_allowed(rules: tuple[Rule, ...], knob: str, preferred: list) -> object:
    """The first of `preferred` the rules allow (the last one when none is: the point is then refused)."""
    return (allowed(rules, knob, preferred) or preferred[-1:])[0]


@by_identity()
def menu(workload: Workload, cluster: ClusterSpec) -> Menu:
    """The rules' allowed values of every feature knob of this search."""
    rules = search_rules(workload, cluster)
    axes = search_axes(workload, cluster)
    fix = cluster.search.fix

    def ok(option: dict) -> bool:
        return all(allowed(rules, k, [v]) for k, v in option.items())

    def knobs(backend: str, **more: object) -> tuple[str, dict]:
        return backend, {**DISPATCH_KNOBS[backend], **more}

    # Megatron's flex backends are CUDA libraries: on ROCm DeepEP is Primus-Turbo's (legality `flex_rocm`).
    # Sync-free stages are not searched: off, unless the user pins a stage (then only Turbo DeepEP runs it).
    stage = fix.get("sync_free_stage", 0)
    if stage:
        options: tuple[tuple[str, dict], ...] = (knobs(TURBO_DEEPEP, sync_free_stage=stage),)
    else:
        flex = (TURBO_DEEPEP,) if cluster.gpu.vendor == "amd" else (DEEPEP, HYBRIDEP)
        options = tuple(knobs(b, sync_free_stage=0) for b in (ALLGATHER, ALLTOALL, *flex))
    off_moe: dict[str, object] = {"use_turbo_deepep": False, "sync_free_stage": 0}
    legacy = workload.training.moe_use_legacy_grouped_gemm
    if workload.model.is_moe:  # grouped expert GEMMs, as every MoE recipe runs them; no flex without EP (its TPxEP > 1)
        # (the workload's legacy GroupedMLP refuses bias: then one GEMM per expert, legality `legacy_gg_bias`)
        grouped = {"moe_grouped_gemm": _first_allowed(
            rules, "moe_grouped_gemm", [False] if legacy and workload.model.add_bias_linear else [True, False])}
        options = tuple((b, {**d, **grouped}) for b, d in options)
        off_moe |= {**DISPATCH_KNOBS[ALLTOALL], **grouped}
    # plain DDP only where the rules refuse the distributed optimizer (which has its traffic and less memory)
    ddp = () if allowed(rules, "use_distributed_optimizer", [True]) else ((False, False),)
    sharding = tuple(x for x in ((False, True), (True, False), *ddp)
                     if allowed(rules, "use_torch_fsdp2", [x[0]])
                     and allowed(rules, "use_distributed_optimizer", [x[1]]))
    fp8s = [f for f in axes.fp8 if f != "e4m3" or "hybrid" not in axes.fp8]  # E4M3 projects as hybrid does
    t = workload.training  # CUDA graphs exclude full recompute, but for a local full-iteration graph
    graphs = t.cuda_graph_impl != "none" and not (t.cuda_graph_impl == "local"
                                                  and "full_iteration" in (t.cuda_graph_scope or ()))
    modules = fix.get("recompute_modules")
    listed = cluster.search.allow.get("recompute_modules")  # the user's sets, else the recipes' (`selective_sets`)
    sets = (tuple(modules),) if modules else tuple(map(tuple, listed)) if listed else selective_sets(workload.model)
    sets = tuple(x for x in sets if allowed(rules, "recompute_modules", [x]))
    recomputes: list[Recompute] = []
    for r in allowed(rules, "recompute_granularity", ["none", "selective", "full"]):
        if not (graphs and r == "full"):
            recomputes += [(r, mods) for mods in sets] if r == "selective" else [(r, None)]
    return Menu(recomputes=tuple(recomputes),
                full_recompute={k: fix[k] for k in ("recompute_method", "recompute_num_layers") if k in fix},
                fp8s=tuple(fp8s), dispatchers=tuple(x for x in options if ok(x[1])),
                plain_moe={k: v for k, v in off_moe.items() if ok({k: v})},  # a refused one: the (pinned) workload's
                # EP overlap runs with at most one MTP layer (legality `ep_overlap_mtp`)
                ep_overlaps=tuple(o for o in axes.overlap_moe_expert_parallel_comm
                                  if not (o and workload.model.mtp_num_layers > 1)),
                tp_overlaps=tuple(axes.tp_comm_overlap),
                sharding=sharding,
                fixed={"cross_entropy_loss_fusion": _first_allowed(rules, "cross_entropy_loss_fusion", [True, False]),
                       "overlap_grad_reduce": _first_allowed(rules, "overlap_grad_reduce", [True, False])},
                rules=rules, delayed_fp8=workload.training.fp8_recipe == "delayed",
                legacy_gg=legacy and bool(off_moe.get("moe_grouped_gemm")),
                rocm=cluster.gpu.vendor == "amd", graphs=graphs,
                check=_checker(workload, cluster) if _named(cluster) - NATIVE_CONSTRAINTS else None)


# Knobs whose pins and limits the space applies itself (each is an axis filtered by the rules, and its
# cross-rules are built in): a constraint on any other knob turns the per-point check on.
# The user's recompute module sets are not native: a set can break a model rule (moe_act, mla_up_proj).
NATIVE_CONSTRAINTS = frozenset({"tp", "pp", "cp", "ep", "etp", "vpp", "mbs", "pp_schedule", "recompute_granularity",
                                "fp8", "tp_comm_overlap", "overlap_moe_expert_parallel_comm", "use_torch_fsdp2"})


def _named(cluster: ClusterSpec) -> set[str]:
    s = cluster.search
    return set(s.fix) | set(s.allow) | set(s.exclude)


def _checker(workload: Workload, cluster: ClusterSpec) -> Callable[[TrialConfig], bool]:
    """Whether a point is legal and every rule allows it: the space is legal by construction under the
    stack's rules, the precision rule and constraints on its own axes, but a user's pin on another knob
    can meet any legality rule."""
    def check(trial: TrialConfig) -> bool:
        return not layout_violations(workload, cluster, workload.effective(trial))
    return check


def bound_variants(m: Menu) -> KnobVariants:
    """The feature-knob settings of this search, for the sweep's layout bounds."""
    return KnobVariants(fp8=tuple(sorted({f != "none" for f in m.fp8s})),
                        dispatch=tuple(sorted({backend for backend, _ in m.dispatchers})),
                        tp_overlap=m.tp_overlaps, ep_overlap=m.ep_overlaps)


def enumerate_space(workload: Workload, cluster: ClusterSpec) -> Iterator[TrialConfig]:
    """Yield every legal point once, in a fixed order."""
    m = menu(workload, cluster)
    for layout in enumerate_layouts(workload, cluster):
        yield from knob_points(layout, m, _moe_ep(workload, layout), _sp(workload, layout))


def _moe_ep(workload: Workload, layout: dict) -> bool:
    return workload.model.is_moe and layout["ep"] > 1


def _sp(workload: Workload, layout: dict) -> bool:
    """Whether the layout runs sequence parallelism (the workload's setting, with TP > 1)."""
    return sequence_parallel_in_effect(workload.training.sequence_parallel, layout["tp"])


def layout_knobs(workload: Workload, layout: dict, m: Menu) -> tuple[dict, Menu, bool, bool]:
    """`knob_points` / `knob_count` arguments of one layout."""
    return layout, m, _moe_ep(workload, layout), _sp(workload, layout)


def bound_group(workload: Workload, layout: dict) -> tuple:
    """What the cheap bound of a layout reads of it (`oracle.performance.bound.mean_rank_bounds` on its first point:
    the layer context, PP, micro-batches, DP sharding and the blocks all the stages hold together, which neither
    the VPP, the schedule nor the split moves), with its knob class (which decides its first point's settings):
    layouts with one group have one cheap bound (tests/test_search.py checks it on the shipped spaces)."""
    return (layout["tp"], layout["pp"], layout["cp"], layout["ep"], layout["etp"], layout["mbs"],
            _knob_class(layout, _moe_ep(workload, layout), _sp(workload, layout)))


def enumerate_layouts(workload: Workload, cluster: ClusterSpec) -> Iterator[dict]:
    """Yield every legal parallel layout (the axes before the feature knobs) with at least one legal
    feature-knob point, in a fixed order (`candidate_layouts`' that `has_points`)."""
    m = menu(workload, cluster)
    return (x for x in candidate_layouts(workload, cluster, m) if has_points(workload, cluster, x, m))


def candidate_layouts(workload: Workload, cluster: ClusterSpec, m: Menu) -> Iterator[dict]:
    """Yield every parallel layout the search's rules allow, before the legality checks (`has_points`; the sweep
    runs those in its workers), in a fixed order: TP, PP, then the grids that fill the world (`_grids`), then the
    micro-batch size, VPP, schedule and split that run them (`_pipelines`)."""
    model, t = workload.model, workload.training
    axes = search_axes(workload, cluster)
    for tp, pp in product(axes.tp, axes.pp):
        splits = {v: _splits(model.num_layers, model.mtp_num_layers, pp, v, cluster.search.fix)
                  for v in axes.vpp if v == 1 or pp > 1}
        for cp, ep, etp, dp in _grids(model, cluster, axes, tp, pp):
            for mbs, vpp, schedule, split in _pipelines(axes, t.global_batch_size, dp, pp, splits):
                layout = dict(tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, mbs=mbs, vpp=vpp, pp_schedule=schedule,
                              **split_knobs(split))
                if _rules_allow(m.rules, layout):
                    yield layout


def has_points(workload: Workload, cluster: ClusterSpec, layout: dict, m: Menu) -> bool:
    """Whether a candidate layout is legal and has at least one legal feature-knob point."""
    return _layout_legal(workload, cluster, layout, m) and bool(knob_count(*layout_knobs(workload, layout, m)))


def _grids(model: ModelArch, cluster: ClusterSpec, axes: LegalAxes, tp: int, pp: int
           ) -> Iterator[tuple[int, int, int, int]]:
    """(CP, EP, ETP, DP) with this TP and PP whose dense and expert grids both fill the world (megatron-core
    parallel_state.py; `oracle.layout.replicas`)."""
    world, named_etp = cluster.world_size, cluster.search.names("etp")
    for cp in axes.cp:
        dp = replicas(world, tp * pp * cp)
        if not dp:
            continue
        for ep in axes.ep:
            for etp in _etps(model, tp, axes, named_etp):
                if replicas(world, etp * ep * pp):
                    yield cp, ep, etp, dp


def _pipelines(axes: LegalAxes, gbs: int, dp: int, pp: int, splits: dict[int, tuple[PipelineSplit, ...]]
               ) -> Iterator[tuple[int, int, str, PipelineSplit]]:
    """(MBS, VPP, schedule, split) of one grid: MBS that divides the batch into whole micro-batches per DP rank,
    each VPP with a split, the schedules that run it (`_schedules`) and its splits."""
    vpps = [v for v, options in splits.items() if options]
    for mbs in axes.mbs:
        n = microbatch_count(gbs, mbs, dp)
        if not n:
            continue
        for vpp in vpps:
            schedules = [x for x in _schedules(pp, vpp, n) if x in axes.pp_schedule]
            for schedule, split in product(schedules, splits[vpp]):
                yield mbs, vpp, schedule, split


def _etps(model: ModelArch, tp: int, axes: LegalAxes, named: bool) -> list[int]:
    """The ETPs tried with one TP: TP or 1 (dense: TP), or every allowed one when the user names ETP."""
    if not model.is_moe:
        return [tp]
    return list(axes.etp) if named else sorted({tp, 1} & set(axes.etp))


def _splits(layers: int, mtp: int, pp: int, vpp: int, fix: dict) -> tuple[PipelineSplit, ...]:
    """The splits tried for one PP x VPP: the pinned split where the user pins a split knob (the others at
    Megatron's defaults, as `oracle.constraints.pinned` writes them), else `candidate_splits`."""
    if set(fix).isdisjoint(SPLIT_KNOBS):
        return candidate_splits(layers, mtp, pp, vpp)
    layout = fix.get("pp_layout")
    split = PipelineSplit(None if layout in (None, "none") else layout, fix.get("pp_first_layers"),
                          fix.get("pp_last_layers"), bool(fix.get("pp_embedding_in_split")),
                          bool(fix.get("pp_loss_in_split")))
    return (split,) if split_outcome(layers, mtp, pp, vpp if vpp > 1 else None, split)[1] is None else ()


def split_knobs(split: PipelineSplit) -> dict:
    """The TrialConfig knobs that set a pipeline split (all five: a trial replaces the whole split)."""
    return dict(pp_layout=split.layout or "none", pp_first_layers=split.first, pp_last_layers=split.last,
                pp_embedding_in_split=split.embedding, pp_loss_in_split=split.loss)


def _rules_allow(rules: tuple[Rule, ...], layout: dict) -> bool:
    """Whether every rule on a layout knob allows the layout's value."""
    return all(canonical(r.knob, layout[r.knob]) in r.values for r in rules if r.knob in layout)


def _layout_legal(workload: Workload, cluster: ClusterSpec, layout: dict, m: Menu) -> bool:
    """Layout rules checked once with plain knobs (and the space's grouped-GEMM choice); the knob loop below
    only builds legal combinations."""
    grouped = {k: v for k, v in m.plain_moe.items() if k == "moe_grouped_gemm"}
    plain = TrialConfig(**layout, recompute_granularity="none", fp8="none", **DISPATCH_KNOBS[ALLTOALL],
                        sync_free_stage=0,
                        use_torch_fsdp2=False, use_distributed_optimizer=True, tp_comm_overlap=False,
                        overlap_moe_expert_parallel_comm=False, **grouped)
    return not validate(workload.model, workload.effective(plain), cluster)


def knob_points(layout: dict, m: Menu, moe_ep: bool, sp: bool) -> Iterator[TrialConfig]:
    """Every legal combination of feature knobs on one layout."""
    for settings in knob_settings(layout, m, moe_ep, sp):
        trial = TrialConfig(**layout, **settings)
        if m.check is None or m.check(trial):
            yield trial


def knob_settings(layout: dict, m: Menu, moe_ep: bool, sp: bool) -> Iterator[dict]:
    """The feature knobs of each of `knob_points`' combinations on one layout, in its order, before the user's
    pins are checked (the layout's own knobs left out; the dicts are the search's, `settings`: not to be changed)."""
    settings = setting_table(m).settings
    return (settings[i] for i in setting_ids(layout, m, moe_ep, sp))


@dataclass
class SettingTable:
    """The distinct feature settings of one search, each with an index (the sweep's points are (layout,
    setting index) pairs), and the indices of each knob class's settings (`setting_ids`)."""

    settings: list[dict] = field(default_factory=list)
    index: dict[tuple, int] = field(default_factory=dict)  # a setting's items -> its index
    classes: dict[tuple, np.ndarray] = field(default_factory=dict)

    def add(self, setting: dict) -> int:
        """The index of `setting`, registered if new."""
        key = tuple(setting.items())
        i = self.index.get(key)
        if i is None:
            i = self.index[key] = len(self.settings)
            self.settings.append(setting)
        return i


@by_identity()
def setting_table(m: Menu) -> SettingTable:
    """The feature settings met so far on the search with menu `m`."""
    return SettingTable()


def setting_ids(layout: dict, m: Menu, moe_ep: bool, sp: bool) -> np.ndarray:
    """The indices (`setting_table`) of `knob_settings` on one layout, in its order, before the user's pins are
    checked: built once per knob class (`_knob_class`), which decides them."""
    table = setting_table(m)
    kind = _knob_class(layout, moe_ep, sp)
    ids = table.classes.get(kind)
    if ids is None:
        ids = table.classes[kind] = np.array([table.add(s) for s in _class_settings(kind, m)], dtype=np.intp)
    return ids


def point_ids(workload: Workload, layout: dict, m: Menu) -> np.ndarray:
    """The indices of the settings of `knob_points` on one layout (those the user's pins allow)."""
    ids = setting_ids(*layout_knobs(workload, layout, m))
    if m.check is None:
        return ids
    settings = setting_table(m).settings
    return ids[[m.check(TrialConfig(**layout, **settings[i])) for i in ids.tolist()]]


def _class_settings(kind: tuple[bool, ...], m: Menu) -> Iterator[dict]:
    """The feature settings of a knob class, in `knob_settings`' order."""
    for (recompute, modules), moes, precisions, shardings in _knob_axes(kind, m):
        extra = m.full_recompute if recompute == "full" else {"recompute_modules": modules} if modules else {}
        for moe, (fp8, tp_overlap), (fsdp, distopt) in product(moes, precisions, shardings):
            yield dict(recompute_granularity=recompute, **extra, fp8=fp8, **moe, tp_comm_overlap=tp_overlap,
                       use_torch_fsdp2=fsdp, use_distributed_optimizer=distopt, **m.fixed)


def base_config(workload: Workload, layout: dict) -> EffectiveConfig:
    """`resolve` of a layout with the workload's feature knobs: the layout fields of each of its points."""
    return workload.effective(TrialConfig(**layout))


def point_configs(workload: Workload, m: Menu, layout: dict, base: EffectiveConfig, ids: Iterable[int]
                  ) -> list[EffectiveConfig]:
    """`workload.effective` of the points of `layout` with the settings `ids` (`base`: `base_config` of the layout),
    for the sweep: `resolve` runs once on the layout (its feature knobs as the workload has them) and once per
    distinct feature setting of the search (on the workload's own layout), and each point takes its layout
    fields from the first and its feature fields from the second. That is `resolve`'s answer because none of its
    rules crosses the two: the layout knobs' canonicalisation (VPP from a layout string, the interleaved
    schedule, ETP, sequence parallelism) reads only layout knobs, the feature knobs' (recompute, Turbo DeepEP as
    the flex dispatcher) only feature knobs and the workload (tests/test_sweep_configs.py checks it on whole
    spaces). With user pins to check each point is resolved whole."""
    settings = setting_table(m).settings
    if m.check is not None:
        return [workload.effective(TrialConfig(**layout, **settings[i])) for i in ids]
    out = []
    for i in ids:
        fields = base.__dict__.copy()
        del fields["key"]  # `resolve` filled it; the point's own is computed from its fields
        fields.update(_feature_fields(workload, settings[i]))
        out.append(trusted_config(fields))
    return out


# Fields a feature setting decides (its knobs and what `resolve` derives from them alone).
_DERIVED = ("recompute_granularity", "recompute_method", "recompute_num_layers", "recompute_modules",
            "moe_token_dispatcher_type", "use_turbo_deepep")


@by_identity()
def _feature_cache(workload: Workload) -> dict[tuple, dict]:
    """The fields of each feature setting met so far on this workload (`_feature_fields`)."""
    return {}


def _feature_fields(workload: Workload, settings: dict) -> dict:
    """The fields one feature setting gives on `workload` (`resolve` of the setting alone), cached per search."""
    cache = _feature_cache(workload)
    key = tuple(settings.items())
    hit = cache.get(key)
    if hit is None:
        resolved = workload.effective(TrialConfig(**settings)).__dict__
        hit = cache[key] = {name: resolved[name] for name in (*settings, *_DERIVED)}
    return hit


RECOMPUTE_FIELDS = ("recompute_granularity", "recompute_method", "recompute_num_layers", "recompute_modules",
                    "recompute_layer_ids")


def setting_class(workload: Workload, m: Menu, i: int) -> tuple | None:
    """What feature setting `i` writes into a point's fields (`point_configs`) besides recompute: two points of one
    layout whose settings have one class differ in their recompute fields alone. None with user pins to check
    (each point is then resolved whole)."""
    if m.check is not None:
        return None
    fields = _feature_fields(workload, setting_table(m).settings[i])
    return tuple((k, v) for k, v in fields.items() if k not in RECOMPUTE_FIELDS)


def knob_count(layout: dict, m: Menu, moe_ep: bool, sp: bool) -> int:
    """How many points `knob_points` yields (without building them, unless user pins need checking)."""
    if m.check is not None:
        return sum(1 for _ in knob_points(layout, m, moe_ep, sp))
    return len(setting_ids(layout, m, moe_ep, sp))


def _knob_class(layout: dict, moe_ep: bool, sp: bool) -> tuple[bool, ...]:
    """What `_knob_axes` reads of a layout: a zero-bubble schedule; EP overlap possible (PP 1 or interleaved); torch
    FSDP2 possible (PP = EP = 1); MoE with EP > 1; sequence parallelism."""
    return (layout["pp_schedule"] in ("zb", "zbv"), layout["pp"] == 1 or layout["pp_schedule"] == "interleaved",
            layout["pp"] == 1 and layout["ep"] == 1, moe_ep, sp)


def _knob_axes(kind: tuple[bool, ...], m: Menu) -> list[tuple]:
    """Per recompute mode of one knob class of layouts (`_knob_class`): (mode, MoE options (dispatch with EP
    overlap), (FP8, TP overlap) pairs, (FSDP2, distributed optimizer) pairs).

    Zero-bubble schedules run without recompute (Primus's zero-bubble patches); the dispatcher and EP
    overlap only act with EP > 1 (without, they are off), EP overlap only with the all-to-all or flex
    dispatcher, without full recompute and, under PP, with the interleaved schedule
    (`oracle.legality._ep_overlap_rules`); TP overlap needs sequence parallelism and, on ROCm, no FP8;
    torch FSDP2 needs PP = EP = 1 (Megatron-LM arguments.py). Where a knob does not apply it stays
    off, and a layout whose rules forbid off has no points."""
    zero_bubble, overlap_ok, fsdp_ok, moe_ep, sp = kind
    recomputes = (("none", None),) if zero_bubble else m.recomputes
    tp_overlaps = tuple(x for x in (m.tp_overlaps if sp else (False,)) if x in m.tp_overlaps)
    sharding = tuple(x for x in m.sharding if fsdp_ok or not x[0])
    precisions = tuple((f, o) for f in m.fp8s for o in tp_overlaps if not (o and m.rocm and f != "none"))
    out = []
    for r in recomputes:
        if r not in m.recomputes:
            continue
        if moe_ep:
            moes = tuple({**d, "overlap_moe_expert_parallel_comm": o} for b, d in m.dispatchers for o in m.ep_overlaps
                         if not o or (overlap_ok and r[0] != "full" and b != ALLGATHER))
        else:
            moes = tuple({**m.plain_moe, "overlap_moe_expert_parallel_comm": False} for o in m.ep_overlaps if not o)
        modules = r[1] or ()
        discards = ((m.delayed_fp8 and not OUTPUT_DISCARDING.isdisjoint(modules))
                    or (m.legacy_gg and "moe_act" in modules))
        out.append((r, moes, tuple(p for p in precisions if not (discards and p[0] != "none")), sharding))
    return out
