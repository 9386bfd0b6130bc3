"""The software stacks a cluster runs, and the stack a cluster runs when its file names none. Which stack
has each search knob, under which argument, is the knob registry's (`oracle.specs.knobs`)."""

from __future__ import annotations

from typing import Literal

Stack = Literal["megatron-lm", "megatron-bridge", "primus"]
STACKS: tuple[Stack, ...] = ("megatron-lm", "megatron-bridge", "primus")
# A cluster that names no stack runs its vendor's: Primus is AMD's Megatron stack (ROCm), Megatron-LM
# NVIDIA's reference trainer.
DEFAULT_STACK: dict[str, Stack] = {"amd": "primus", "nvidia": "megatron-lm"}
ALL = frozenset(STACKS)


def default_stack(vendor: str) -> Stack:
    """The stack a cluster of this GPU vendor runs when its file names none."""
    return DEFAULT_STACK[vendor]

