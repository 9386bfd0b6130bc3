"""A Megatron-LM flags file read as Megatron-LM's own parser reads it: the `--flag value` arguments a
training run gives `pretrain_gpt.py`, as a launch script line (`torchrun ... pretrain_gpt.py --num-layers
...`, e.g. the launch paratune writes for Megatron-LM) or as a file of `--flag value` lines.

The flags are parsed with the option table of Megatron-LM's `add_megatron_arguments`
(megatron/training/arguments.py at core_v0.16.1, `vocabulary/megatron_lm_flags.json`, taken from the
parser itself by scripts/build_megatron_flags.py): each option's dest, whether it stores a value or a
constant, nargs, type and choices; `--flag=value` as argparse takes it, the last of a repeated flag wins.
A flag the file does not give has Megatron-LM's default, as in the run: the reading fills every dest the
projection reads with that default (so `--overlap-grad-reduce` absent is off, no `--position-embedding-type`
is learned absolute positions). Megatron-LM's meaning beyond argparse, each from arguments.py / megatron-core
core_v0.16.1:

* `--attention-backend` (default auto) decides how attention runs in a megatron-core model: flash, fused
  (cuDNN) and auto (Transformer Engine picks one of them) do not keep the score matrix; unfused and local
  do. `--use-flash-attn` reaches only the legacy models (megatron/legacy/model/transformer.py).
* `--add-qkv-bias` is or-ed with `--add-bias-linear` (`core_transformer_config_from_args`): off means QKV
  biases follow the linear layers, as paratune's `add_qkv_bias: null` does.
* Neither `--bf16` nor `--fp16` trains in fp32, which the projection does not model (noted, read as bf16).
* `--vocab-size` is read by NullTokenizer and TikTokenizer only; other tokenizers set the vocabulary, which
  the file does not hold (noted when absent).
* `--seq-length` is required (validate_args); `--global-batch-size` defaults to micro-batch x data-parallel
  size, which depends on the layout paratune searches, so the file must state it.

An option that is not Megatron-LM's, a value its type or choices refuse, a flag without its value and a
word that is no flag are refused naming the flag and the file. A value paratune models that is a shell
variable (`$X`) is refused; other arguments' values are not read.
"""

from __future__ import annotations

import difflib
import json
import re
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..specs.model import parse_layer_pattern
from .stack_vocabulary import VOCABULARY_DIR

TABLE_FILE = VOCABULARY_DIR / "megatron_lm_flags.json"
SOURCE = "Megatron-LM core_v0.16.1 arguments.py"
# File forms read as flags: a launch script or a flags file (any other file whose first word is a flag).
SUFFIXES = (".sh", ".txt", ".flags", ".args")
_SCRIPT = re.compile(r"(^|/)pretrain_\w+\.py$")
_USER_ARGS = ("$@", "$*")  # the launch's pass-through of the user's own arguments


@dataclass(frozen=True)
class Flag:
    """One option of Megatron-LM's parser (the table's fields)."""

    dest: str
    kind: str  # "value": stores its value(s); "true" / "false": stores that constant
    nargs: int | str | None
    type: str  # int, float, str, bool, enum, tuple_type, moe_freq_type, no_rope_freq_type, la_freq_type
    choices: tuple[Any, ...] | None
    default: Any


@cache
def flag_table() -> dict[str, Flag]:
    """option string -> Flag, for every option of Megatron-LM's parser."""
    data = json.loads(TABLE_FILE.read_text(encoding="utf-8"))
    return {option: Flag(dest, kind, nargs, kind_of, tuple(choices) if choices else None, default)
            for option, (dest, kind, nargs, kind_of, choices, default) in data["flags"].items()}


def _first_word(text: str) -> str:
    for line in text.splitlines():
        words = line.split()
        if words and not words[0].startswith("#"):
            return words[0]
    return ""


def is_flags_file(path: Path) -> bool:
    """A launch script or flags file: by its suffix, or a file whose first word is a `--flag`."""
    if path.suffix in SUFFIXES:
        return True
    if path.suffix in (".yaml", ".yml", ".json") or not path.is_file():
        return False
    try:
        return _first_word(path.read_text(encoding="utf-8", errors="replace")[:4096]).startswith("--")
    except OSError:
        return False


def command_words(text: str, file: str) -> list[str]:
    """The words Megatron-LM's parser gets: those after `pretrain_*.py` on the launch line (continued lines
    joined, comments dropped), or every word of a file with no such line; the user's `"$@"` left out."""
    lines = []
    for n, line in enumerate(text.replace("\\\n", " ").splitlines(), 1):
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            raise InputError(f"line {n} does not split into shell words ({exc})", file=file) from None
        if words:
            lines.append(words)
    launches = [w for w in lines if any(_SCRIPT.search(x) for x in w)]
    if len(launches) > 1:
        raise InputError(f"{len(launches)} pretrain_*.py commands: paratune reads one training run per file",
                         file=file)
    if launches:
        words = launches[0]
        words = words[next(i for i, x in enumerate(words) if _SCRIPT.search(x)) + 1:]
    else:
        words = [x for w in lines for x in w]
    return [w for w in words if w not in _USER_ARGS]


def _freq(text: str) -> int | str:
    """moe_freq_type / no_rope_freq_type / la_freq_type: "N" is the int N, else a list expression (kept as
    text: the model spec expands it without eval)."""
    return int(text) if text.strip().isdigit() else text


def _convert(flag: Flag, option: str, value: str, file: str) -> Any:
    """One value as the option's type reads it; refused naming the option when it cannot."""
    try:
        if "$" in value:
            return value  # a shell variable: kept as written (refused later if the projection reads it)
        if flag.type == "int":
            out: Any = int(value)
        elif flag.type == "float":
            out = float(value)
        elif flag.type == "bool":
            out = bool(value)  # argparse type=bool: any non-empty word is true
        elif flag.type == "tuple_type":
            out = tuple(int(i) for i in value.strip("()").split(","))
        elif flag.type.endswith("freq_type"):
            out = _freq(value)
        else:
            out = value
    except ValueError:
        raise InputError(f"{value!r} is not a valid {flag.type} value ({SOURCE})", file=file, key=option) from None
    if flag.choices and out not in flag.choices:
        raise InputError(f"{value!r} is not one of {', '.join(map(str, flag.choices))} ({SOURCE})", file=file,
                         key=option)
    return out


def parse_flags(words: list[str], file: str) -> dict[str, Any]:
    """dest -> value of the flags given, as argparse stores them with Megatron-LM's option table."""
    table = flag_table()
    given: dict[str, Any] = {}
    i = 0
    while i < len(words):
        word = words[i]
        option, has_inline, inline = word.partition("=")
        if not option.startswith("--"):
            why = ("a shell expansion paratune does not run: write the flags out" if "$" in word else
                   "no flag, and it follows none that takes a value")
            raise InputError(f"{word!r} is {why}", file=file, key=word)
        flag = table.get(option)
        if flag is None:
            close = difflib.get_close_matches(option, list(table), n=1)
            raise InputError(f"not a Megatron-LM argument ({SOURCE}){f'; did you mean {close[0]}?' if close else ''}",
                             file=file, key=option)
        i += 1
        if flag.kind != "value":
            if has_inline:
                raise InputError(f"takes no value ({SOURCE})", file=file, key=option)
            given[flag.dest] = flag.kind == "true"
            continue
        values = [inline] if has_inline else []
        if not has_inline:
            limit = flag.nargs if isinstance(flag.nargs, int) else 1 if flag.nargs is None else len(words)
            while i < len(words) and len(values) < limit and not words[i].startswith("--"):
                values.append(words[i])
                i += 1
        wanted = f"{flag.nargs} values" if isinstance(flag.nargs, int) else "one or more values" if flag.nargs == "+" \
            else "one value"
        if (flag.nargs in (None, "+") and not values) or (isinstance(flag.nargs, int) and len(values) != flag.nargs):
            raise InputError(f"expects {wanted} ({SOURCE})", file=file, key=option)
        converted = [_convert(flag, option, v, file) for v in values]
        given[flag.dest] = converted[0] if flag.nargs is None else converted
    return given


def read_flags(path: Path, modelled: set[str]) -> tuple[dict[str, Any], list[str]]:
    """(the flat argument mapping the workload reader divides into model and layout, notes for the user) of a
    Megatron-LM flags file: the flags given over Megatron-LM's defaults of the dests in `modelled` (the
    model and training keys paratune reads, with the Megatron spellings its reader maps to them)."""
    file = str(path)
    given = parse_flags(command_words(path.read_text(encoding="utf-8", errors="replace"), file), file)
    options = {f.dest: option for option, f in flag_table().items()}
    shell = sorted(d for d, v in given.items() if d in modelled and "$" in str(v))
    if shell:
        raise InputError(f"{given[shell[0]]!r} is a shell variable: paratune reads the flags as written; give the "
                         "value", file=file, key=options[shell[0]])
    for dest, option in (("seq_length", "--seq-length"), ("global_batch_size", "--global-batch-size")):
        if dest not in given:
            raise InputError("missing: the projection needs it stated (Megatron-LM requires --seq-length; without "
                             "--global-batch-size it uses micro-batch x data-parallel size, which depends on the "
                             "layout paratune searches)", file=file, key=option)
    notes: list[str] = []
    args: dict[str, Any] = {f.dest: f.default for f in flag_table().values()
                            if f.dest in modelled and f.dest not in _NOT_FILLED and f.default is not None}
    args |= given
    for dest in ("window_attn_skip_freq", "no_rope_freq"):  # a list expression over the layers
        if isinstance(args.get(dest), str) and isinstance(args.get("num_layers"), int):
            try:
                args[dest] = parse_layer_pattern(args[dest], args["num_layers"])
            except ValueError as exc:
                raise InputError(str(exc), file=file, key=options[dest]) from None
    if "use_flash_attn" in given:
        notes.append("--use-flash-attn reaches only Megatron-LM's legacy models; --attention-backend decides")
    args["use_flash_attn"] = args.pop("attention_backend", "auto") in ("flash", "fused", "auto")
    if not args.get("add_qkv_bias"):
        args.pop("add_qkv_bias", None)  # or-ed with add_bias_linear: off follows it
    if not given.get("bf16") and not given.get("fp16"):
        notes.append("neither --bf16 nor --fp16: Megatron-LM trains in fp32, which the projection does not model; "
                     "projected as bf16")
    elif given.get("fp16"):
        args["bf16"] = bool(given.get("bf16"))
    if "vocab_size" not in given:
        notes.append("no --vocab-size: the tokenizer sets the vocabulary, which the file does not hold; projected "
                     "with paratune's default vocab_size")
    return args, notes


# Dests whose absence means something other than the parser's default (see the module docstring).
_NOT_FILLED = {"use_flash_attn", "bf16", "fp16", "vocab_size"}
