"""`Ledger`: the SQLite record of runs, trials, notes, budget spend, LLM calls and sweep summaries."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from paratune.oracle.errors import InputError
from paratune.oracle.specs import Budget, ClusterSpec, EffectiveConfig, EvalResult, Workload
from paratune.oracle.specs.trusted import trusted

from .keyguard import refuse_keys
from .models import (
    FIDELITIES,
    BudgetLine,
    Calibrated,
    Fidelity,
    LLMCall,
    Measurement,
    Note,
    RunInfo,
    RunStatus,
    SweepSummary,
    TrialRecord,
)
from .schema import connect

# Budget field that limits each fidelity; a fidelity not named here is unlimited.
_LIMIT_FIELD: dict[str, str] = {"simulate": "max_perf_calls", "benchmark": "max_benchmark_calls"}


class BudgetExhausted(Exception):
    """No calls left at this fidelity in this run."""

    def __init__(self, run_id: int, fidelity: str, spent: int, limit: int):
        self.run_id, self.fidelity, self.spent, self.limit = run_id, fidelity, spent, limit
        super().__init__(f"run {run_id}: the {fidelity} budget is spent ({spent} of {limit} calls)")


def _canonical(model: BaseModel) -> tuple[str, str]:
    """Canonical JSON of a spec and its sha256."""
    blob = json.dumps(model.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return blob, hashlib.sha256(blob.encode()).hexdigest()


# A row as sqlite3 hands it out, or as a dict of it.
_Record = Mapping[str, Any] | sqlite3.Row


def _inserted_id(cur: sqlite3.Cursor) -> int:
    """The id of the row an INSERT on `cur` just made (sqlite3 types lastrowid int | None)."""
    assert cur.lastrowid is not None
    return cur.lastrowid


def _run(row: _Record) -> RunInfo:
    return RunInfo(
        id=row["id"], created=row["created"], status=row["status"],
        workload_name=row["workload_name"], workload_sha256=row["workload_sha256"],
        cluster_name=row["cluster_name"], cluster_sha256=row["cluster_sha256"],
        objective=row["objective"], budget=Budget.model_validate_json(row["budget_json"]),
    )


def _trial(row: _Record) -> TrialRecord:
    """A trials row as its record. The columns hold what `_insert` wrote (their types fixed by the schema's
    affinities and CHECKs) and the two JSON columns are validated as they are read, so the record is built
    without validating again (`trusted`): every read of a trial passes here."""
    return trusted(TrialRecord, {
        "id": row["id"], "run_id": row["run_id"], "config_key": row["config_key"],
        "config": json.loads(row["config_json"]), "fidelity": row["fidelity"],
        "result": EvalResult.model_validate_json(row["result_json"]), "legal": bool(row["legal"]),
        "fits": None if row["fits"] is None else bool(row["fits"]),
        "tokens_per_s_per_gpu": row["tokens_per_s_per_gpu"], "memory_per_gpu_gb": row["memory_per_gpu_gb"],
        "wall_ms": row["wall_ms"], "origin": row["origin"], "created": row["created"],
        "calibrated": Calibrated.model_validate_json(row["calibrated_json"]) if row["calibrated_json"] else None,
    })


@lru_cache(maxsize=64)
def _limits(budget_json: str) -> dict[str, int | None]:
    """The call limit of each fidelity under a run's stored budget (None: unlimited), parsed once per budget:
    every scored trial reads its fidelity's line twice."""
    budget = Budget.model_validate_json(budget_json)
    return {f: getattr(budget, _LIMIT_FIELD[f]) if f in _LIMIT_FIELD else None for f in FIDELITIES}


def _sweep(row: _Record) -> SweepSummary:
    data = dict(row)
    data["top_k"] = json.loads(data.pop("top_k_json"))
    return SweepSummary(**data)


def _by_id(conn: sqlite3.Connection, table: str, row_id: int) -> dict[str, Any]:
    return dict(conn.execute(f"SELECT * FROM {table} WHERE id = ?", (row_id,)).fetchone())


def _real(value: float | None) -> float | None:
    """A value of a REAL column as a SELECT reads it back (SQLite may store a whole number as an integer;
    RETURNING hands that back as it is)."""
    return None if value is None else float(value)


def _line(spent: int, limit: int | None) -> BudgetLine:
    left = None if limit is None else max(limit - spent, 0)
    return trusted(BudgetLine, {"spent": spent, "limit": limit, "left": left})


def _check_fidelity(fidelity: str) -> None:
    if fidelity not in FIDELITIES:
        raise ValueError(f"unknown fidelity {fidelity!r}; expected one of {', '.join(FIDELITIES)}")


class Ledger:
    """One ledger file. Every write is one transaction; several processes may write it at once."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._conn = connect(self.path)
        self._lock = threading.RLock()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- plumbing ----------------------------------------------------------------------------
    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taking the file's write lock up front (no deadlock on upgrade)."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _rows(self, sql: str, args: tuple = ()) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(r) for r in self._conn.execute(sql, args)]

    def _require_run(self, conn: sqlite3.Connection, run_id: int, columns: str = "*") -> sqlite3.Row:
        """The run's row (only `columns`: the whole row carries both input files), or InputError."""
        row = conn.execute(f"SELECT {columns} FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise InputError(f"no run {run_id} in this ledger", file=str(self.path))
        return row

    # ---- runs --------------------------------------------------------------------------------
    def open_run(self, workload: Workload, cluster: ClusterSpec, *, resume: bool = True) -> RunInfo:
        """When `resume`, the latest run for exactly this workload and cluster that did not fail (a
        finished one is reopened, so `tune --resume` can add a sweep to it); else a new run."""
        w_json, w_sha = _canonical(workload)
        c_json, c_sha = _canonical(cluster)
        refuse_keys("cluster", c_json)
        with self._write() as conn:
            if resume:
                row = conn.execute(
                    "SELECT * FROM runs WHERE workload_sha256 = ? AND cluster_sha256 = ? AND status != 'failed' "
                    "ORDER BY id DESC LIMIT 1",
                    (w_sha, c_sha),
                ).fetchone()
                if row is not None:
                    conn.execute("UPDATE runs SET status = 'open' WHERE id = ?", (row["id"],))
                    return _run(self._require_run(conn, row["id"]))
            cur = conn.execute(
                "INSERT INTO runs (workload_name, workload_json, workload_sha256, cluster_name, cluster_json, "
                "cluster_sha256, objective, budget_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (workload.name, w_json, w_sha, cluster.name, c_json, c_sha, cluster.objective,
                 cluster.budget.model_dump_json()),
            )
            return _run(self._require_run(conn, _inserted_id(cur)))

    def run(self, run_id: int) -> RunInfo:
        with self._lock:
            return _run(self._require_run(self._conn, run_id))

    def run_inputs(self, run_id: int) -> tuple[Workload, ClusterSpec]:
        """The workload and cluster a run was opened with, exactly as stored."""
        with self._lock:
            row = self._require_run(self._conn, run_id)
        return Workload.model_validate_json(row["workload_json"]), ClusterSpec.model_validate_json(row["cluster_json"])

    def runs(self) -> list[RunInfo]:
        return [_run(r) for r in self._rows("SELECT * FROM runs ORDER BY id")]

    def set_status(self, run_id: int, status: RunStatus) -> RunInfo:
        if status not in ("open", "finished", "failed"):
            raise ValueError(f"unknown run status {status!r}; expected open, finished or failed")
        with self._write() as conn:
            self._require_run(conn, run_id)
            conn.execute("UPDATE runs SET status = ? WHERE id = ?", (status, run_id))
            return _run(self._require_run(conn, run_id))

    # ---- trials ------------------------------------------------------------------------------
    def lookup(self, run_id: int, config_key: str, fidelity: Fidelity) -> TrialRecord | None:
        """The recorded trial of this canonical config at exactly this fidelity, if any."""
        with self._lock:
            return self._lookup(self._conn, run_id, config_key, fidelity)

    @staticmethod
    def _lookup(conn: sqlite3.Connection, run_id: int, key: str, fidelity: str) -> TrialRecord | None:
        row = conn.execute(
            "SELECT * FROM trials WHERE run_id = ? AND config_key = ? AND fidelity = ?", (run_id, key, fidelity)
        ).fetchone()
        return None if row is None else _trial(row)

    def record_trial(
        self, run_id: int, cfg: EffectiveConfig, result: EvalResult, *, fidelity: Fidelity, wall_ms: float,
        origin: str,
    ) -> TrialRecord:
        """Store one trial without spending budget; the first record of a (config, fidelity) wins."""
        with self._write() as conn:
            self._require_run(conn, run_id, "id")
            return self._insert(conn, run_id, cfg, result, fidelity, wall_ms, origin)

    def _insert(
        self, conn: sqlite3.Connection, run_id: int, cfg: EffectiveConfig, result: EvalResult, fidelity: str,
        wall_ms: float, origin: str,
    ) -> TrialRecord:
        """Store one trial of a run the caller found in this transaction; the record as stored, or the first
        record of the same (config, fidelity)."""
        _check_fidelity(fidelity)
        key = cfg.key
        if result.source != fidelity:
            raise ValueError(f"result source {result.source!r} does not match fidelity {fidelity!r}")
        if result.config_key and result.config_key != key:
            raise ValueError(f"result is for config {result.config_key}, not {key}")
        refuse_keys("trials.origin", origin)
        row = {"run_id": run_id, "config_key": key, "config_json": json.dumps(cfg.model_dump(mode="json"),
                                                                              sort_keys=True),
               "fidelity": fidelity, "result_json": result.model_dump_json(), "legal": result.legal,
               "fits": result.fits, "tokens_per_s_per_gpu": _real(result.tokens_per_s_per_gpu),
               "memory_per_gpu_gb": _real(result.memory_per_gpu_gb), "wall_ms": _real(wall_ms), "origin": origin}
        stored = conn.execute(
            "INSERT INTO trials (run_id, config_key, config_json, fidelity, result_json, legal, fits, "
            "tokens_per_s_per_gpu, memory_per_gpu_gb, wall_ms, origin) VALUES (:run_id, :config_key, :config_json, "
            ":fidelity, :result_json, :legal, :fits, :tokens_per_s_per_gpu, :memory_per_gpu_gb, :wall_ms, :origin) "
            "ON CONFLICT (run_id, config_key, fidelity) DO NOTHING RETURNING id, created", row,
        ).fetchall()  # fetched whole, so the statement is done before COMMIT
        if stored:  # this insert's row, from what was written rather than selected again
            return _trial(row | dict(stored[0]) | {"calibrated_json": None})
        trial = self._lookup(conn, run_id, key, fidelity)  # the first record's
        assert trial is not None
        return trial

    def evaluate_once(
        self, run_id: int, cfg: EffectiveConfig, fidelity: Fidelity, evaluate_fn: Callable[[], EvalResult], *,
        origin: str,
    ) -> tuple[TrialRecord, bool]:
        """(trial, cached): answer from the ledger, else spend one call of budget on `evaluate_fn`.

        The evaluation runs outside any transaction (another process may write meanwhile); the trial
        and its budget spend are then committed together, after re-checking dedupe and budget.
        """
        _check_fidelity(fidelity)
        hit = self.lookup(run_id, cfg.key, fidelity)
        if hit is not None:
            return hit, True
        with self._lock:
            self._spendable(self._conn, run_id, fidelity)
        start = time.perf_counter()
        result = evaluate_fn()
        wall_ms = (time.perf_counter() - start) * 1e3
        with self._write() as conn:
            hit = self._lookup(conn, run_id, cfg.key, fidelity)
            if hit is not None:
                return hit, True
            self._spendable(conn, run_id, fidelity)
            record = self._insert(conn, run_id, cfg, result, fidelity, wall_ms, origin)
            conn.execute(
                "INSERT INTO budget_spend (run_id, fidelity, spent) VALUES (?, ?, 1) "
                "ON CONFLICT (run_id, fidelity) DO UPDATE SET spent = spent + 1",
                (run_id, fidelity),
            )
            return record, False

    def trials(self, run_id: int) -> list[TrialRecord]:
        return [_trial(r) for r in self._rows("SELECT * FROM trials WHERE run_id = ? ORDER BY id", (run_id,))]

    def trials_page(self, run_id: int, offset: int, limit: int) -> list[TrialRecord]:
        """`limit` trials of the run from the `offset`-th, oldest first."""
        rows = self._rows("SELECT * FROM trials WHERE run_id = ? ORDER BY id LIMIT ? OFFSET ?", (run_id, limit, offset))
        return [_trial(r) for r in rows]

    def latest_trials(self, run_id: int, k: int) -> list[TrialRecord]:
        """The run's last `k` trials, oldest first (only those rows are read)."""
        rows = self._rows("SELECT * FROM trials WHERE run_id = ? ORDER BY id DESC LIMIT ?", (run_id, k))
        return [_trial(r) for r in reversed(rows)]

    def trial_count(self, run_id: int) -> int:
        return self._rows("SELECT COUNT(*) AS n FROM trials WHERE run_id = ?", (run_id,))[0]["n"]

    def best(self, run_id: int, fidelity: Fidelity | None = None) -> TrialRecord | None:
        """The legal, fitting trial with the highest tokens/s/GPU (at one fidelity, or any)."""
        sql = "SELECT * FROM trials WHERE run_id = ? AND legal AND fits AND tokens_per_s_per_gpu IS NOT NULL"
        args: tuple = (run_id,)
        if fidelity is not None:
            _check_fidelity(fidelity)
            sql, args = sql + " AND fidelity = ?", (run_id, fidelity)
        rows = self._rows(sql + " ORDER BY tokens_per_s_per_gpu DESC, id LIMIT 1", args)
        return _trial(rows[0]) if rows else None

    def trial(self, run_id: int, trial_id: int) -> TrialRecord:
        rows = self._rows("SELECT * FROM trials WHERE run_id = ? AND id = ?", (run_id, trial_id))
        if not rows:
            raise InputError(f"no trial {trial_id} in run {run_id}", file=str(self.path), key="trial")
        return _trial(rows[0])

    # ---- measurements and calibration --------------------------------------------------------
    def record_measurement(self, run_id: int, trial_id: int, tokens_per_s_per_gpu: float,
                           peak_memory_gib: float | None = None, note: str = "") -> Measurement:
        """Store what the cluster measured for one trial of the run."""
        refuse_keys("measurements.note", note)
        with self._write() as conn:
            self._require_run(conn, run_id)
            if conn.execute("SELECT 1 FROM trials WHERE run_id = ? AND id = ?", (run_id, trial_id)).fetchone() is None:
                raise InputError(f"no trial {trial_id} in run {run_id}", file=str(self.path), key="trial")
            cur = conn.execute(
                "INSERT INTO measurements (run_id, trial_id, tokens_per_s_per_gpu, peak_memory_gib, note) "
                "VALUES (?, ?, ?, ?, ?)", (run_id, trial_id, tokens_per_s_per_gpu, peak_memory_gib, note))
            return Measurement(**_by_id(conn, "measurements", _inserted_id(cur)))

    def measurements(self, run_id: int) -> list[Measurement]:
        return [Measurement(**r) for r in self._rows("SELECT * FROM measurements WHERE run_id = ? ORDER BY id",
                                                      (run_id,))]

    def set_calibrated(self, run_id: int, values: dict[int, Calibrated | None]) -> None:
        """Store each trial's calibrated projection (None clears it), in one transaction."""
        with self._write() as conn:
            conn.executemany("UPDATE trials SET calibrated_json = ? WHERE run_id = ? AND id = ?",
                             [(c.model_dump_json() if c else None, run_id, i) for i, c in values.items()])

    # ---- budget ------------------------------------------------------------------------------
    def budget_status(self, run_id: int) -> dict[Fidelity, BudgetLine]:
        """Spent, limit and left for every fidelity, cheapest first."""
        with self._lock:
            limits = _limits(self._require_run(self._conn, run_id, "budget_json")["budget_json"])
            spent = dict(self._conn.execute("SELECT fidelity, spent FROM budget_spend WHERE run_id = ?",
                                            (run_id,)).fetchall())
        return {f: _line(spent.get(f, 0), limits[f]) for f in FIDELITIES}

    def budget_line(self, run_id: int, fidelity: Fidelity) -> BudgetLine:
        """Spent, limit and left at one fidelity (`budget_status`'s line)."""
        _check_fidelity(fidelity)
        with self._lock:
            return self._budget_line(self._conn, run_id, fidelity)

    def _budget_line(self, conn: sqlite3.Connection, run_id: int, fidelity: str) -> BudgetLine:
        limit = _limits(self._require_run(conn, run_id, "budget_json")["budget_json"])[fidelity]
        row = conn.execute(
            "SELECT spent FROM budget_spend WHERE run_id = ? AND fidelity = ?", (run_id, fidelity)
        ).fetchone()
        return _line(row["spent"] if row else 0, limit)

    def _spendable(self, conn: sqlite3.Connection, run_id: int, fidelity: str) -> None:
        line = self._budget_line(conn, run_id, fidelity)
        if line.left == 0 and line.limit is not None:  # left is None exactly when limit is
            raise BudgetExhausted(run_id, fidelity, line.spent, line.limit)

    # ---- scratchpad, LLM calls, sweeps ---------------------------------------------------------
    def add_note(self, run_id: int, text: str, *, author: str = "agent") -> Note:
        refuse_keys("notes.text", text)
        refuse_keys("notes.author", author)
        with self._write() as conn:
            self._require_run(conn, run_id)
            cur = conn.execute("INSERT INTO notes (run_id, author, text) VALUES (?, ?, ?)", (run_id, author, text))
            return Note(**_by_id(conn, "notes", _inserted_id(cur)))

    def notes(self, run_id: int) -> list[Note]:
        return [Note(**r) for r in self._rows("SELECT * FROM notes WHERE run_id = ? ORDER BY id", (run_id,))]

    def record_llm_call(
        self, run_id: int, *, model: str, prompt_tokens: int, completion_tokens: int, cost_usd: float | None = None,
        outcome: str = "ok",
    ) -> LLMCall:
        """Usage of one LLM call (or its failure class); a key-like model string is refused."""
        refuse_keys("llm_calls.model", model)
        with self._write() as conn:
            self._require_run(conn, run_id)
            cur = conn.execute(
                "INSERT INTO llm_calls (run_id, model, prompt_tokens, completion_tokens, cost_usd, outcome) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (run_id, model, prompt_tokens, completion_tokens, cost_usd, outcome),
            )
            return LLMCall(**_by_id(conn, "llm_calls", _inserted_id(cur)))

    def llm_calls(self, run_id: int) -> list[LLMCall]:
        return [LLMCall(**r) for r in self._rows("SELECT * FROM llm_calls WHERE run_id = ? ORDER BY id", (run_id,))]

    def record_sweep_summary(
        self, run_id: int, *, space_size: int, legal: int, fits: int, scored: int, top_k: list[dict[str, Any]],
        wall_s: float,
    ) -> SweepSummary:
        with self._write() as conn:
            self._require_run(conn, run_id)
            cur = conn.execute(
                "INSERT INTO sweep_summaries (run_id, space_size, legal, fits, scored, top_k_json, wall_s) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (run_id, space_size, legal, fits, scored, json.dumps(top_k), wall_s),
            )
            return _sweep(_by_id(conn, "sweep_summaries", _inserted_id(cur)))

    def sweep_summaries(self, run_id: int) -> list[SweepSummary]:
        rows = self._rows("SELECT * FROM sweep_summaries WHERE run_id = ? ORDER BY id", (run_id,))
        return [_sweep(r) for r in rows]

    # ---- benchmark measurements (per layer shape, not per run) --------------------------------
    def benchmark_measurement(self, shape_key: str) -> dict[str, Any] | None:
        """The stored measurement of one layer shape on one device, if any."""
        rows = self._rows("SELECT data_json FROM benchmark_measurements WHERE shape_key = ?", (shape_key,))
        return json.loads(rows[0]["data_json"]) if rows else None

    def record_benchmark_measurement(self, shape_key: str, data: dict[str, Any]) -> None:
        """Store one layer shape's measurement; the first record of a shape wins."""
        with self._write() as conn:
            conn.execute("INSERT INTO benchmark_measurements (shape_key, data_json) VALUES (?, ?) "
                         "ON CONFLICT (shape_key) DO NOTHING", (shape_key, json.dumps(data, sort_keys=True)))
