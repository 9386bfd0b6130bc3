"""A `.env` file of LLM settings (LLM_MODEL, provider keys, OPENAI_API_BASE): read into the process
environment below the real environment (a variable already set wins) and above the cluster's
`agent.llm` block, which the model precedence reads after the environment. Values are never written
anywhere; only the names it supplied are remembered, to say where a setting came from."""

from __future__ import annotations

import os
import re
from pathlib import Path


class EnvFileError(ValueError):
    """A .env file that cannot be read, or a line that is not NAME=value (the message names which)."""

_LINE = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$")
supplied: set[str] = set()  # names this process took from a .env file


def load_env_file(path: str | Path | None) -> Path | None:
    """Apply `path` (or ./.env when it exists and `path` is None); the file read, or None."""
    file = Path(path) if path is not None else Path(".env")
    if path is None and not file.is_file():
        return None
    if file.exists() and not file.is_file():  # a FIFO named .env would block the reader
        raise EnvFileError(f"{file}: cannot read it (not a regular file)")
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EnvFileError(f"{file}: cannot read it ({type(exc).__name__})") from None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            raise EnvFileError(f"{file}: line {number} is not NAME=value")
        name, value = m.group(1), m.group(2).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if name not in os.environ:
            os.environ[name] = value
            supplied.add(name)
    return file


def source_of(name: str) -> str:
    """Where a variable came from: '.env file' or 'environment'."""
    return ".env file" if name in supplied else "environment"
