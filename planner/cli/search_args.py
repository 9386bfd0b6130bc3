"""`--stack`, `--fix`, `--allow` and `--exclude`: the user's say over what the search may change.

They sit on top of the cluster YAML's `target_cluster.stack` and `search:` block (a knob named here
takes this rule instead of the file's)."""

from __future__ import annotations

import argparse

import yaml
from pydantic import ValidationError

from paratune.oracle.errors import InputError
from paratune.oracle.specs import ClusterSpec
from paratune.oracle.specs.search import SearchConstraints
from paratune.oracle.stacks import STACKS


def add_search_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("search constraints (on top of the cluster YAML's stack and search: block)")
    g.add_argument("--stack", choices=STACKS, help="software stack the cluster runs (default: the cluster file's, "
                                                  "else Primus on AMD, Megatron-LM on NVIDIA)")
    g.add_argument("--fix", action="append", default=[], metavar="KNOB=VALUE", help="pin a knob (repeatable)")
    g.add_argument("--allow", action="append", default=[], metavar="KNOB=V1,V2",
                   help="limit a knob to these values (repeatable); --allow fp8=none,hybrid lets the search try FP8")
    g.add_argument("--exclude", action="append", default=[], metavar="KNOB",
                   help="keep a knob at the workload's value (repeatable)")


def _pair(text: str, flag: str) -> tuple[str, str]:
    knob, sep, value = text.partition("=")
    if not sep or not knob.strip() or not value.strip():
        raise InputError(f"expected KNOB=VALUE, got {text!r}", key=flag)
    return knob.strip(), value


def _yaml(text: str, flag: str) -> object:
    """A value as YAML reads it (`[a, b]` a list, `true` a bool, `2` an int)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(f"cannot read {text!r} ({str(exc).splitlines()[0]})", key=flag) from None


def constraints_from_args(args: argparse.Namespace) -> SearchConstraints:
    """The constraints the command line states (empty when it states none); `--allow` values are a
    comma-separated YAML sequence, so a list value is written in brackets
    (`--allow recompute_modules=[core_attn,mlp],[mlp]`)."""
    fix: dict[str, object] = {}
    for knob, value in (_pair(t, "--fix") for t in args.fix):
        if knob in fix:
            raise InputError(f"{knob} is pinned twice ({fix[knob]} and {value}): pin it once", key="--fix")
        fix[knob] = _yaml(value, "--fix")
    allow: dict[str, tuple] = {}
    for knob, values in (_pair(t, "--allow") for t in args.allow):
        if knob in allow:
            raise InputError(f"{knob} is named twice: give all its values in one --allow", key="--allow")
        parsed = _yaml(f"[{values}]", "--allow")
        allow[knob] = tuple(parsed) if isinstance(parsed, list) else (parsed,)
    try:
        return SearchConstraints(fix=fix, allow=allow, exclude=tuple(args.exclude))
    except ValidationError as exc:
        raise InputError(exc.errors()[0]["msg"].removeprefix("Value error, "),
                         key=_culprit(fix, allow, args.exclude)) from None


def _culprit(fix: dict, allow: dict, exclude: list[str]) -> str:
    """The flag whose values are wrong on their own (else they clash with each other)."""
    for flag, rules in (("--fix", {"fix": fix}), ("--allow", {"allow": allow}),
                        ("--exclude", {"exclude": tuple(exclude)})):
        try:
            SearchConstraints(**rules)
        except ValidationError:
            return flag
    return "--fix/--allow/--exclude"


def with_search_args(cluster: ClusterSpec, args: argparse.Namespace) -> ClusterSpec:
    """The cluster with the command line's stack and constraints applied."""
    update: dict = {"search": cluster.search.merged(constraints_from_args(args))}
    if args.stack:
        update |= {"stack": args.stack, "stack_is_default": False}
    return cluster.model_copy(update=update)


def search_argv(args: argparse.Namespace) -> list[str]:
    """The same flags as an argument list (handed on to a `paratune serve` child)."""
    out = ["--stack", args.stack] if args.stack else []
    for flag in ("fix", "allow"):
        for text in getattr(args, flag):
            out += [f"--{flag}", text]
    for knob in args.exclude:
        out += ["--exclude", knob]
    return out
