"""`Work`: time of one micro-batch through one block on one rank, by pass and by component."""

from __future__ import annotations

from dataclasses import dataclass

COMPONENTS = ("gemm", "attention", "elementwise", "overhead", "tp_comm", "cp_comm", "ep_comm", "fsdp_comm")
GEMM, ATTN, ELEM, OVH, TP, CP, EP, FSDP = range(len(COMPONENTS))
ZERO = (0.0,) * len(COMPONENTS)


def vadd(x: tuple[float, ...], y: tuple[float, ...], k: float = 1.0) -> tuple[float, ...]:
    """x + k·y, componentwise."""
    return tuple(a + k * b for a, b in zip(x, y))


@dataclass(frozen=True)
class Work:
    """Milliseconds per micro-batch: forward (f), input-grad backward (b), weight-grad backward (w),
    and the part of the forward that selective recompute re-runs (sel)."""

    f: tuple[float, ...] = ZERO
    b: tuple[float, ...] = ZERO
    w: tuple[float, ...] = ZERO
    sel: tuple[float, ...] = ZERO

    def __add__(self, o: "Work") -> "Work":
        return Work(vadd(self.f, o.f), vadd(self.b, o.b), vadd(self.w, o.w), vadd(self.sel, o.sel))

    def scaled(self, k: float) -> "Work":
        return Work(*(tuple(k * a for a in v) for v in (self.f, self.b, self.w, self.sel)))


class Builder:
    """Mutable accumulator for one block's `Work`."""

    def __init__(self) -> None:
        self.f = [0.0] * len(COMPONENTS)
        self.b = [0.0] * len(COMPONENTS)
        self.w = [0.0] * len(COMPONENTS)
        self.sel = [0.0] * len(COMPONENTS)

    def add(self, comp: int, f: float = 0.0, b: float = 0.0, w: float = 0.0) -> None:
        self.f[comp] += f
        self.b[comp] += b
        self.w[comp] += w

    def build(self) -> Work:
        return Work(tuple(self.f), tuple(self.b), tuple(self.w), tuple(self.sel))
