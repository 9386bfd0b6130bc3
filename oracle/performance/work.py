"""`Work`: time of one micro-batch through one block on one rank, by pass and by component."""

from __future__ import annotations

from dataclasses import dataclass
from operator import add

COMPONENTS = ("gemm", "attention", "elementwise", "overhead", "tp_comm", "cp_comm", "ep_comm", "fsdp_comm")
GEMM, ATTN, ELEM, OVH, TP, CP, EP, FSDP = range(len(COMPONENTS))
ZERO = (0.0,) * len(COMPONENTS)
# Megatron's selective-recompute modules (megatron-core 0.16.1 transformer_config.py `recompute_modules`).
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
NO_RECOMPUTE = (0.0,) * len(RECOMPUTE_MODULES)


def vadd(x: tuple[float, ...], y: tuple[float, ...], k: float = 1.0) -> tuple[float, ...]:
    """x + k·y, componentwise."""
    return tuple(a + k * b for a, b in zip(x, y))


@dataclass(frozen=True)
class Work:
    """Milliseconds per micro-batch: forward (f), input-grad backward (b), weight-grad backward (w) by
    component, and the forward time of each selective-recompute module (`rec`, RECOMPUTE_MODULES order),
    which recomputing that module adds to the backward."""

    f: tuple[float, ...] = ZERO
    b: tuple[float, ...] = ZERO
    w: tuple[float, ...] = ZERO
    rec: tuple[float, ...] = NO_RECOMPUTE

    def __add__(self, o: Work) -> Work:
        """Componentwise sum: `vadd` with k = 1 (1·y is y exactly), without the products (a search adds many)."""
        return Work(tuple(map(add, self.f, o.f)), tuple(map(add, self.b, o.b)), tuple(map(add, self.w, o.w)),
                    tuple(map(add, self.rec, o.rec)))

    def scaled(self, k: float) -> Work:
        return Work(*(tuple(k * a for a in v) for v in (self.f, self.b, self.w, self.rec)))


class Builder:
    """Mutable accumulator for one block's `Work`."""

    def __init__(self) -> None:
        self.f = [0.0] * len(COMPONENTS)
        self.b = [0.0] * len(COMPONENTS)
        self.w = [0.0] * len(COMPONENTS)
        self.rec = [0.0] * len(RECOMPUTE_MODULES)

    @classmethod
    def of(cls, start: Work) -> Builder:
        """An accumulator that holds `start` (the same sums as adding its parts to an empty one did)."""
        w = cls()
        w.f, w.b, w.w, w.rec = list(start.f), list(start.b), list(start.w), list(start.rec)
        return w

    def add(self, comp: int, f: float = 0.0, b: float = 0.0, w: float = 0.0) -> None:
        self.f[comp] += f
        self.b[comp] += b
        self.w[comp] += w

    def gemm(self) -> tuple[float, float]:
        """(forward, backward) GEMM ms accumulated so far."""
        return self.f[GEMM], self.b[GEMM] + self.w[GEMM]

    def forward_ms(self) -> float:
        """The forward time accumulated so far (to tag what a module added)."""
        return sum(self.f)

    def tag(self, module: str, ms: float) -> None:
        """Record `ms` of forward work as belonging to recompute module `module`."""
        self.rec[RECOMPUTE_MODULES.index(module)] += ms

    def build(self) -> Work:
        return Work(tuple(self.f), tuple(self.b), tuple(self.w), tuple(self.rec))
