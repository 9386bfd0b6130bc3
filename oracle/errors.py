"""The one error type for bad user input: it names the file and the key so a person can fix it.

Every part is cut to a bounded length (`clip`): a 1 MB bad value or path must not come back, or be
logged, whole."""

from __future__ import annotations

ECHO = 80  # characters of a user's value an error echoes
LINE = 1000  # characters of a whole error line


def clip(text: str, limit: int = ECHO) -> str:
    """`text` cut to `limit` characters, saying how many were left out."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit:,} more characters)"


class InputError(Exception):
    """Bad input (file, key, value); rendered as one line `file: key: message`."""

    def __init__(self, message: str, *, file: str | None = None, key: str | None = None):
        self.message = message
        self.file = file
        self.key = key
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = [clip(p, 2 * ECHO) for p in (self.file, self.key) if p]
        return clip(": ".join([*parts, self.message]), LINE)

    def within(self, file: str) -> InputError:
        """The same error attributed to `file` when it did not yet name one."""
        if self.file is None:
            self.file = file
            self.args = (str(self),)
        return self
