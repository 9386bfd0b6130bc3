"""Pins that cannot be met fail loudly, before any search, each named with why.

A pin (`--fix KNOB=VALUE`, the cluster's `search.fix`) is unsatisfiable on its own when its value is
outside the knob's legal set on this model and cluster (`oracle.legality.legal_axes`: divisibility of
heads, layers, experts, sequence and world size) or outside what the other rules allow (the stack's knob
set, the precision rule, the user's other constraints: `oracle.constraints`). Each such pin is named
with the legal values and the rule codes the user's layout breaks with that pin alone. Pins that are each
possible can still exclude every layout together; a search that then finds nothing names them all with
the rules their layout breaks (`no_layout_error`).
"""

from __future__ import annotations

from paratune.oracle.constraints import allowed, canonical, rule_violations, search_rules
from paratune.oracle.errors import InputError
from paratune.oracle.evaluate import layout_violations
from paratune.oracle.legality import LegalAxes, legal_axes
from paratune.oracle.specs import ClusterSpec, TrialConfig, Workload


def unpinned(cluster: ClusterSpec) -> ClusterSpec:
    """The cluster without the user's pins (the other constraints kept): the user's own layout is legal on it."""
    return cluster.model_copy(update={"search": cluster.search.model_copy(update={"fix": {}})})


def _violations(workload: Workload, cluster: ClusterSpec, pins: dict) -> str:
    """The rules the user's layout breaks with `pins` written in, as `[code] message`."""
    found = layout_violations(workload, cluster, workload.effective(TrialConfig(**pins)))
    return "; ".join(f"[{v.code}] {v.message}" for v in found if v.code != "constraint_fix")


def pin_problems(workload: Workload, cluster: ClusterSpec) -> list[str]:
    """One line per pin no layout can meet (module doc); `workload` is the user's, before its pins."""
    fix = cluster.search.fix
    t = workload.training
    axes = legal_axes(workload.model, cluster, seq_length=t.seq_length, gbs=t.global_batch_size)
    others = tuple(r for r in search_rules(workload, cluster) if r.code != "constraint_fix")
    out = []
    for knob, value in fix.items():
        value = canonical(knob, value)
        if knob in LegalAxes.model_fields:
            legal = allowed(others, knob, getattr(axes, knob))
            if value in [canonical(knob, v) for v in legal]:
                continue
            why = f"the legal values on {cluster.world_size} GPUs are {', '.join(map(str, legal)) or 'none'}"
        else:
            broken = rule_violations(tuple(r for r in others if r.knob == knob),
                                     workload.effective(TrialConfig(**{knob: value})))
            if not broken:
                continue
            why = broken[0].message
        detail = _violations(workload, unpinned(cluster), {knob: value})
        out.append(f"{knob}={value}: {why}" + (f" ({detail})" if detail else ""))
    return out


def check_pins(workload: Workload, cluster: ClusterSpec) -> None:
    """Raise an InputError naming each pin no layout can meet; `workload` is the user's, before its pins."""
    problems = pin_problems(workload, cluster)
    if problems:
        raise InputError("cannot be met: " + " | ".join(problems),
                         key="--fix " + ", ".join(p.split("=")[0] for p in problems))


def no_layout_error(workload: Workload, cluster: ClusterSpec) -> InputError:
    """Why a search under pins found no layout: each pin, and the rules the user's layout breaks with them all."""
    fix = cluster.search.fix
    pins = ", ".join(f"{k}={v}" for k, v in fix.items())
    detail = _violations(workload, unpinned(cluster), dict(fix))
    return InputError(f"no legal layout that fits meets the pins {pins} together"
                      + (f"; with them the workload's layout breaks {detail}" if detail else ""),
                      key="--fix " + ", ".join(fix))
