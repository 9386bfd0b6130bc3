"""breakdown.png: where the winner's time and memory go, against the baseline's."""

from __future__ import annotations

from pathlib import Path

from paratune.oracle.specs import EvalResult

from ..search.explanation import memory_terms, time_terms
from .exports import figure, savefig


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
