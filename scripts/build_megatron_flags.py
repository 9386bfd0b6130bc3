"""Regenerate `oracle/inputs/vocabulary/megatron_lm_flags.json`: every option of Megatron-LM's own parser.

paratune reads a Megatron-LM flags file (a `pretrain_gpt.py` launch line or a file of `--flag value` lines,
oracle/inputs/megatron_flags.py) with the option table of `add_megatron_arguments` in
`megatron/training/arguments.py`: each option's dest, whether it stores a value or a constant, nargs, type,
choices and default. The table is taken from the parser itself, built by the same child process the
conformance tests run Megatron-LM in (tests/stack_runners/megatron_validate.py, which loads
`megatron.training` on a CPU), so it is Megatron-LM's and not a transcription;
tests/test_conformance.py rebuilds it from the snapshot and compares.

Usage:
    python scripts/build_megatron_flags.py /path/to/Megatron-LM   # a checkout or snapshot at core_v0.16.1
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNNER = ROOT / "tests" / "stack_runners" / "megatron_validate.py"
OUT = ROOT / "oracle" / "inputs" / "vocabulary" / "megatron_lm_flags.json"
SOURCE = "NVIDIA/Megatron-LM core_v0.16.1 megatron/training/arguments.py add_megatron_arguments"
FIELDS = ["dest", "kind", "nargs", "type", "choices", "default"]


def table(megatron_lm: Path) -> dict[str, list[object]]:
    """The option table of the Megatron-LM tree at `megatron_lm` (run in a child process)."""
    done = subprocess.run([sys.executable, str(RUNNER)], text=True, capture_output=True, check=True,
                          input=json.dumps({"megatron_lm": str(megatron_lm), "flags": True}))
    flags: dict[str, list[object]] = json.loads(done.stdout.strip().splitlines()[-1])
    return flags


def text(flags: dict[str, list[object]]) -> str:
    """The file: the source and field names, then one option per line."""
    body = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in flags.items())
    return f'{{"source": {json.dumps(SOURCE)},\n "fields": {json.dumps(FIELDS)},\n "flags": {{\n{body}\n}}}}\n'


if __name__ == "__main__":
    OUT.write_text(text(table(Path(sys.argv[1]))), encoding="utf-8")
    print(f"wrote {OUT}")
