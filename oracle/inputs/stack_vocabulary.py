"""The argument names of Megatron-LM, Megatron-Bridge and Primus (package data in `vocabulary/`,
rebuilt by scripts/build_vocabulary.py from the stacks' sources at the commits each file names).
A workload key in this set that the oracle does not model is accepted and reported as not modelled."""

from __future__ import annotations

from functools import cache
from pathlib import Path

VOCABULARY_DIR = Path(__file__).with_name("vocabulary")
STACK_FILES = {"megatron-lm": "megatron_lm.txt", "megatron-bridge": "megatron_bridge.txt", "primus": "primus.txt"}


@cache
def stack_arguments() -> frozenset[str]:
    """Every argument name of the three stacks (Bridge's dotted `section.field` names by their field)."""
    names: set[str] = set()
    for file in STACK_FILES.values():
        for line in (VOCABULARY_DIR / file).read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                names.add(line.rsplit(".", 1)[-1])
    return frozenset(names)
