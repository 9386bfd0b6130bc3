"""A run's answer: its pick, explained against the user's own layout, and the artifacts that state it.

`tune` writes it when the search ends; `paratune measure` and the MCP `record_measurement` recompute it
when a measurement arrives (the pick follows the evidence, `planner/search/pick.py`), so `summary.json`,
`trials.png`, `launch.sh`, `explain` and `get_best` never state a pick the ledger no longer makes.

The explanation starts from the user's own layout, before any `--fix`: a pinned knob is a constraint
the path shows as such (`Step.pinned`), not a new baseline the winner is measured against.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from paratune.ledger.models import Calibrated, Measurement, TrialRecord
from paratune.ledger.store import Ledger
from paratune.oracle.specs import ClusterSpec, EffectiveConfig, TrialConfig, Workload

from ..launch import LaunchPlan
from ..search.explanation import Explanation, explain
from ..search.pick import Pick, PickRule
from ..search.pins import unpinned
from .steps import final_pick, how_to_run, write_artifacts


class Verdict(BaseModel):
    """The pick, its trial, why it beats the user's own layout, how to launch it, and what was measured."""

    winner: TrialRecord | None
    pick: Pick | None
    attribution: Explanation
    launch: LaunchPlan | None
    measured: list[Measurement]

    def summary(self) -> dict:
        """The summary.json keys this verdict states."""
        w = self.winner
        calibrated: Calibrated | None = w.calibrated if w else None
        return {"winner": w.result.model_dump(mode="json") if w else None, "winner_trial_id": w.id if w else None,
                "winner_origin": w.origin if w else None,
                "winner_calibrated": calibrated.model_dump(mode="json") if calibrated else None,
                "pick": self.pick.model_dump(mode="json") if self.pick else None,
                "baseline": self.attribution.baseline.model_dump(mode="json"),
                "attribution": self.attribution.model_dump(mode="json"),
                "launch": self.launch.model_dump(mode="json") if self.launch else None,
                "measurements": [m.model_dump(mode="json") for m in self.measured]}


def verdict(ledger: Ledger, run_id: int, workload: Workload, cluster: ClusterSpec, own: TrialConfig,
            rule: PickRule, workload_file: str) -> Verdict:
    """The run's pick now, explained from `own` (the user's layout before pins; module doc)."""
    best, chosen = final_pick(ledger, run_id, workload, cluster, rule)
    attribution = explain(workload, unpinned(cluster), own, best.knobs if best else own, pins=cluster.search.fix)
    return Verdict(winner=best, pick=chosen, attribution=attribution, measured=ledger.measurements(run_id),
                   launch=how_to_run(best, workload, cluster, workload_file))


def write_verdict(out_dir: Path, ledger: Ledger, run_id: int, workload: Workload, cluster: ClusterSpec,
                  v: Verdict, summary: dict) -> None:
    """summary.json (with `v`'s keys over `summary`'s), trials.jsonl, trials.png, breakdown.png, launch.sh."""
    write_artifacts(out_dir, workload, cluster, ledger.trials(run_id), summary | v.summary(), v.launch,
                    baseline=v.attribution.baseline, winner=v.winner, measured=v.measured,
                    error=v.pick.error if v.pick else None)


def repick(out_dir: Path, ledger: Ledger, run_id: int) -> Verdict | None:
    """Recompute the pick of a `paratune tune` folder's run and rewrite its artifacts (after a measurement);
    None when the folder has no summary.json of that run to rewrite."""
    path = out_dir / "summary.json"
    summary = json.loads(path.read_text()) if path.is_file() else {}
    if summary.get("run_id") != run_id:
        return None
    workload, cluster = ledger.run_inputs(run_id)
    own = EffectiveConfig(**summary["baseline"]["config"]).as_trial()
    rule = Pick.model_validate(summary["pick"]).rule if summary.get("pick") else "robust"
    v = verdict(ledger, run_id, workload, cluster, own, rule, summary.get("workload_file") or "workload.yaml")
    write_verdict(out_dir, ledger, run_id, workload, cluster, v, summary)
    return v
