"""Run Megatron-LM's own `parse_args` + `validate_args` on launch lines (a conformance-test helper, run as a
script in a child process: it loads the snapshot's `megatron.training` and stubs what needs a GPU).

stdin: JSON {"megatron_lm": <snapshot folder>, "cases": [{"argv": [...], "env": {...}, "arch": 9}]}
stdout (last line): JSON list, per case {"ok": bool, "error": str, "args": {dest: value, ...}}.
With `--serve`: one such request per stdin line, one answer per stdout line, until stdin closes.
With {"megatron_lm": ..., "flags": true} instead: the last line is `flag_table()`, every option of
Megatron-LM's own parser (`add_megatron_arguments`), as paratune's flags reader holds it
(oracle/inputs/vocabulary/megatron_lm_flags.json, written from this by scripts/build_megatron_flags.py).
How it runs on a CPU follows the snapshot README: `megatron.training` loaded as a bare package (its
`__init__` imports GPU-only modules), `triton` stubbed once torch's compile paths are imported, and
`get_device_arch_version()` (0.16.1 asks the GPU) answered with the case's compute capability.
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import io
import json
import os
import sys
import types


def _load(root: str) -> types.ModuleType:
    sys.path.insert(0, root)
    import megatron.core.transformer  # noqa: F401  (before the triton stub: torch imports the real one or none)
    if "triton" not in sys.modules:
        try:
            import triton  # noqa: F401
        except ImportError:
            sys.modules["triton"] = types.ModuleType("triton")
    pkg = types.ModuleType("megatron.training")
    pkg.__path__ = [os.path.join(root, "megatron", "training")]
    sys.modules["megatron.training"] = pkg
    import megatron.training.global_vars as global_vars
    for name in dir(global_vars):  # what `megatron/training/__init__.py` re-exports and utils.py imports
        if name.startswith("get_"):
            setattr(pkg, name, getattr(global_vars, name))
    import megatron.training.arguments as arguments
    return arguments


def _plain(value: object) -> object:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def _type_name(action: argparse.Action) -> str:
    """How the flags reader converts the value: int, float, str, bool, or a named Megatron type function
    (moe_freq_type, tuple_type, ...; an enum's handler as "enum", the cuda-graph-scope lambda as "str")."""
    kind = action.type
    name = getattr(kind, "__name__", "str") if kind is not None else "str"
    return {"enum_type_handler": "enum", "<lambda>": "str"}.get(name, name)


def flag_table(arguments: types.ModuleType) -> dict[str, list[object]]:
    """option string -> [dest, kind ("value" | "true" | "false"), nargs, type, choices, default]."""
    parser = arguments.add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    table: dict[str, list[object]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        choices = [c.name if isinstance(c, enum.Enum) else c for c in action.choices] if action.choices else None
        default = action.default.name if isinstance(action.default, enum.Enum) else _plain(action.default)
        for option in action.option_strings:
            if isinstance(action, argparse._StoreTrueAction):
                kind = "true"
            elif isinstance(action, argparse._StoreFalseAction):
                kind = "false"
            elif isinstance(action, argparse.BooleanOptionalAction):
                kind = "false" if option.startswith("--no-") else "true"
            else:
                kind = "value"
            table[option] = [action.dest, kind, action.nargs if kind == "value" else 0, _type_name(action), choices,
                             default]
    return dict(sorted(table.items()))


def answer(arguments: types.ModuleType, request: dict) -> object:
    """The flag table (`"flags": true`), or each case's parse + validate result."""
    if request.get("flags"):
        return flag_table(arguments)
    results = []
    for case in request["cases"]:
        saved = dict(os.environ)
        os.environ.update({"WORLD_SIZE": "8", "RANK": "0", "LOCAL_RANK": "0", **case["env"]})
        arch = int(case.get("arch", 9))
        arguments.get_device_arch_version = lambda arch=arch: arch
        sys.argv = ["pretrain_gpt.py", *case["argv"]]
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                args = arguments.parse_args()
                arguments.validate_args(args, {})
            results.append({"ok": True, "error": "", "args": {k: _plain(v) for k, v in vars(args).items()}})
        except BaseException as exc:  # SystemExit from argparse, AssertionError from validate_args
            results.append({"ok": False, "error": f"{type(exc).__name__}: {exc} {out.getvalue()[-600:]}", "args": {}})
        finally:
            os.environ.clear()
            os.environ.update(saved)
    return results


def serve() -> None:
    """`--serve`: a request per stdin line, its answer as one line on the original stdout (everything else
    printed goes to stderr), Megatron-LM loaded once for all of them (its import is most of a request's time)."""
    reply = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    arguments = None
    for line in sys.stdin:
        request = json.loads(line)
        arguments = arguments or _load(request["megatron_lm"])
        reply.write(json.dumps(answer(arguments, request)) + "\n")
        reply.flush()


def main() -> None:
    if sys.argv[1:] == ["--serve"]:
        serve()
        return
    request = json.load(sys.stdin)
    print(json.dumps(answer(_load(request["megatron_lm"]), request)))


if __name__ == "__main__":
    main()
