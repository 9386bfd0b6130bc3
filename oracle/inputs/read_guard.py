"""Where and what input files may be read: a caller (the MCP server) can bound every file the loaders
open — the workload, its `extends:` chain and model files, Primus presets, Hugging Face configs — to
its allowed roots; the CLI reads anything its user names. Either way a path must be one the system can
name (no NUL, within PATH_MAX), and a read takes only a regular file of bounded size: a FIFO, a device
or a socket would block the reader, or never end."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from ..errors import InputError, clip

PATH_MAX = 4096  # bytes in a path (Linux PATH_MAX); a longer one names no file, and resolving it is slow
NAME_MAX = 255  # bytes in one path component (Linux NAME_MAX)
MAX_FILE_BYTES = 16 << 20  # an input file (YAML, JSON config) is kilobytes; 16 MiB is far past any real one

_check: ContextVar[Callable[[Path], Path] | None] = ContextVar("read_guard", default=None)


def usable(path: str | Path, *, file: str | None = None, key: str | None = None) -> Path:
    """`path` as a Path, or InputError (naming `file` and `key`) when no file can have that name: empty, over
    PATH_MAX bytes, a component over NAME_MAX bytes, or a NUL byte. Checked before any system call, so a
    megabyte of path costs microseconds, not a resolve of every component."""
    text = os.fspath(path)
    if not text:
        raise InputError("expected a file path, got an empty one", file=file, key=key)
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > PATH_MAX:
        raise InputError(f"'{clip(text)}': the path is {size:,} bytes, over the system's limit of {PATH_MAX:,}",
                         file=file, key=key)
    if any(len(part.encode("utf-8", "surrogatepass")) > NAME_MAX for part in text.split(os.sep)):
        raise InputError(f"'{clip(text)}': a path component is over the system's limit of {NAME_MAX} bytes",
                         file=file, key=key)
    if "\x00" in text:
        raise InputError("contains the character U+0000 (NULL), which no path can hold; use plain text", file=file,
                         key=key)
    return Path(path)


def guarded(path: str | Path) -> Path:
    """`path`, checked to be `usable` and then by the active guard (if any) to be readable; raises InputError
    if not."""
    check = _check.get()
    p = usable(path)
    return check(p) if check is not None else p


def read_text(path: str | Path) -> str:
    """The UTF-8 text of the regular file at `path` (through `guarded`). The file is opened without blocking
    and checked on the open descriptor, so a FIFO or device is refused at once rather than waited on, and
    nothing can swap the file between the check and the read."""
    p = guarded(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise InputError("file not found", file=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot open it ({exc.strerror or type(exc).__name__})", file=str(path)) from None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError("not a regular file (a FIFO, device, socket or folder cannot be an input file)",
                             file=str(path))
        if info.st_size > MAX_FILE_BYTES:
            raise InputError(f"{info.st_size:,} bytes, over the {MAX_FILE_BYTES >> 20} MiB an input file may have",
                             file=str(path))
        try:
            data = fh.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise InputError(f"cannot read it ({exc.strerror or type(exc).__name__})", file=str(path)) from None
    if len(data) > MAX_FILE_BYTES:
        raise InputError(f"over the {MAX_FILE_BYTES >> 20} MiB an input file may have", file=str(path))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start})", file=str(path)) from None


@contextmanager
def reads_under(check: Callable[[Path], Path]) -> Iterator[None]:
    """Within the block, every loader read goes through `check` (it returns the path or raises)."""
    token = _check.set(check)
    try:
        yield
    finally:
        _check.reset(token)
