"""Calibration constants (calibration.yaml): a few fitted numbers per GPU family, fitted constants shared
by every family, and held values that are not fitted. The YAML keeps them apart: `fitted:` (per-family
values, the shared ones, the GPUs with rows, what each group was fitted on) and `held:` (families that
copy a fitted one, per-family constants no group fits, the shared priors), each held value with its
source or reason. Written by calibration/fit.py."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from ..specs import GPUSpec

CALIBRATION_FILE = Path(__file__).with_name("calibration.yaml")
FITTED = ("gemm_eff", "fp8_gemm_eff", "origami_eff", "attn_eff", "tp_exposed", "launch_us", "grace_launch_us")
SHARED = ("overlap_cost",)  # fitted once over the rows of every family that does not fit its own (calibration/fit.py
# `fit_shared`); a family whose group fits one (Blackwell) keeps it in `fitted.families`
# A family whose rows hold no Grace-hosted GPU takes the x86 launch time times this ratio for a user's own Grace
# GPU: per-op host time of a torch Linear forward, GB200's Grace against a DGX H100's Xeon 8480C, 37.08 / 13.48 us
# (TransformerEngine issue #2053).
GRACE_OVER_X86_LAUNCH = 37.08 / 13.48
# Families the YAML does not list borrow the constants of a measured one of the same vendor.
_VENDOR_FALLBACK = {"nvidia": "hopper", "amd": "cdna3"}


@dataclass(frozen=True)
class Constants:
    """Everything the time model reads besides the hardware: fitted per family, priors shared."""

    # fitted per family (calibration/fit.py)
    gemm_eff: float  # fraction of the BF16/FP16 dense peak a large full-wave GEMM reaches
    fp8_gemm_eff: float  # fraction of the FP8 dense peak a large full-wave FP8 GEMM reaches
    origami_eff: float  # fraction of Origami's predicted GEMM speed reached in training (AMD only)
    attn_eff: float  # fraction of the BF16 peak flash attention reaches
    tp_exposed: float  # fraction of TP/SP collective time not hidden behind GEMMs (without tp_comm_overlap)
    launch_us: float  # host time to issue one kernel launch of a layer on an x86 host (host_issue.py)
    grace_launch_us: float  # the same on a Grace host (GPUSpec.host_cpu; GB200/GB300 NVL72)
    # fitted once over every family's rows (calibration/fit.py `fit_shared`): no published on/off pair of
    # Megatron's TP overlap was found; the rows that run TE's userbuffers beside those that do not identify it
    overlap_cost: float  # compute lost per ms of DP/FSDP/TP/EP traffic hidden behind it (SMs/CUs and HBM it takes)
    # held priors (not fitted; held.priors in calibration.yaml, each with its source or reason)
    gemm_model: str  # "auto": Origami where installed and it knows the GPU, else the roofline; "roofline"
    hbm_eff: float  # fraction of HBM bandwidth memory-bound kernels reach
    link_eff: float  # fraction of a link's bandwidth a large collective reaches (bus bandwidth)
    alpha_intra_us: float  # latency per collective step inside a node
    alpha_inter_us: float  # latency per collective step across nodes
    a2a_peer_us: float  # per-remote-peer cost of an NCCL all-to-all message across nodes
    host_sync_us: float  # one device-to-host sync of an MoE dispatcher (the launch queue drains and refills)
    gemm_latency_us: float  # fixed cost of one GEMM kernel
    gemm_k_overhead: float  # per-tile prologue/epilogue, in K steps (small-K GEMMs run below peak)
    grad_bucket_params: float  # parameters per gradient bucket (Megatron DDP default 40M)


@cache
def _load() -> dict:
    return yaml.safe_load(CALIBRATION_FILE.read_text(encoding="utf-8"))


@cache
def families() -> dict[str, dict]:
    """family -> its per-family constants: the fitted ones with the held ones beside them; a family
    without rows (held.copied) takes the whole set of the family it copies."""
    data = _load()
    fitted, held = data["fitted"]["families"], data["held"]
    out = {fam: {**held["families"].get(fam, {}), **values} for fam, values in fitted.items()}
    return out | {fam: out[src] for fam, src in held["copied"].items()}


def family_of(gpu: GPUSpec) -> str:
    """The calibrated family whose constants this GPU uses."""
    return gpu.family if gpu.family in families() else _VENDOR_FALLBACK.get(gpu.vendor, "hopper")


@cache
def constants_for(family: str) -> Constants:
    """Constants of one family (its fitted values, the shared fitted ones, the held ones)."""
    data = _load()
    fam = families()[family]
    values: dict[str, Any] = {k: float(fam[k]) for k in FITTED if k in fam}
    values.setdefault("grace_launch_us", values["launch_us"] * GRACE_OVER_X86_LAUNCH)
    values |= {k: float(data["fitted"]["every_family"][k]) for k in SHARED}
    values |= {k: float(fam[k]) for k in SHARED if k in fam}  # the family's own, where its group fits one
    values |= {k: v if isinstance(v, str) else float(v) for k, v in data["held"]["priors"].items()}
    return Constants(**values)


def calibrated(gpu: GPUSpec) -> bool:
    """Whether published training rows of this very GPU were in the fit (`fitted.calibrated_gpus` in
    calibration.yaml); any other GPU runs on its family's, or a borrowed family's, constants."""
    return gpu.name in _load()["fitted"]["calibrated_gpus"]


def constants(gpu: GPUSpec) -> Constants:
    return constants_for(family_of(gpu))


def with_fitted(base: Constants, values: dict[str, float]) -> Constants:
    """A copy of `base` with some fitted constants replaced (used by the fit)."""
    known = {f.name for f in fields(Constants)}
    update: dict[str, Any] = {k: v for k, v in values.items() if k in known}
    return replace(base, **update)
