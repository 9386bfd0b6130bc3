"""What to tell the client when a tool fails for a reason that is not its input: a full disk, a busy or
broken ledger, a number too large, input nested too deeply. Each class gets its own sentence, so the caller
can tell "free some disk" from "retry" from "send a smaller value"; none quotes an exception's own text,
which can hold the server's paths. Anything else stays an internal error whose details go to the log."""

from __future__ import annotations

import errno
import sqlite3

from paratune.oracle.cancel import Cancelled

_OS_ERRORS = {
    errno.ENOSPC: "the server's disk is full; free space and retry",
    errno.EDQUOT: "the server's disk quota is used up; free space and retry",
    errno.EACCES: "the server may not read or write a file it needs (permission denied)",
    errno.EPERM: "the server may not read or write a file it needs (operation not permitted)",
    errno.EROFS: "a file the server writes is on a read-only file system",
    errno.ENAMETOOLONG: "a path is longer than the file system allows",
    errno.EMFILE: "the server has too many files open; retry",
    errno.EIO: "the disk reported an I/O error",
}


def describe(exc: BaseException) -> str | None:
    """One sentence for a failure class the client can act on; None for a failure that is a bug."""
    if isinstance(exc, sqlite3.Error):
        return _ledger(exc)
    if isinstance(exc, OSError):
        return _OS_ERRORS.get(exc.errno or 0, f"a file operation failed ({exc.strerror or type(exc).__name__})")
    if isinstance(exc, OverflowError):
        return "a number in the request is too large for the server to compute with; send a smaller value"
    if isinstance(exc, RecursionError):
        return "the request is nested too deeply to read"
    if isinstance(exc, MemoryError):
        return "the request needs more memory than the server has; send a smaller value"
    if isinstance(exc, Cancelled):
        return "the work was stopped before it finished"
    return None


def _ledger(exc: sqlite3.Error) -> str:
    text = str(exc).lower()
    if "full" in text:
        return "the ledger's disk is full; free space and retry (nothing was recorded)"
    if "locked" in text or "busy" in text:
        return "the ledger is locked by another process; retry (nothing was recorded)"
    if "readonly" in text or "read-only" in text:
        return "the ledger is read-only; nothing was recorded"
    if "malformed" in text or "not a database" in text:
        return "the ledger file is damaged; nothing was recorded"
    return f"the ledger failed ({type(exc).__name__}); nothing was recorded"
