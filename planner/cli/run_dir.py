"""A `paratune tune` output folder as the CLI names it: `--out-dir DIR [--run N]`."""

from __future__ import annotations

import argparse
from pathlib import Path

from paratune.ledger.store import Ledger
from paratune.oracle.errors import InputError


def add_run_arguments(p: argparse.ArgumentParser, *, required: bool) -> None:
    p.add_argument("--out-dir", required=required, help="a `paratune tune` output folder (its ledger.sqlite)")
    p.add_argument("--run", type=int, help="run id in that ledger (default: its latest run)")


def open_run_ledger(out_dir: str, run: int | None) -> tuple[Ledger, int]:
    """(the folder's ledger, the run id): the named run, or the latest one."""
    path = Path(out_dir) / "ledger.sqlite"
    if not path.is_file():
        raise InputError("no ledger.sqlite in it: is it a `paratune tune` output folder?", file=out_dir,
                         key="--out-dir")
    ledger = Ledger(path)
    ids = [r.id for r in ledger.runs()]
    if not ids or (run is not None and run not in ids):
        ledger.close()
        raise InputError(f"no run {run if run is not None else ''} in it (runs: {', '.join(map(str, ids)) or 'none'})",
                         file=str(path), key="--run")
    return ledger, run if run is not None else max(ids)
