"""A run's plots: trials.png (the search, trial by trial) and breakdown.png (where the winner's time and
memory go, against the baseline's), written atomically on the headless Agg backend."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from paratune.ledger.models import Measurement, TrialRecord
from paratune.oracle.specs import EvalResult

from ..search.explanation import memory_terms, time_terms
from .exports import write_atomic


def write_breakdown_plot(path: Path, baseline: EvalResult, winner: EvalResult, title: str) -> None:
    """breakdown.png: the winner's time (ms per iteration by term) and memory (GiB per GPU by group)
    as stacked bars beside the baseline's."""
    fig, axes = figure(1, 2, figsize=(9, 4.8))
    for ax, terms, unit in ((axes[0], time_terms(baseline, winner), "ms per iteration"),
                            (axes[1], memory_terms(baseline, winner), "GiB per GPU")):
        bottoms = [0.0, 0.0]
        for t in terms:
            if t.baseline == 0 and t.winner == 0:
                continue
            ax.bar(["baseline", "winner"], [t.baseline, t.winner], bottom=bottoms, label=t.term)
            bottoms = [bottoms[0] + t.baseline, bottoms[1] + t.winner]
        ax.set_ylabel(unit)
        ax.legend(fontsize=7)
    axes[0].set_title("time")
    axes[1].set_title("memory")
    if winner.memory_cap_gb:
        axes[1].axhline(winner.memory_cap_gb, color="tab:red", linestyle="--", linewidth=1)
        axes[1].text(1.45, winner.memory_cap_gb, "cap", color="tab:red", fontsize=8, va="bottom", ha="right")
    fig.suptitle(title)
    savefig(path, fig)


def phase_of(origin: str) -> str:
    """The search phase a trial's origin tag belongs to: seed, llm:plan / llm:roundN, sweep, or other."""
    if origin.startswith("seed:"):
        return "seed"
    if origin.startswith("llm:"):
        return origin
    return origin if origin == "sweep" else "other (MCP, CLI)"


def savefig(path: Path, fig: Any) -> None:
    """Write a matplotlib figure as PNG, atomically (a pyplot-free figure: nothing to close)."""
    fig.tight_layout()
    write_atomic(path, lambda p: fig.savefig(p, format="png", dpi=110))


def figure(nrows: int, ncols: int, *, figsize: tuple[float, float], **kw: Any) -> Any:
    """(figure, axes): a `matplotlib.figure.Figure` on its own Agg canvas, without pyplot (its import and
    figure registry cost a run time and a plot nothing); the Agg canvas also lends tight_layout its renderer
    (a bare figure would render itself once more to get one)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, **kw)


def write_trials_plot(path: Path, trials: list[TrialRecord], title: str, *, baseline: float | None = None,
               measured: Sequence[Measurement] = (), winner_id: int | None = None, error: float | None = None) -> None:
    """trials.png: projected tokens/s/GPU of each scored trial in the order scored, the search phases
    divided and named, the incumbent as a step line, the band within the oracle's stated `error` of the
    best, the baseline and measured figures as lines, and the rejected trials on a strip of their own by
    reason (illegal, does not fit). Memory-only checks are not drawn (they have no throughput)."""
    scored = [t for t in trials if t.fidelity != "memory_only" or not t.legal or t.fits is False]
    fig, (ax, strip) = figure(2, 1, figsize=(9, 5.2), sharex=True, gridspec_kw={"height_ratios": [5, 1]})
    xs = range(1, len(scored) + 1)
    ok = [(i, t.tokens_per_s_per_gpu) for i, t in zip(xs, scored) if t.legal and t.fits and t.tokens_per_s_per_gpu]
    if ok:
        ax.scatter(*zip(*ok), s=16, color="tab:blue", label="trial (legal, fits)")
    incumbent, best = [], None
    for t in scored:
        if t.legal and t.fits and t.tokens_per_s_per_gpu:
            best = max(best or 0.0, t.tokens_per_s_per_gpu)
        incumbent.append(best)
    ax.step(list(xs), incumbent, where="post", color="tab:green", label="incumbent (best so far)")
    if error and best:
        ax.axhspan(best * (1 - error), best, color="tab:green", alpha=0.08,
                   label=f"within the oracle's error (±{100 * error:.1f}%) of the best")
    if baseline is not None:
        ax.axhline(baseline, color="tab:gray", linestyle="--", label=f"baseline (workload's layout) {baseline:,.0f}")
    for m in measured:
        ax.axhline(m.tokens_per_s_per_gpu, color="tab:purple", linestyle=":",
                   label=f"measured, trial {m.trial_id}: {m.tokens_per_s_per_gpu:,.0f}")
    for i, t in zip(xs, scored):
        if t.id == winner_id and t.tokens_per_s_per_gpu:
            ax.scatter([i], [t.tokens_per_s_per_gpu], marker="*", s=180, color="gold", edgecolor="black", zorder=5,
                       label=f"winner (trial {t.id})")
    _draw_phases(ax, strip, [phase_of(t.origin) for t in scored])
    _draw_rejected(strip, list(zip(xs, scored)))
    strip.set_yticks([])
    strip.set_ylabel("rejected", fontsize=8)
    if strip.get_legend_handles_labels()[0]:
        strip.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    strip.set_xlabel("trial, in the order scored (memory-only checks not drawn)")
    ax.set_ylabel("projected tokens/s/GPU")
    ax.set_title(title, pad=16)
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    savefig(path, fig)


def _draw_phases(ax, strip, phases: list[str]) -> None:
    """A divider between the search phases on both panels, and each phase's name above its span."""
    for i in range(1, len(phases)):
        if phases[i] != phases[i - 1]:
            for a in (ax, strip):
                a.axvline(i + 0.5, color="black", linewidth=0.8, alpha=0.5)
    start = 0
    for i in range(1, len(phases) + 1):
        if i == len(phases) or phases[i] != phases[start]:
            ax.text((start + i + 1) / 2, 1.01, phases[start], transform=ax.get_xaxis_transform(), ha="center",
                    va="bottom", fontsize=8)
            start = i


def _draw_rejected(strip, numbered: list[tuple[int, TrialRecord]]) -> None:
    """The rejected trials on the strip, by reason (illegal, does not fit), with their counts."""
    for marker, color, label, which in (("x", "tab:red", "illegal", lambda t: not t.legal),
                                        ("v", "tab:orange", "does not fit (OOM)",
                                         lambda t: t.legal and t.fits is False)):
        hits = [i for i, t in numbered if which(t)]
        if hits:
            strip.scatter(hits, [0] * len(hits), marker=marker, color=color, label=f"{label}: {len(hits)}")
