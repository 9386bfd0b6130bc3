"""Argument values as Megatron-LM itself reads them, before paratune's specs validate them.

A stack file may spell a value the way Megatron-LM's argument types accept it rather than the
canonical form paratune's specs hold, or use a value Megatron-LM still accepts with a deprecation
warning. Both are read here as Megatron reads them, each with a note for the user, so a file that
Megatron runs is never refused for its spelling. Source: NVIDIA/Megatron-LM core_v0.16.1,
`megatron/training/arguments.py`:

* `moe_freq_type` (the type of `--moe-layer-freq`): an int, a string "N" (read as the int N), or a
  string holding a list expression. Primus's Qwen3 presets write `moe_layer_freq: "1"`.
* `validate_args`: `cuda_graph_scope` "full" (alone, or as the list ["full"]) is deprecated and read as
  the empty scope, i.e. the whole layer ("full scope is deprecated. Use empty cuda_graph_scope to
  capture the whole layer."). Primus's `trainer_base.yaml` sets it.
"""

from __future__ import annotations

import re
from typing import Any

_INT = re.compile(r"\s*\d+\s*")


def megatron_values(args: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`args` with those values rewritten as Megatron-LM reads them, and one note per deprecated value."""
    out = dict(args)
    notes: list[str] = []
    freq = out.get("moe_layer_freq")
    if isinstance(freq, str) and _INT.fullmatch(freq):  # moe_freq_type: a single int given as a string
        out["moe_layer_freq"] = int(freq)
    scope = out.get("cuda_graph_scope")
    if scope == "full" or scope == ["full"]:
        out["cuda_graph_scope"] = []
        notes.append("cuda_graph_scope 'full' is deprecated in Megatron-LM core_v0.16.1 (validate_args reads it "
                     "as the empty scope: the whole layer); read as that")
    return out, notes
