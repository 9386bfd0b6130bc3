"""The one error type for bad user input: it names the file and the key so a person can fix it."""

from __future__ import annotations


class InputError(Exception):
    """Bad input (file, key, value); rendered as one line `file: key: message`."""

    def __init__(self, message: str, *, file: str | None = None, key: str | None = None):
        self.message = message
        self.file = file
        self.key = key
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = [p for p in (self.file, self.key) if p]
        return ": ".join([*parts, self.message])

    def within(self, file: str) -> "InputError":
        """The same error attributed to `file` when it did not yet name one."""
        if self.file is None:
            self.file = file
            self.args = (str(self),)
        return self
