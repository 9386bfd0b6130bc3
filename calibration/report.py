"""The accuracy report: every published run scored with the product's own verdicts (cap = whole HBM,
margin 0, nothing tolerated), rejected runs listed first with the reason, then throughput and memory
error tables (each row's chosen layout, the knobs it tuned and those its recipe states), per-family
MAPE (dense / MoE x NVIDIA / AMD) in-sample and held out (leave one model out, calibration/holdout.py)
and the order check. The stated uncertainty (`uncertainty.yaml`) is the held-out error."""

from __future__ import annotations

import sys
from collections import defaultdict

import yaml

from paratune.oracle.catalog import gpu as catalog_gpu
from paratune.oracle.performance.uncertainty import UNCERTAINTY_FILE, family_name

from .holdout import held_out_errors
from .memory_rows import load_memory_rows, memory_verdict
from .rows import MODELLED, Row, load_rows, order_pairs, project, recipe_facts, setup


def _family(row: Row) -> str:
    return family_name(setup(row).model, catalog_gpu(row.gpu))


def family_errors(rows: list[Row]) -> dict[str, list[float]]:
    """|projected / measured - 1| of every row the product projects, by family (dense / MoE x vendor)."""
    out: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        p = project(row)
        if p is not None:
            out[_family(row)].append(abs(p.error))
    return dict(out)


def held_out_by_family(rows: list[Row], held: dict[str, float]) -> dict[str, list[float]]:
    """|held-out error| of every projected row, by family."""
    out: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        if row.id in held:
            out[_family(row)].append(abs(held[row.id]))
    return dict(out)


def uncertainty_table(rows: list[Row], held: dict[str, float]) -> dict[str, dict[str, float]]:
    """Per family: held-out MAPE, max |error| and row count, as `oracle/performance/uncertainty.yaml`
    states them."""
    return {fam: {"mape": round(sum(e) / len(e), 4), "max_abs": round(max(e), 4), "rows": len(e)}
            for fam, e in sorted(held_out_by_family(rows, held).items())}


def write_uncertainty(rows: list[Row], held: dict[str, float]) -> None:
    """Write the per-family held-out error table the oracle states as its uncertainty."""
    head = ("# Written by `benchmarks/accuracy.py --write-uncertainty` (calibration/report.py): per family\n"
            "# (dense / MoE x GPU vendor) the leave-one-model-out MAPE, max |error| and rows. The oracle states\n"
            "# it, widened (oracle/performance/uncertainty.py), as its uncertainty; do not edit by hand.\n")
    UNCERTAINTY_FILE.write_text(head + yaml.safe_dump({"families": uncertainty_table(rows, held)}, sort_keys=True),
                                encoding="utf-8")


def held_out_report(rows: list[Row], held: dict[str, float]) -> tuple[float, float]:
    """Print each row's held-out error and the per-family held-out MAPE; return (MoE MAPE %, MoE max %)."""
    print("held out (leave one model out: constants refitted without the row's model, calibration/holdout.py)")
    for row in rows:
        if row.id in held:
            print(f"  {row.id:32s} {row.model:16s} {row.gpu:9s} held-out {100 * held[row.id]:+6.1f}%")
    moe: list[float] = []
    for fam, errs in sorted(held_out_by_family(rows, held).items()):
        print(f"family {fam}: held-out mape={100 * sum(errs) / len(errs):.1f}% max={100 * max(errs):.1f}% "
              f"rows={len(errs)}")
        if fam.startswith("moe/"):
            moe += errs
    return 100 * sum(moe) / max(1, len(moe)), 100 * max(moe, default=0.0)


def throughput_report(rows: list[Row]) -> tuple[float, float, int]:
    """Print the throughput section; return (MAPE %, max |error| %, rejected rows)."""
    rejected = [r for r in rows if setup(r).rejection]
    print(f"published throughput runs the product rejects: {len(rejected)}")
    for r in rejected:
        print(f"  REJECTED {r.id}: {setup(r).rejection}")
    errors, by_family = {}, family_errors(rows)
    projected: dict[str, float] = {}  # row id -> projected tokens/s/GPU
    print(f"{'row':9s} {'model':16s} {'gpu':9s} {'measured':>10s} {'projected':>10s} {'error':>7s}  chosen / tuned")
    for row in rows:
        p = project(row)
        if p is None:
            continue
        errors[row.id] = abs(p.error)
        projected[row.id] = p.estimate.tokens_per_s_per_gpu
        c = p.cfg
        split = c.pp_layout or ("acct" if c.pp_embedding_in_split or c.pp_loss_in_split else "") or (
            f"first={c.pp_first_layers},last={c.pp_last_layers}" if c.pp_first_layers or c.pp_last_layers else "even")
        recompute: str = c.recompute_granularity or "none"
        if recompute == "full":
            recompute += f"/{c.recompute_method}{c.recompute_num_layers}"
        moe = (f" dispatcher={'turbo-deepep' if c.use_turbo_deepep else c.moe_token_dispatcher_type}"
               f" ep_overlap={c.overlap_moe_expert_parallel_comm}") if setup(row).model.is_moe else ""
        print(f"{row.id:9s} {row.model:16s} {row.gpu:9s} {row.measured:10.1f} "
              f"{p.estimate.tokens_per_s_per_gpu:10.1f} {100 * p.error:+6.1f}%  mbs={c.mbs} "
              f"recompute={recompute} vpp={c.vpp} split={split} grad_fp32={c.grad_reduce_in_fp32} "
              f"tp_overlap={c.tp_comm_overlap}{moe} | tuned: {', '.join(setup(row).tuned) or 'none'}")
        stated = sorted(k for k in recipe_facts().get(row.id, {}) if k in MODELLED)
        if stated:
            print(f"{'':9s} from recipe: {', '.join(stated)}")
    pairs = [(a, b) for a, b in order_pairs(rows) if a.id in errors and b.id in errors]
    bad = [(a.id, b.id) for a, b in pairs if projected[a.id] <= projected[b.id]]
    print(f"order: {len(pairs)} same-model/GPU/source pairs, misordered: {bad or 'none'}")
    for fam, errs in sorted(by_family.items()):
        print(f"family {fam}: mape={100 * sum(errs) / len(errs):.1f}% rows={len(errs)}")
    mape = 100 * sum(errors.values()) / max(1, len(errors))
    worst = 100 * max(errors.values(), default=0.0)
    return mape, worst, len(rejected)


def memory_report() -> tuple[float, int, int]:
    """Print the memory section; return (MAPE % over measured peaks, rows, ran/measured rows that do not fit)."""
    errors, misfits, rows = [], 0, load_memory_rows()
    print(f"{'row':14s} {'model':16s} {'outcome':8s} {'peak GiB':>9s} {'projected':>9s} {'cap':>6s}  verdict")
    for row in rows:
        r = memory_verdict(row)
        projected = r.memory_per_gpu_gb
        fits = bool(r.legal and r.fits)
        above_hbm = row.peak_gib is not None and row.peak_gib > row.hbm_gib
        if row.outcome in ("ran", "measured") and not fits and not above_hbm:
            misfits += 1
        err = ""
        if row.peak_gib is not None and projected is not None:
            errors.append(abs(projected / row.peak_gib - 1))
            err = f"{100 * (projected / row.peak_gib - 1):+.1f}%"
        verdict = ("illegal: " + r.reason) if not r.legal else ("fits" if r.fits else "OOM")
        note = " (the source's figure exceeds the HBM: not a run that fit)" if above_hbm else ""
        print(f"{row.id:14s} {row.model:16s} {row.outcome:8s} {row.peak_gib or float('nan'):9.1f} "
              f"{projected or float('nan'):9.1f} {row.hbm_gib:6.1f}  {verdict} {err}{note}")
    mape = 100 * sum(errors) / max(1, len(errors))
    print(f"memory: mape={mape:.1f}% over {len(errors)} measured peaks; ran/measured rows that do not fit: {misfits}")
    return mape, len(rows), misfits


def main() -> None:
    rows = load_rows()
    mape, worst, rejected = throughput_report(rows)
    memory_report()
    held = held_out_errors(rows)
    moe_mape, moe_worst = held_out_report(rows, held)
    if "--write-uncertainty" in sys.argv[1:]:
        write_uncertainty(rows, held)
        print(f"wrote {UNCERTAINTY_FILE}")
    print(f"mape={mape:.1f}% max_abs_err={worst:.1f}% rows={len(rows) - rejected} rejected={rejected} "
          f"moe_held_out_mape={moe_mape:.1f}% moe_held_out_max={moe_worst:.1f}%")


if __name__ == "__main__":
    main()
