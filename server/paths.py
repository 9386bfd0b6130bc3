"""The allowed-roots guard: tools read and write files only under the roots the server was given."""

from __future__ import annotations

import unicodedata
from pathlib import Path, PurePath

from paratune.oracle.errors import InputError, clip
from paratune.oracle.inputs.read_guard import usable


def plain_text(text: str, key: str) -> str:
    """`text` unchanged, or InputError when it holds control or bidirectional-formatting characters
    (NUL, newlines, U+202E ...): they hide what a name or path really says."""
    bad = next((c for c in text if unicodedata.category(c) in ("Cc", "Cf")), None)
    if bad is not None:
        raise InputError(f"contains the character U+{ord(bad):04X} ({unicodedata.name(bad, 'control')}); use plain "
                         "text", key=key)
    return text


class AllowedRoots:
    """Directories a tool's path may point into; relative paths start at the first root, and `..` or a
    symlink leading out is refused."""

    def __init__(self, roots: list[str | Path]):
        self.roots = [Path(r).expanduser().resolve() for r in roots]
        for given, root in zip(roots, self.roots, strict=True):
            if not root.is_dir():
                raise InputError("allowed root is not a directory", file=str(given), key="--allow-root")

    def _inside(self, raw: str, key: str) -> Path:
        """`raw` resolved (symlinks followed) and checked to lie under a root."""
        if not raw:
            raise InputError("expected a file path", key=key)
        usable(raw, key=key)  # its length first: a megabyte of path is refused before anything walks it
        plain_text(raw, key)
        if ".." in PurePath(raw).parts:
            raise InputError(f"'{clip(raw)}': '..' is not allowed in paths", key=key)
        try:
            resolved = (self.roots[0] / Path(raw).expanduser()).resolve()
            resolved.exists()  # an over-long name fails here, not later
        except (OSError, ValueError) as exc:
            raise InputError(f"'{clip(raw)}': not a usable path ({type(exc).__name__}: "
                             f"{clip(getattr(exc, 'strerror', None) or str(exc))})", key=key) from None
        if not any(resolved.is_relative_to(root) for root in self.roots):
            roots = ", ".join(str(r) for r in self.roots)
            raise InputError(f"'{clip(raw)}' resolves to {clip(str(resolved))}, outside the allowed roots ({roots})",
                             key=key)
        return resolved

    def readable(self, path: Path) -> Path:
        """A file a loader is about to read (an `extends:` parent, a model file, a Primus preset), checked
        to resolve under the roots, symlinks followed (`oracle/inputs/read_guard.py`)."""
        resolved = path.expanduser().resolve()
        if not any(resolved.is_relative_to(root) for root in self.roots):
            roots = ", ".join(str(r) for r in self.roots)
            raise InputError(f"resolves to {resolved}, outside the allowed roots ({roots}); tools read files only "
                             "under --allow-root", file=str(path), key="allowed roots")
        return resolved

    def file(self, raw: str, key: str) -> Path:
        """An existing regular file under the roots."""
        path = self._inside(raw, key)
        if not path.exists():
            raise InputError(f"'{clip(raw)}': file not found", key=key)
        if not path.is_file():
            raise InputError(f"'{clip(raw)}': not a regular file", key=key)
        return path

    def directory(self, raw: str, key: str) -> Path:
        """A directory under the roots, created when missing."""
        path = self._inside(raw, key)
        if path.exists() and not path.is_dir():
            raise InputError(f"'{clip(raw)}': exists and is not a directory", key=key)
        path.mkdir(parents=True, exist_ok=True)
        return path
