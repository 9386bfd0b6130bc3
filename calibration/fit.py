"""Fit the performance model's per-family constants on the published throughput table.

Fits a handful of global constants per GPU family (never one per row) by minimising the mean squared
log error of projected vs measured tokens/s/GPU, plus a penalty whenever two rows of the same model,
GPU and source come out in the wrong order. Rows: calibration/data/throughput.csv and
calibration/data/extra_throughput.csv; unknown knobs are tuned per row (calibration/rows.py).
The AMD families (cdna3: MI300X/MI325X, cdna4: MI355X) are fitted together, twice: the roofline
constants with the roofline forced, then, with attention fixed, Origami's efficiency and the host's
time per launch with Origami serving the GEMMs (skipped, values kept, where rocm-origami is not
installed). The launch time is seen by the rows whose layers the host cannot issue as fast as the GPU
runs them: Primus's DeepSeek-V2-Lite micro-batch scaling on MI355X (MBS 1 and 2 take the same time
per micro-batch, calibration/data/moe_throughput.csv) and DeepSeek-V2 at MBS 1. Blackwell
(B200, B300, GB200, GB300) is fitted on its own rows, its GEMM efficiencies held at TransformerEngine's
published B300 benchmark where its rows cannot identify them (calibration/published.py), its overlap cost
its own. MoE layers have no constant of their
own: their terms are physics (oracle/performance/moe_layer.py). Writes
oracle/performance/calibration.yaml (`fitted:` apart from `held:`, which the fit never changes) and
prints the error table (benchmarks/accuracy.py). Usage, from the repository root:
.venv/bin/python -m paratune.calibration.fit [--check]
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import yaml

from paratune.oracle.catalog import gpu as catalog_gpu
from paratune.oracle.performance import calibration
from paratune.oracle.performance.calibration import (
    CALIBRATION_FILE,
    FITTED,
    SHARED,
    Constants,
    constants_for,
    with_fitted,
)
from paratune.oracle.performance.gemm_origami import origami_available
from paratune.oracle.specs import EffectiveConfig

from .published import PUBLISHED, published_effs, source
from .rows import Row, load_rows, order_pairs, project, project_at

# (families, constants fitted, settings held during the fit); a constant the group's rows cannot
# see keeps its current value
GROUPS = {
    "ampere": (("ampere",), ("gemm_eff", "tp_exposed", "launch_us"), {}),
    "hopper": (("hopper",), ("gemm_eff", "fp8_gemm_eff", "attn_eff", "tp_exposed", "launch_us"), {}),
    "amd-roofline": (("cdna3", "cdna4"), ("gemm_eff", "fp8_gemm_eff", "attn_eff"), {"gemm_model": "roofline"}),
    "amd-origami": (("cdna3", "cdna4"), ("origami_eff", "launch_us"), {}),
    # the host, TP-collective and overlap constants over both Blackwell dies, then each die's efficiencies on its
    # own rows: NVL72's NVLink 5 and Blackwell's SMs lose their own share of compute to hidden traffic (with the
    # dense Bridge 26.04.01 rows, one cost shared with Hopper and AMD falls from 0.31 to 0.13 and moves their rows)
    "blackwell-shared": (("blackwell", "blackwell-ultra"),
                         ("tp_exposed", "launch_us", "grace_launch_us", "overlap_cost"), {}),
    # GEMM efficiencies held at TransformerEngine's published B300 benchmark (published.py): both dies' BF16,
    # Blackwell Ultra's per-tensor FP8 (MXFP8 at `gemm.MXFP8_OVER_FP8` of it)
    "blackwell": (("blackwell",), ("fp8_gemm_eff", "attn_eff"), {}),
    "blackwell-ultra": (("blackwell-ultra",), ("attn_eff",), {}),
}
ROUNDS = 2  # each round re-chooses every row's tuned layout under the constants fitted so far
COPIES: dict[str, str] = {}  # families without rows (held.copied in calibration.yaml): none now
BOUNDS = {
    "gemm_eff": (0.4, 0.95), "fp8_gemm_eff": (0.3, 0.95), "attn_eff": (0.2, 0.9),
    "tp_exposed": (0.0, 1.0), "launch_us": (1.0, 200.0), "grace_launch_us": (1.0, 400.0), "origami_eff": (0.4, 1.2),
    "overlap_cost": (0.0, 1.0),  # 0: a hidden transfer is free; 1: it costs the compute it hides behind
}
ORDER_WEIGHT = 4.0
ORDER_MARGIN = 0.02  # projected log-ratio a correctly ordered pair should keep


def family_of_row(row: Row) -> str:
    return catalog_gpu(row.gpu).family


Chosen = dict[str, EffectiveConfig]  # row id -> its tuned layout, held while constants move


def choose(rows: list[Row], consts: dict[str, dict[str, float]] | None = None) -> Chosen:
    """Each projected row's fastest candidate under the current constants (with `consts`' fitted values
    per family over them); rejected rows are left out. The fit re-chooses once per round."""
    out = {}
    for row in rows:
        fam = family_of_row(row)
        p = project(row, with_fitted(constants_for(fam), (consts or {}).get(fam, {})))
        if p is not None:
            out[row.id] = p.cfg
    return out


def _loss(rows: list[Row], chosen: Chosen, consts: Callable[[Row], Constants | None]) -> float:
    """Mean squared log error of the rows at their `chosen` layouts under `consts(row)` (None: the calibrated
    constants), plus the order penalty of rows of one model, GPU and source projected in the wrong order."""
    logs = {}
    for row in rows:
        if row.id not in chosen:  # a rejected published run: listed by the report, not fitted
            continue
        p = project_at(row, chosen[row.id], consts(row))
        logs[row.id] = math.log(p.estimate.tokens_per_s_per_gpu / row.measured)
    loss = sum(x * x for x in logs.values()) / len(logs)
    for a, b in order_pairs([r for r in rows if r.id in logs]):  # a measured faster than b
        gap = (logs[b.id] + math.log(b.measured)) - (logs[a.id] + math.log(a.measured)) + ORDER_MARGIN
        loss += ORDER_WEIGHT * max(0.0, gap) ** 2
    return loss


def _objective(rows: list[Row], values: dict[str, float], families: tuple[str, ...], chosen: Chosen) -> float:
    """`_loss` with `values` over the constants of the rows of `families`."""
    def consts(row: Row) -> Constants | None:
        fam = family_of_row(row)
        return with_fitted(constants_for(fam), values) if fam in families else None

    return _loss(rows, chosen, consts)


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


def fit_group(rows: list[Row], families: tuple[str, ...], names: tuple[str, ...], held: dict, chosen: Chosen,
              sweeps: int = 3) -> dict[str, float]:
    """Coordinate descent over the group's constants, each row at its `chosen` layout; `held`: settings
    and values fitted earlier for the same families."""
    base = with_fitted(constants_for(families[0]), held)
    values = {n: getattr(base, n) for n in names}
    for _ in range(sweeps if len(names) > 1 else 1):
        for name in names:
            def f(x: float, name: str = name) -> float:
                return _objective(rows, {**held, **values, name: x}, families, chosen)
            values[name] = _golden(f, *BOUNDS[name], values[name])
    return values


def fitted_names(family: str) -> tuple[str, ...]:
    """The per-family constants some group fits for this family (the rest are held; a shared one it does not
    fit comes from `fit_shared`)."""
    return tuple(n for n in (*FITTED, *SHARED)
                 if any(family in fams and n in names for fams, names, _ in GROUPS.values()))


def own_shared(name: str) -> frozenset[str]:
    """The families whose group fits shared constant `name` for them (fit_shared leaves their rows out)."""
    return frozenset(fam for fams, names, _ in GROUPS.values() if name in names for fam in fams)


def group_rows(rows: list[Row], group: str) -> list[Row]:
    """The rows one group is fitted on: its families' rows."""
    return [r for r in rows if family_of_row(r) in GROUPS[group][0]]


def fit_shared(rows: list[Row], chosen: Chosen, fitted: dict[str, dict[str, float]]) -> dict[str, float]:
    """The constants the families share (`SHARED`), each at its least-squares value over the `rows` of the
    families that do not fit their own (`own_shared`: Blackwell's group fits its overlap cost), a row under its
    family's constants with `fitted`'s values (group -> values) over them.

    overlap_cost (compute lost per ms of traffic hidden behind compute: TE userbuffers' TP overlap, EP
    overlap, DP/FSDP prefetch; oracle/performance/layers.py `_hidden_behind`, pipeline.py) has no published
    on/off pair of Megatron's TP overlap to derive it from (the search is listed in docs/internals.md); the
    rows identify it: the published runs with TP overlap on (Megatron-LM README r0.8 `--tp-comm-overlap`,
    NeMo and DGX Cloud Llama 3.1 70B/405B, Bridge's Llama recipes) beside those without (`tp_exposed`), and
    the DP overlap of nearly every row."""
    per_family: dict[str, dict[str, float]] = {}
    for group, values in fitted.items():
        for fam in GROUPS[group][0]:
            per_family.setdefault(fam, {}).update(values)
    out: dict[str, float] = {}
    for name in SHARED:
        own = own_shared(name)
        members = [r for r in rows if family_of_row(r) not in own]
        out[name] = getattr(constants_for(family_of_row(members[0])), name)

        def f(x: float, name: str = name, members: list[Row] = members) -> float:
            return _loss(members, chosen, lambda row: with_fitted(
                constants_for(family_of_row(row)), {**per_family.get(family_of_row(row), {}), **out, name: x}))
        out[name] = _golden(f, *BOUNDS[name], out[name])
    return out


def fit_all(rows: list[Row], chosen: Chosen, refit: set[str] | None = None
            ) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Every group's fitted constants on `rows` at their `chosen` layouts (only the groups of `refit`'s
    families when given: the others keep their values), then the shared ones over all of them (pure: nothing
    is written); a group sees the values fitted before it for its families (the AMD groups share theirs).
    Returns (group -> values, shared values)."""
    out: dict[str, dict[str, float]] = {}
    for group, (families, names, settings) in GROUPS.items():
        if refit is not None and not refit & set(families):
            continue
        members = group_rows(rows, group)
        if not members or (group == "amd-origami" and not origami_available()):
            why = "no rows" if not members else "rocm-origami is not installed; origami_eff and launch_us kept"
            print(group, "skipped:", why)
            continue
        earlier = {k: v for g, vals in out.items() if set(GROUPS[g][0]) & set(families) for k, v in vals.items()}
        out[group] = fit_group(members, families, names, {**earlier, **settings}, chosen)
    return out, fit_shared(rows, chosen, out)


def main() -> None:
    from .report import throughput_report as report  # the report reads the held-out fit, which is this module's

    rows = load_rows()
    if "--check" in sys.argv:
        report(rows)
        return
    data = yaml.safe_load(CALIBRATION_FILE.read_text(encoding="utf-8"))
    fitted = data["fitted"]
    _prepare(data, rows)
    for _ in range(ROUNDS):
        chosen = choose(rows)
        groups, shared = fit_all(rows, chosen)
        for group, values in groups.items():
            print(group, {k: round(v, 4) for k, v in values.items()}, flush=True)
            for k, v in values.items():
                for fam in GROUPS[group][0]:
                    fitted["families"].setdefault(fam, {})[k] = round(v, 4)
        print("every family", {k: round(v, 4) for k, v in shared.items()}, flush=True)
        fitted["every_family"] = {k: round(v, 4) for k, v in shared.items()}
        _reload(data, rows)
    CALIBRATION_FILE.write_text(_dump(data, rows), encoding="utf-8")
    report(rows)


def _prepare(data: dict, rows: list[Row]) -> None:
    """Put each constant where this fit's groups say it lives before fitting: the GPUs with rows, a constant a
    group fits no longer held, a family's own shared constant seeded from the shared value, the published
    efficiencies held (published.py)."""
    fitted, held = data["fitted"], data["held"]["families"]
    fitted["calibrated_gpus"] = sorted({r.gpu for r in rows})  # GPUs with published rows in the fit
    for families, names, _ in GROUPS.values():
        for fam in families:
            for name in names:
                held.get(fam, {}).pop(name, None)
    for name in SHARED:
        for fam in own_shared(name):
            fitted["families"].setdefault(fam, {}).setdefault(name, fitted["every_family"][name])
    for fam, values in published_effs().items():
        held.setdefault(fam, {}).update(values)
        for name in values:
            fitted["families"].get(fam, {}).pop(name, None)
    _reload(data, rows)


def _reload(data: dict, rows: list[Row]) -> None:
    """Make the constants fitted so far the ones later groups and the report see."""
    CALIBRATION_FILE.write_text(_dump(data, rows), encoding="utf-8")
    calibration._load.cache_clear()
    calibration.families.cache_clear()
    constants_for.cache_clear()


# Why each held value is held: the priors (one line each) and the per-family constants no group fits.
PRIOR_NOTES = {
    "gemm_model": "a setting: Origami where installed and it knows the GPU, else the roofline (gemm.py)",
    "hbm_eff": "assumed fraction of HBM bandwidth memory-bound kernels reach; no source recorded",
    "link_eff": "assumed bus-bandwidth fraction of a link for a large collective; no source recorded",
    "alpha_intra_us": "assumed latency per collective step inside a node; no source recorded",
    "alpha_inter_us": "assumed latency per collective step across nodes; no source recorded",
    "a2a_peer_us": "assumed per-remote-peer cost of an NCCL all-to-all message; no source recorded",
    "host_sync_us": ("assumed exposed cost of one device-to-host sync (cudaStreamSynchronize, then the CPU "
                     "relaunches the next kernels); no source recorded"),
    "gemm_latency_us": "assumed fixed cost of one GEMM kernel launch; no source recorded",
    "gemm_k_overhead": "assumed per-tile prologue/epilogue in K steps (gemm.py); no source recorded",
    "grad_bucket_params": ("megatron-core DistributedDataParallelConfig.bucket_size default "
                           "max(40M, 1M x DP): its 40M floor"),
}
HELD_NOTES = {  # per-family constant -> why no group fits it there
    "fp8_gemm_eff": "never read: the family's GPUs have no FP8 peak (fp8_tflops null)",
    "origami_eff": "never read: Origami serves AMD GPUs only",
    "attn_eff": "not in this family's group: kept at its starting value",
    "tp_exposed": "not in this family's groups (no AMD row runs TP > 1): kept at its starting value",
    "launch_us": "not in this family's groups: kept at its starting value",
}


def _flow(values: dict) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in values.items()) + "}"


def _dump(data: dict, rows: list[Row]) -> str:
    """calibration.yaml: `fitted` (what the fit chose, and on what) apart from `held` (what it does not
    touch, each with its source or reason)."""
    fitted, held = data["fitted"], data["held"]
    out = ["# Written by `python -m paratune.calibration.fit` (calibration/fit.py) on calibration/data/throughput.csv",
           "# and calibration/data/extra_throughput.csv. fitted: the values the fit chose and what each was",
           "# fitted on. held: the values it does not touch, each with its source or reason.",
           "fitted:",
           "  # GPUs with published rows in the fit (others take their family's constants: uncalibrated)",
           f"  calibrated_gpus: [{', '.join(fitted['calibrated_gpus'])}]",
           "  # per GPU family, the constants its groups fit (cdna3 and cdna4 fitted together)",
           "  families:"]
    for fam, values in fitted["families"].items():
        out.append(f"    {fam}: {_flow({n: values[n] for n in fitted_names(fam)})}")
    out += ["  # shared by the other families, fitted once over their rows, each under its family's constants",
            "  # (fit_shared):",
            "  # overlap_cost, the compute lost per ms of traffic hidden behind compute (TP userbuffers, EP overlap,",
            "  # DP/FSDP prefetch); no published on/off pair of Megatron's TP overlap was found, the rows identify it",
            f"  every_family: {_flow({n: fitted['every_family'][n] for n in SHARED})}",
            "  # each group: its families, the constants it fits, settings held during its fit, its rows",
            "  fitted_on:"]
    for group, (families, names, settings) in GROUPS.items():
        members = group_rows(rows, group)
        out.append(f"    {group}: {{families: [{', '.join(families)}], constants: [{', '.join(names)}], "
                   f"settings: {_flow(settings)}, rows: {len(members)}, "
                   f"gpus: [{', '.join(sorted({r.gpu for r in members}))}]}}")
    for name in SHARED:
        own = own_shared(name)
        fams = [f for f in fitted["families"] if f not in own]
        out.append(f"    every_family: {{families: [{', '.join(fams)}], constants: [{name}], "
                   f"rows: {sum(family_of_row(r) not in own for r in rows)}}}")
    out += ["held:",
            "  # families without published rows take a fitted family's values (uncalibrated)",
            "  copied: {" + ", ".join(f"{k}: {v}" for k, v in COPIES.items()) + "}"]
    out += ["  # per-family constants no group fits for that family", "  families:"]
    for fam, values in held["families"].items():
        out.append(f"    {fam}:")
        out += [f"      {k}: {v}  # {source(fam) if fam in PUBLISHED and k in PUBLISHED[fam][1] else HELD_NOTES[k]}"
                for k, v in values.items()]
    out += ["  # priors shared by every family, not fitted", "  priors:"]
    out += [f"    {k}: {v}  # {PRIOR_NOTES[k]}" for k, v in held["priors"].items()]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
