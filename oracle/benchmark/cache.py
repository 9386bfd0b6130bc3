"""Where layer measurements are kept, keyed by shape and device: anything with get(key) and put(key, data).

`MemoryCache` lives as long as the process (the default: a second candidate with the same per-rank
shapes costs nothing); `LedgerCache` keeps them in a ledger file across processes and runs.
"""

from __future__ import annotations

from typing import Any, Protocol


class MeasurementCache(Protocol):
    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, data: dict[str, Any]) -> None: ...


class MemoryCache(dict):
    """An in-memory cache: a dict with `put`."""

    def put(self, key: str, data: dict[str, Any]) -> None:
        self[key] = data


class LedgerCache:
    """Measurements stored in a ledger (`ledger.Ledger`, or anything with the same two methods)."""

    def __init__(self, ledger: Any):
        self.ledger = ledger

    def get(self, key: str) -> dict[str, Any] | None:
        return self.ledger.benchmark_measurement(key)

    def put(self, key: str, data: dict[str, Any]) -> None:
        self.ledger.record_benchmark_measurement(key, data)


PROCESS_CACHE = MemoryCache()
