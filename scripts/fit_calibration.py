"""Fit the performance model's per-family constants on the published throughput table.

Fits a handful of global constants per GPU family (never one per row) by minimising the mean squared
log error of projected vs measured tokens/s/GPU, plus a penalty whenever two rows of the same model,
GPU and source come out in the wrong order. Rows: calibration/data/throughput.csv and
calibration/data/extra_throughput.csv; unknown knobs are tuned per row (calibration/rows.py).
The AMD families (cdna3: MI300X/MI325X, cdna4: MI355X) are fitted together (four rows), twice: the
roofline constants with the roofline forced, then, with attention fixed, Origami's efficiency with
Origami serving the GEMMs (skipped, value kept, where rocm-origami is not installed). Blackwell has
no rows and takes hopper's values. Writes oracle/performance/calibration.yaml and prints the
error table (benchmarks/accuracy.py). Usage: .venv/bin/python scripts/fit_calibration.py [--check]
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibration.report import throughput_report as report  # noqa: E402
from calibration.rows import Row, load_rows, order_pairs, project  # noqa: E402
from oracle.catalog import gpu as catalog_gpu  # noqa: E402
from oracle.performance import calibration  # noqa: E402
from oracle.performance.calibration import CALIBRATION_FILE, FITTED, GLOBAL_FITTED, constants_for, with_fitted  # noqa: E402
from oracle.performance.gemm_origami import origami_available  # noqa: E402

# (families, constants fitted, settings held during the fit); a constant the group's rows cannot
# see keeps its current value
GROUPS = {
    "ampere": (("ampere",), ("gemm_eff", "tp_exposed", "layer_overhead_us"), {}),
    "hopper": (("hopper",), ("gemm_eff", "fp8_gemm_eff", "attn_eff", "tp_exposed", "layer_overhead_us"), {}),
    "amd-roofline": (("cdna3", "cdna4"), ("gemm_eff", "fp8_gemm_eff", "attn_eff"), {"gemm_model": "roofline"}),
    "amd-origami": (("cdna3", "cdna4"), ("origami_eff",), {}),
    "moe": (("ampere", "hopper", "blackwell", "cdna3", "cdna4"), ("moe_overhead_us",), {}),
}
ROUNDS = 2  # the groups share rows (MoE rows see their family's constants and the MoE overhead)
COPIES = {"blackwell": "hopper"}  # families without rows
BOUNDS = {
    "gemm_eff": (0.4, 0.95), "fp8_gemm_eff": (0.3, 0.95), "attn_eff": (0.2, 0.9),
    "tp_exposed": (0.0, 1.0), "layer_overhead_us": (0.0, 300.0), "origami_eff": (0.4, 1.2),
    "moe_overhead_us": (0.0, 3000.0),
}
ORDER_WEIGHT = 4.0
ORDER_MARGIN = 0.02  # projected log-ratio a correctly ordered pair should keep


def family_of_row(row: Row) -> str:
    return catalog_gpu(row.gpu).family


def _objective(rows: list[Row], values: dict[str, float], families: tuple[str, ...]) -> float:
    logs = {}
    for row in rows:
        fam = family_of_row(row)
        c = with_fitted(constants_for(fam), values) if fam in families else None
        p = project(row, c)
        if p is None:  # a rejected published run: listed by the report, not fitted
            continue
        logs[row.id] = math.log(p.estimate.tokens_per_s_per_gpu / row.measured)
    loss = sum(x * x for x in logs.values()) / len(logs)
    for a, b in order_pairs([r for r in rows if r.id in logs]):  # a measured faster than b
        gap = (logs[b.id] + math.log(b.measured)) - (logs[a.id] + math.log(a.measured)) + ORDER_MARGIN
        loss += ORDER_WEIGHT * max(0.0, gap) ** 2
    return loss


def _golden(f, lo: float, hi: float, x0: float, iters: int = 12) -> float:
    """Minimise a 1-D function on [lo, hi] by golden-section search (keeps x0 if nothing is better)."""
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    best = c if fc < fd else d
    return best if min(fc, fd) < f(x0) else x0


def fit_group(rows: list[Row], families: tuple[str, ...], names: tuple[str, ...], held: dict,
              sweeps: int = 3) -> dict[str, float]:
    """Coordinate descent over the group's constants."""
    base = constants_for(families[0])
    values = {n: getattr(base, n) for n in names}
    for _ in range(sweeps if len(names) > 1 else 1):
        for name in names:
            def f(x: float, name: str = name) -> float:
                return _objective(rows, {**values, **held, name: x}, families)
            values[name] = _golden(f, *BOUNDS[name], values[name])
    return values


def main() -> None:
    rows = load_rows()
    if "--check" in sys.argv:
        report(rows)
        return
    data = yaml.safe_load(CALIBRATION_FILE.read_text(encoding="utf-8"))
    data["calibrated_gpus"] = sorted({r.gpu for r in rows})  # GPUs with published rows in the fit
    for _ in range(ROUNDS):
        for group, (families, names, held) in GROUPS.items():
            if group == "amd-origami" and not origami_available():
                print(group, "skipped: rocm-origami is not installed; origami_eff kept")
                continue
            members = [r for r in rows if family_of_row(r) in families]
            if group == "moe":
                members = [r for r in members if r.ep > 1]
            values = fit_group(members, families, names, held)
            print(group, {k: round(v, 4) for k, v in values.items()}, flush=True)
            for k, v in values.items():
                for fam in ([] if k in GLOBAL_FITTED else families):
                    data["families"][fam][k] = round(v, 4)
                if k in GLOBAL_FITTED:
                    data["global"][k] = round(v, 4)
            _reload(data)
    for fam, src in COPIES.items():
        data["families"][fam] = dict(data["families"][src])
    CALIBRATION_FILE.write_text(_dump(data), encoding="utf-8")
    report(rows)


def _reload(data: dict) -> None:
    """Make the constants fitted so far the ones later groups and the report see."""
    CALIBRATION_FILE.write_text(_dump(data), encoding="utf-8")
    calibration._load.cache_clear()
    constants_for.cache_clear()


def _dump(data: dict) -> str:
    head = ("# Fitted by scripts/fit_calibration.py on calibration/data/throughput.csv and\n"
            "# calibration/data/extra_throughput.csv. families: fitted per GPU family (cdna3 and cdna4\n"
            "# fitted together; blackwell has no rows and copies hopper). global: fitted on all MoE rows.\n"
            "# priors: physical, not fitted.\n")
    fams = "\n".join(f"  {k}: {{{', '.join(f'{n}: {v[n]}' for n in FITTED)}}}" for k, v in data["families"].items())
    glob = "\n".join(f"  {k}: {v}" for k, v in data["global"].items())
    priors = "\n".join(f"  {k}: {v}" for k, v in data["priors"].items())
    copied = "\n".join(f"  {k}: {v}" for k, v in COPIES.items())
    rows = ", ".join(data["calibrated_gpus"])
    return (f"{head}families:\n{fams}\ncopied:\n{copied}\n"
            f"# GPUs with published rows in the fit (others take their family's constants: uncalibrated)\n"
            f"calibrated_gpus: [{rows}]\nglobal:\n{glob}\npriors:\n{priors}\n")


if __name__ == "__main__":
    main()
