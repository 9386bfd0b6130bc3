"""Ledger file format: application id, schema version, ordered migrations, and a checked open."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from paratune.oracle.errors import InputError

APPLICATION_ID = 0x5054_4C47  # "PTLG": written to the SQLite header, marks the file as a paratune ledger
BUSY_TIMEOUT_S = 30.0  # how long a writer waits for another process's write transaction

_FIDELITY = "fidelity TEXT NOT NULL CHECK (fidelity IN ('dry', 'memory_only', 'simulate', 'benchmark'))"
_CREATED = "created TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))"

# MIGRATIONS[i] takes a ledger from schema version i to i + 1; append, never edit a shipped step.
MIGRATIONS: list[tuple[str, ...]] = [
    (
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "INSERT INTO meta (key, value) VALUES ('application', 'paratune')",
        f"""CREATE TABLE runs (
            id INTEGER PRIMARY KEY, {_CREATED},
            workload_name TEXT NOT NULL, workload_json TEXT NOT NULL, workload_sha256 TEXT NOT NULL,
            cluster_name TEXT NOT NULL, cluster_json TEXT NOT NULL, cluster_sha256 TEXT NOT NULL,
            objective TEXT NOT NULL, budget_json TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'finished', 'failed')))""",
        "CREATE INDEX runs_by_inputs ON runs (workload_sha256, cluster_sha256, status)",
        f"""CREATE TABLE trials (
            id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs (id),
            config_key TEXT NOT NULL, config_json TEXT NOT NULL, {_FIDELITY}, result_json TEXT NOT NULL,
            legal INTEGER NOT NULL, fits INTEGER, tokens_per_s_per_gpu REAL, memory_per_gpu_gb REAL,
            wall_ms REAL NOT NULL, origin TEXT NOT NULL, {_CREATED},
            UNIQUE (run_id, config_key, fidelity))""",
        f"""CREATE TABLE notes (
            id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs (id),
            author TEXT NOT NULL, text TEXT NOT NULL, {_CREATED})""",
        f"""CREATE TABLE budget_spend (
            run_id INTEGER NOT NULL REFERENCES runs (id), {_FIDELITY},
            spent INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (run_id, fidelity))""",
        f"""CREATE TABLE llm_calls (
            id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs (id), model TEXT NOT NULL,
            prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL, cost_usd REAL, {_CREATED})""",
        f"""CREATE TABLE sweep_summaries (
            id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs (id),
            space_size INTEGER NOT NULL, legal INTEGER NOT NULL, fits INTEGER NOT NULL,
            scored INTEGER NOT NULL, top_k_json TEXT NOT NULL, wall_s REAL NOT NULL, {_CREATED})""",
    ),
    (  # v2: benchmark mode's per-shape layer measurements, shared by every run in the file
        f"""CREATE TABLE benchmark_measurements (
            shape_key TEXT PRIMARY KEY, data_json TEXT NOT NULL, {_CREATED})""",
    ),
    (  # v3: what the user's cluster measured for a trial, each trial's projection calibrated to them, and an
        # index for reading a run's trials in order
        f"""CREATE TABLE measurements (
            id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs (id),
            trial_id INTEGER NOT NULL REFERENCES trials (id), tokens_per_s_per_gpu REAL NOT NULL,
            peak_memory_gib REAL, note TEXT NOT NULL DEFAULT '', {_CREATED})""",
        "ALTER TABLE trials ADD COLUMN calibrated_json TEXT",
        "CREATE INDEX trials_by_run ON trials (run_id, id)",  # the latest k and pages without a full scan
    ),
    (  # v4: failed and timed-out LLM calls are recorded too, with their class
        "ALTER TABLE llm_calls ADD COLUMN outcome TEXT NOT NULL DEFAULT 'ok'",
    ),
]


def connect(path: Path) -> sqlite3.Connection:
    """Open or create the ledger at `path`: refuse foreign, corrupt or newer files, then migrate."""
    where = str(path)
    try:
        conn = sqlite3.connect(where, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as e:
        raise InputError(f"cannot open ledger ({e})", file=where) from None
    try:
        _probe(conn, where)  # read-only: a file that is not ours is never modified
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        # WAL + NORMAL: every committed transaction survives a crash or SIGKILL of the process (the WAL
        # is written before the commit returns); only an OS crash or power loss can drop the last few.
        # FULL would fsync every trial (~10 ms here), which is most of an MCP round trip.
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        _migrate(conn, where)
    except InputError:
        conn.close()
        raise
    except sqlite3.OperationalError as e:
        conn.close()
        raise InputError(f"cannot open ledger ({e})", file=where) from None
    except sqlite3.DatabaseError as e:
        conn.close()
        raise InputError(f"corrupt or not a SQLite database ({e})", file=where) from None
    conn.row_factory = sqlite3.Row
    return conn


def _probe(conn: sqlite3.Connection, where: str) -> None:
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    if app_id != APPLICATION_ID and (app_id or tables):
        raise InputError(
            f"not a paratune ledger (a SQLite database of another application, application_id {app_id:#x})",
            file=where,
        )
    _check_version(conn.execute("PRAGMA user_version").fetchone()[0], where)
    problems = [row[0] for row in conn.execute("PRAGMA quick_check")]
    if problems != ["ok"]:
        raise InputError(f"corrupt ledger: {'; '.join(problems[:3])}", file=where)


def _check_version(version: int, where: str) -> None:
    if version > len(MIGRATIONS):
        raise InputError(
            f"ledger schema v{version} is newer than this paratune reads (up to v{len(MIGRATIONS)}); "
            "upgrade paratune",
            file=where,
        )


def _migrate(conn: sqlite3.Connection, where: str) -> None:
    """Apply the pending migrations in one write transaction (safe when two processes open at once)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        _check_version(version, where)
        if version < len(MIGRATIONS):
            for step in MIGRATIONS[version:]:
                for statement in step:
                    conn.execute(statement)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(len(MIGRATIONS)),),
            )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
