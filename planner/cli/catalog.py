"""`paratune catalog`: the GPUs (with the names people type for them) and models paratune knows."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from paratune.oracle.catalog import aliases_of, gpu, gpu_names, model_card, model_names
from paratune.oracle.performance.calibration import calibrated


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("catalog", help="list the catalog's GPUs (aliases, calibration) and models")
    p.add_argument("what", nargs="?", choices=("gpus", "models"), help="only one of the two lists")
    p.set_defaults(handler=_run)


def _gpus(console: Console) -> None:
    aliases = aliases_of()
    table = Table("GPU", "also", "vendor", "family", "HBM GB", "BF16 TF", "FP8 TF", "calibrated", "source")
    for name in gpu_names():
        g = gpu(name)
        table.add_row(name, ", ".join(aliases.get(name, [])), g.vendor, g.family, f"{g.hbm_gb:g}",
                      f"{g.bf16_tflops:g}", f"{g.fp8_tflops:g}" if g.fp8_tflops else "-",
                      "yes" if calibrated(g) else "no", g.source)
    console.print(table)


def _models(console: Console) -> None:
    table = Table("model", "layers", "hidden", "experts", "source")
    for name in model_names():
        card = model_card(name)
        table.add_row(name, str(card.get("num_layers", "")), str(card.get("hidden_size", "")),
                      str(card.get("num_experts") or "-"), str(card.get("source", "")))
    console.print(table)


def _run(args: argparse.Namespace) -> int:
    console = Console()
    if args.what in (None, "gpus"):
        _gpus(console)
    if args.what in (None, "models"):
        _models(console)
    return 0
