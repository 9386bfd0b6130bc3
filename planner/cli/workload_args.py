"""`--workload` and `--primus-root` of every command that reads a workload, and what reading it says.

The workload follows the cluster's stack (its file's `target_cluster.stack`, or `--stack`): one
statement of the stack decides the knobs and the workload's stack defaults. What the reading noted
(deprecated values read as Megatron reads them) and the real stack arguments the file sets that the
oracle does not model are printed, not kept in an internal list."""

from __future__ import annotations

import argparse
import sys

from paratune.oracle.constraints import pinned
from paratune.oracle.inputs import load_workload
from paratune.oracle.specs import ClusterSpec, Workload


def add_workload_arguments(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    p.add_argument("--workload", required=required,
                   help="workload: native YAML, Primus experiment, Megatron-LM flags file (a pretrain_gpt.py launch "
                        "script or --flag lines), or Hugging Face config.json / its folder")
    add_primus_root(p)


def add_primus_root(p: argparse.ArgumentParser) -> None:
    p.add_argument("--primus-root", metavar="DIR",
                   help="the Primus checkout a Primus experiment's config:/model: names resolve in (default: "
                        "$PRIMUS_ROOT, else the Primus tree the experiment sits in)")


def primus_root_argv(args: argparse.Namespace) -> list[str]:
    """`--primus-root DIR` as given, for a `paratune serve` child that reads the same workload."""
    return ["--primus-root", args.primus_root] if args.primus_root else []


def own_workload(args: argparse.Namespace, cluster: ClusterSpec) -> Workload:
    """The workload as the user wrote it, read under the cluster's stack (no pins written in)."""
    stated_in = "--stack" if getattr(args, "stack", None) else args.target_cluster
    return load_workload(args.workload, primus_root=args.primus_root, stack=cluster.stack, stack_from=stated_in)


def workload_from_args(args: argparse.Namespace, cluster: ClusterSpec) -> Workload:
    """The workload, read under the cluster's stack, with the user's fixed knobs written in."""
    return pinned(own_workload(args, cluster), cluster)


def reading_lines(workload: Workload) -> list[str]:
    """What reading the workload noted, and the arguments it sets that the oracle does not model."""
    lines = [f"note: {n}" for n in workload.notes]
    if workload.not_modelled:
        lines.append(f"accepted, not modelled ({len(workload.not_modelled)} arguments of {workload.stack} the "
                     f"projection does not read): {', '.join(workload.not_modelled)}")
    return lines


def print_reading(workload: Workload) -> None:
    """`reading_lines` on stderr (stdout stays the command's result, e.g. one JSON object)."""
    for line in reading_lines(workload):
        print(line, file=sys.stderr)
