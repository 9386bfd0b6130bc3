"""Golden-section search: the one-dimensional minimiser the fits share (fit.py, overlap_pairs.py)."""

from __future__ import annotations

import math
from collections.abc import Callable


def golden(f: Callable[[float], float], lo: float, hi: float, x0: float, iters: int = 12) -> float:
    """Minimise a 1-D function on [lo, hi] by golden-section search (keeps x0 if nothing is better)."""
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    best = c if fc < fd else d
    return best if min(fc, fd) < f(x0) else x0
