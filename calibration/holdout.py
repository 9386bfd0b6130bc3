"""Held-out error: leave one model out. For each model, every fit group that holds its rows is refitted
on the other models' rows, then the constants every family shares over all the other models' rows
(calibration/fit.py `fit_all`, same groups, bounds and objective), and the model's rows are projected
with those constants. Each row stays at the layout the full fit chose for its
tuned knobs (`fit.choose`): the knobs are the published run's, not the constants'. The figure is what a
user gets on a model the calibration never saw.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor

from paratune.oracle.performance.calibration import constants_for, with_fitted

from .fit import GROUPS, choose, family_of_row, fit_all
from .rows import Row, load_rows, project_at


def _held_out_model(model: str) -> dict[str, float]:
    """Signed error of each row of `model` under constants fitted without it (row id -> error)."""
    rows = load_rows()
    chosen = choose(rows)
    test = [r for r in rows if r.model == model and r.id in chosen]
    families = {family_of_row(r) for r in test}
    fitted, shared = fit_all([r for r in rows if r.model != model], chosen, refit=families)
    out = {}
    for row in test:
        fam = family_of_row(row)
        values = shared | {k: v for g, vals in fitted.items() if fam in GROUPS[g][0] for k, v in vals.items()}
        p = project_at(row, chosen[row.id], with_fitted(constants_for(fam), values))
        out[row.id] = p.estimate.tokens_per_s_per_gpu / row.measured - 1.0
    return out


def held_out_errors(rows: list[Row], jobs: int = 2) -> dict[str, float]:
    """Row id -> signed leave-one-model-out error, for every row the product projects."""
    models = sorted({r.model for r in rows})
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        parts = list(pool.map(_held_out_model, models))
    return {k: v for part in parts for k, v in part.items()}
