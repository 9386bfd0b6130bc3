"""The allowed-roots guard: tools read and write files only under the roots the server was given."""

from __future__ import annotations

from pathlib import Path, PurePath

from oracle.errors import InputError


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
        if not raw or "\x00" in raw:
            raise InputError("expected a file path", key=key)
        if ".." in PurePath(raw).parts:
            raise InputError(f"'{raw}': '..' is not allowed in paths", key=key)
        resolved = (self.roots[0] / Path(raw).expanduser()).resolve()
        if not any(resolved.is_relative_to(root) for root in self.roots):
            roots = ", ".join(str(r) for r in self.roots)
            raise InputError(f"'{raw}' resolves to {resolved}, outside the allowed roots ({roots})", key=key)
        return resolved

    def file(self, raw: str, key: str) -> Path:
        """An existing regular file under the roots."""
        path = self._inside(raw, key)
        if not path.exists():
            raise InputError(f"'{raw}': file not found", key=key)
        if not path.is_file():
            raise InputError(f"'{raw}': not a regular file", key=key)
        return path

    def directory(self, raw: str, key: str) -> Path:
        """A directory under the roots, created when missing."""
        path = self._inside(raw, key)
        if path.exists() and not path.is_dir():
            raise InputError(f"'{raw}': exists and is not a directory", key=key)
        path.mkdir(parents=True, exist_ok=True)
        return path
