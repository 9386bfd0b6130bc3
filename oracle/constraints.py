"""The rules on what a search may change: the cluster's stack, the user's precision, the user's pins.

Each `Rule` limits one `EffectiveConfig` field to a set of values and names what imposed it:
`stack_knob` / `stack_value` (the stack or GPU vendor lacks the knob or value, `oracle.specs.knobs`),
`constraint_precision` (FP8 stays as the workload has it unless the user allows it),
`constraint_fix`, `constraint_allow`, `constraint_exclude` (the user's `SearchConstraints`).
The search offers only values every rule allows; an evaluation that breaks one is illegal with that
rule's code, so an MCP client learns which constraint refused its proposal.
"""

from __future__ import annotations

from dataclasses import dataclass

from .identity_cache import by_identity
from .legality import SCHEDULES, LegalAxes, legal_axes
from .specs import (
    ClusterSpec,
    EffectiveConfig,
    TrainingArgs,
    TrialConfig,
    Violation,
    Workload,
)
from .specs.knobs import KNOB_SPECS, KNOB_TO_ARG, NONE_IS_NULL, SPLIT_KNOBS, knob_available, value_available
from .specs.trusted import trusted


@dataclass(frozen=True)
class Rule:
    """One field limited to `values` (canonical EffectiveConfig values), by `code`, because `why`."""

    knob: str
    values: frozenset
    code: str
    why: str


def canonical(knob: str, value: object) -> object:
    """A knob's value as EffectiveConfig holds it ("none" is None where it means off)."""
    return None if value == "none" and knob in NONE_IS_NULL else value


def _stack_rules(cluster: ClusterSpec) -> list[Rule]:
    stack, vendor = cluster.stack, cluster.gpu.vendor
    assert stack is not None  # ClusterSpec fills the vendor's default at validation
    where = f"the {stack} stack on {vendor.upper()} GPUs"
    out = []
    for spec in KNOB_SPECS.values():
        if not knob_available(spec.name, stack, vendor):
            out.append(Rule(spec.name, frozenset({spec.off}), "stack_knob",
                            f"{where} has no {spec.name} (it is {_owners(spec.name)})"))
    schedules = frozenset(s for s in SCHEDULES if value_available("pp_schedule", s, stack, vendor))
    if len(schedules) < len(SCHEDULES):
        out.append(Rule("pp_schedule", schedules, "stack_value",
                        f"{where} runs only the {'/'.join(sorted(schedules))} schedules "
                        "(zero-bubble and ZB-V are Primus patches)"))
    return out


def _owners(knob: str) -> str:
    spec = KNOB_SPECS[knob]
    stacks = "/".join(sorted(spec.stacks())) or "no stack's"
    vendors = "/".join(sorted(v.upper() for v in spec.vendors))
    return f"a {stacks} knob on {vendors} GPUs"


def _user_rules(cluster: ClusterSpec, baseline: EffectiveConfig) -> list[Rule]:
    s = cluster.search
    out = [Rule(k, frozenset({canonical(k, v)}), "constraint_fix", f"fixed at {v} by the search constraints")
           for k, v in s.fix.items()]
    out += [Rule(k, frozenset(canonical(k, v) for v in vs), "constraint_allow",
                 f"limited to {', '.join(map(str, vs))} by the search constraints") for k, vs in s.allow.items()]
    out += [Rule(k, frozenset({getattr(baseline, k)}), "constraint_exclude",
                 f"excluded from the search: stays at the workload's {getattr(baseline, k)}") for k in s.exclude]
    if not s.names("fp8"):
        out.append(Rule("fp8", frozenset({baseline.fp8}), "constraint_precision",
                        f"precision stays the workload's ({baseline.fp8 or 'no FP8'}); allow FP8 with "
                        "--allow fp8=none,hybrid or search.allow.fp8"))
    return out


@by_identity()
def search_rules(workload: Workload, cluster: ClusterSpec) -> tuple[Rule, ...]:
    """Every rule on this workload's search on this cluster (built once per pair)."""
    return tuple(_stack_rules(cluster) + _user_rules(cluster, workload.effective()))


# Knobs that only act under another knob's value (resolve clears them elsewhere): a rule on one of
# them holds only where it acts.
ACTS_UNDER = {"recompute_method": ("recompute_granularity", "full"),
              "recompute_num_layers": ("recompute_granularity", "full"),
              "recompute_modules": ("recompute_granularity", "selective"),
              "moe_flex_dispatcher_backend": ("moe_token_dispatcher_type", "flex")}


def rule_violations(rules: tuple[Rule, ...], cfg: EffectiveConfig) -> list[Violation]:
    """The rules `cfg` breaks, each as a violation with its rule's code."""
    fields = cfg.__dict__
    return [trusted(Violation, {"code": r.code, "message": f"{r.knob}={fields[r.knob]}: {r.why}"})
            for r in rules if fields[r.knob] not in r.values and _acts(r.knob, fields)]


def _acts(knob: str, fields: dict) -> bool:
    parent = ACTS_UNDER.get(knob)
    return parent is None or fields[parent[0]] == parent[1]


def allowed(rules: tuple[Rule, ...], knob: str, values: list) -> list:
    """`values` (TrialConfig spellings) that every rule on `knob` allows, in their order."""
    limits = [r.values for r in rules if r.knob == knob]
    return [v for v in values if all(canonical(knob, v) in lim for lim in limits)]


def pinned(workload: Workload, cluster: ClusterSpec) -> Workload:
    """The workload with the user's fixed knobs written into its arguments, so a trial that leaves a
    fixed knob out gets the fixed value (setting one split knob replaces the whole split, as a trial does)."""
    fix = cluster.search.fix
    if not fix:
        return workload
    args = workload.training.model_dump()
    if not set(fix).isdisjoint(SPLIT_KNOBS):
        args |= {KNOB_TO_ARG[k]: TrainingArgs.model_fields[KNOB_TO_ARG[k]].default for k in SPLIT_KNOBS}
    args |= TrialConfig(**fix).overrides()
    return workload.model_copy(update={"training": TrainingArgs(**args)})


@by_identity()
def search_axes(workload: Workload, cluster: ClusterSpec) -> LegalAxes:
    """The legal values of each knob that every rule (stack, precision, the user's) allows."""
    t = workload.training
    axes = legal_axes(workload.model, cluster, seq_length=t.seq_length, gbs=t.global_batch_size)
    rules = search_rules(workload, cluster)
    named = {r.knob for r in rules}
    return axes.model_copy(update={k: allowed(rules, k, getattr(axes, k)) for k in LegalAxes.model_fields
                                   if k in named})
