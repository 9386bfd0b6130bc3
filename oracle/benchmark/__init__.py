"""Benchmark mode (DESIGN §4): one layer of each kind built with torch at the layout's per-rank shapes,
timed and measured on the GPU at hand, anchoring the analytic projection of the whole iteration.

Importing this package does not import torch; `evaluate_with_benchmark` does, once it can run.
"""

from .anchor import evaluate_with_benchmark
from .cache import LedgerCache, MeasurementCache, MemoryCache
from .gate import BenchmarkUnavailable

__all__ = ["BenchmarkUnavailable", "LedgerCache", "MeasurementCache", "MemoryCache", "evaluate_with_benchmark"]
