"""Why a layout beats another: a path of single-knob changes from a baseline to a winner, each step
re-projected, and the term-by-term difference of the two time and memory breakdowns.

The path is greedy over knob units (a knob, or a knob with those that only qualify it: recompute's
method, layers and modules; virtual stages and the schedule that runs them; the dispatcher's backend
and Primus-Turbo; the pipeline split's fields): at each step the unit, or pair of units when no single
one fits, that leaves a legal layout that fits and gains the most tokens/s/GPU is taken; when none
fits, the best legal one, and the step says so. A step's gain is measured from the last layout that
had a throughput. Knob effects interact, so a step's gain depends on the order: each step also
carries the change's gain applied alone to the baseline, and the difference is the interaction the
order assigned to it. The steps telescope: they sum to the winner minus the baseline.

A step worth under `NEGLIGIBLE` of the baseline's tokens/s/GPU (either way) that frees no memory is
marked negligible: the terminal text lists such steps on one line after the path instead of as steps.
A step that sets a knob the user pinned (`--fix`) is marked pinned: a constraint, not a choice.
Every step's verdict is plain text (legal and fits, does not fit with its memory, illegal with why).
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

from pydantic import BaseModel, Field

from paratune.oracle.evaluate import evaluate_simulate
from paratune.oracle.specs import ClusterSpec, EvalResult, TrialConfig, Workload
from paratune.oracle.specs.knobs import SPLIT_KNOBS

# Top-level terms of the simulated iteration (they sum to iteration_ms) and the memory terms (GiB).
TIME_TERMS = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "fsdp_comm", "dp_comm_exposed", "pp_bubble",
              "optimizer")
MEMORY_GROUPS = {
    "weights": ("mem_weights", "mem_fp8_weight_copies"),
    "grads": ("mem_grads",),
    "optimizer": ("mem_optimizer",),
    "activations": ("mem_act_dense_layers", "mem_act_moe_layers", "mem_act_mtp_layers", "mem_act_embedding",
                    "mem_act_logits_loss", "mem_act_recompute_transient", "mem_act_wgrad_stash"),
    "buffers": ("mem_comm_buffers", "mem_deepep_buffers", "mem_cuda_graphs", "mem_runtime_context",
                "mem_allocator_overhead"),
}
# Knobs that only qualify another move with it (one unit of change).
UNITS = (("recompute_granularity", "recompute_method", "recompute_num_layers", "recompute_modules"),
         ("vpp", "pp_schedule"),
         ("moe_token_dispatcher_type", "moe_flex_dispatcher_backend", "use_turbo_deepep"),
         SPLIT_KNOBS)
NEGLIGIBLE = 0.005  # a step under 0.5 % of the baseline's throughput, freeing no memory, is not shown as a step
ORDER = ("greedy: each step takes the change that leaves a legal, fitting layout with the most tokens/s/GPU; "
         "gains depend on the order (knobs interact), 'alone' is the same change applied to the baseline only")


class Step(BaseModel):
    """One change on the path: the knobs it sets, the layout it leaves and what it gained."""

    knobs: dict[str, Any] = Field(description="knob -> new value (two knobs when only legal together)")
    was: dict[str, Any] = Field(description="knob -> value before the step")
    legal: bool
    fits: bool | None
    reason: str = ""
    tokens_per_s_per_gpu: float | None
    memory_per_gpu_gb: float | None
    delta_tokens_per_s_per_gpu: float | None = Field(description="gain of this step on the path")
    delta_memory_gb: float | None
    alone_delta_tokens_per_s_per_gpu: float | None = Field(description="gain of the same change on the baseline")
    pinned: bool = Field(default=False, description="the step sets a knob the user pinned (--fix)")
    negligible: bool = Field(default=False, description=f"under {100 * NEGLIGIBLE:g}% of the baseline's "
                                                        "throughput either way and no memory freed")

    def verdict(self) -> str:
        """Plain text: what the layout this step leaves is."""
        if not self.legal:
            return f"illegal: {self.reason}"
        if not self.fits:
            return f"does not fit: {self.memory_per_gpu_gb:.1f} GiB per GPU"
        return "fits"


class TermDiff(BaseModel):
    term: str
    baseline: float
    winner: float
    delta: float


class Explanation(BaseModel):
    """Baseline and winner, the single-knob path between them and their term-by-term difference."""

    baseline: EvalResult
    winner: EvalResult
    steps: list[Step]
    order: str = ORDER
    delta_tokens_per_s_per_gpu: float | None
    delta_memory_gb: float | None
    time_terms_ms: list[TermDiff] = Field(description="per-iteration ms of the top-level time terms")
    memory_terms_gb: list[TermDiff] = Field(description="GiB per GPU by group")


def knob_changes(workload: Workload, baseline: TrialConfig, winner: TrialConfig) -> dict[str, tuple[Any, Any]]:
    """knob -> (baseline value, winner value) for every knob the two layouts set differently."""
    a = workload.effective(baseline).as_trial().__dict__
    b = workload.effective(winner).as_trial().__dict__
    return {k: (a[k], b[k]) for k in TrialConfig.model_fields if a[k] != b[k]}


def _units(changes: dict[str, tuple[Any, Any]]) -> list[tuple[str, ...]]:
    """The changed knobs as units of change (`UNITS`), in TrialConfig order."""
    out: list[tuple[str, ...]] = []
    for k in changes:
        unit = next((tuple(x for x in u if x in changes) for u in UNITS if k in u), (k,))
        if unit not in out:
            out.append(unit)
    return out


def _targets(move: tuple[tuple[str, ...], ...], changes: dict[str, tuple[Any, Any]]) -> dict[str, Any]:
    return {k: changes[k][1] for unit in move for k in unit}


def _ok(r: EvalResult) -> tuple[int, float]:
    """Rank of a step's result: legal and fits, then legal, then the rest; then throughput."""
    return (2 if r.legal and r.fits else 1 if r.legal else 0, r.tokens_per_s_per_gpu or 0.0)


def _delta(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else after - before


def _negligible(delta: float | None, memory: float | None, base: float | None) -> bool:
    return delta is not None and base is not None and abs(delta) < NEGLIGIBLE * base and (memory or 0.0) >= 0.0


def explain(workload: Workload, cluster: ClusterSpec, baseline: TrialConfig, winner: TrialConfig,
            pins: dict[str, Any] | None = None) -> Explanation:
    """The path from `baseline` to `winner` and the difference of their breakdowns; `pins`: the knobs the user
    fixed (module doc)."""
    changes = knob_changes(workload, baseline, winner)
    start = workload.effective(baseline).as_trial().__dict__
    base = evaluate_simulate(workload, cluster, baseline)
    current, last, steps = dict(start), base, []
    remaining = _units(changes)

    def project(knobs: dict[str, Any], move: tuple[tuple[str, ...], ...]) -> EvalResult:
        return evaluate_simulate(workload, cluster, TrialConfig(**{**knobs, **_targets(move, changes)}))

    while remaining:
        trials: dict[tuple[tuple[str, ...], ...], EvalResult] = {(u,): project(current, (u,)) for u in remaining}
        if not any(r.legal and r.fits for r in trials.values()):
            trials |= {m: project(current, m) for m in combinations(remaining, 2)}
        move = max(trials, key=lambda m: _ok(trials[m]))
        after, targets = trials[move], _targets(move, changes)
        alone = project(start, move)
        gain = _delta(after.tokens_per_s_per_gpu, last.tokens_per_s_per_gpu)
        freed = _delta(after.memory_per_gpu_gb, last.memory_per_gpu_gb)
        steps.append(Step(knobs=targets, was={k: current[k] for k in targets}, legal=after.legal,
                          fits=after.fits, reason=after.reason, tokens_per_s_per_gpu=after.tokens_per_s_per_gpu,
                          memory_per_gpu_gb=after.memory_per_gpu_gb, delta_tokens_per_s_per_gpu=gain,
                          delta_memory_gb=freed,
                          alone_delta_tokens_per_s_per_gpu=_delta(alone.tokens_per_s_per_gpu,
                                                                  base.tokens_per_s_per_gpu),
                          pinned=bool(pins) and set(targets) <= set(pins or {}),
                          negligible=after.legal and bool(after.fits)
                          and _negligible(gain, freed, base.tokens_per_s_per_gpu)))
        current.update(targets)
        remaining = [u for u in remaining if u not in move]
        if after.tokens_per_s_per_gpu is not None:
            last = after
    now = trials[move] if steps else base
    return Explanation(baseline=base, winner=now, steps=steps,
                       delta_tokens_per_s_per_gpu=_delta(now.tokens_per_s_per_gpu, base.tokens_per_s_per_gpu),
                       delta_memory_gb=_delta(now.memory_per_gpu_gb, base.memory_per_gpu_gb),
                       time_terms_ms=time_terms(base, now), memory_terms_gb=memory_terms(base, now))


def time_terms(a: EvalResult, b: EvalResult) -> list[TermDiff]:
    """The top-level time terms (ms per iteration) of two simulated results, side by side."""
    if not (a.breakdown.get("time_compute_ms") is not None and b.breakdown.get("time_compute_ms") is not None):
        return []
    return [_diff(t, a.breakdown[f"time_{t}_ms"], b.breakdown[f"time_{t}_ms"]) for t in TIME_TERMS]


def memory_terms(a: EvalResult, b: EvalResult) -> list[TermDiff]:
    """The memory groups (GiB per GPU) of two results, side by side."""
    if not (a.breakdown and b.breakdown and "mem_weights" in a.breakdown and "mem_weights" in b.breakdown):
        return []
    return [_diff(g, sum(a.breakdown.get(k, 0.0) for k in keys), sum(b.breakdown.get(k, 0.0) for k in keys))
            for g, keys in MEMORY_GROUPS.items()]


def _diff(term: str, a: float, b: float) -> TermDiff:
    return TermDiff(term=term, baseline=a, winner=b, delta=b - a)


def short_text(x: Explanation) -> list[str]:
    """A few lines for a terminal: the total, each step, and the largest time and memory term changes."""
    def pct(v: float | None) -> str:
        base = x.baseline.tokens_per_s_per_gpu
        return f"{v:+,.1f} ({100 * v / base:+.1f}%)" if v is not None and base else "n/a"

    head = (f"from the baseline ({_tps(x.baseline)}) to the winner ({_tps(x.winner)}): "
            f"{pct(x.delta_tokens_per_s_per_gpu)} tokens/s/GPU in {len(x.steps)} step(s)")
    lines = [head]
    for s in x.steps:
        if s.negligible and not s.pinned:
            continue
        lines.append(f"  {_change(s)}{' (pinned)' if s.pinned else ''}: {pct(s.delta_tokens_per_s_per_gpu)}, memory "
                     f"{_gb(s.delta_memory_gb)}, {s.verdict()}; alone {pct(s.alone_delta_tokens_per_s_per_gpu)}")
    minor = [s for s in x.steps if s.negligible and not s.pinned]
    if minor:
        lines.append(f"  also changed, each under {100 * NEGLIGIBLE:g}% with no memory freed: "
                     + "; ".join(_change(s) for s in minor))
    big = sorted((t for t in x.time_terms_ms if abs(t.delta) > 1e-6), key=lambda t: abs(t.delta), reverse=True)[:3]
    if big:
        lines.append("  time terms (ms/iteration): " + ", ".join(f"{t.term} {t.delta:+,.0f}" for t in big))
    mem = sorted((t for t in x.memory_terms_gb if abs(t.delta) > 1e-6), key=lambda t: abs(t.delta), reverse=True)[:3]
    if mem:
        lines.append("  memory terms (GiB/GPU): " + ", ".join(f"{t.term} {t.delta:+.1f}" for t in mem))
    return lines


def _change(s: Step) -> str:
    return ", ".join(f"{k}: {s.was[k]!s} -> {v!s}" for k, v in s.knobs.items())


def _tps(r: EvalResult) -> str:
    return f"{r.tokens_per_s_per_gpu:,.1f} tokens/s/GPU" if r.tokens_per_s_per_gpu is not None else "no throughput"


def _gb(v: float | None) -> str:
    return f"{v:+.1f} GiB" if v is not None else "n/a"
