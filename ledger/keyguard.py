"""Refuse to store anything that looks like an API key, and mask the configured keys' exact values in
what goes out: the ledger keeps usage, never secrets.

Two checks: a pattern of the common key formats, and the exact values of the environment's key
variables (names ending in _API_KEY, _KEY, _TOKEN, _SECRET or _PASSWORD), so a short or unusual key the
pattern cannot know is caught too.
"""

from __future__ import annotations

import logging
import os
import re

from paratune.oracle.errors import InputError, clip

_KEY = re.compile(
    r"\b(?:sk-[A-Za-z0-9_-]{8,}"  # OpenAI, Anthropic (sk-ant-...), DeepSeek, test keys (sk-test-...)
    r"|sk_(?:live|test)_[A-Za-z0-9]{16,}"
    r"|AKIA[0-9A-Z]{16}"  # AWS access key id
    r"|AIza[0-9A-Za-z_-]{35}"  # Google
    r"|gh[pousr]_[A-Za-z0-9]{30,}"  # GitHub
    r"|hf_[A-Za-z0-9]{30,}"  # Hugging Face
    r"|xox[abposr]-[A-Za-z0-9-]{10,})"  # Slack
)


_SECRET_NAME = re.compile(r"(?:^|_)(?:API_KEY|KEY|TOKEN|SECRET|PASSWORD)$")
MIN_SECRET = 6  # shorter values are not masked (they would match ordinary words)
MASK = "***"


def secret_values() -> list[str]:
    """The values of the environment's key variables, longest first. Read afresh on every call (a key set
    meanwhile counts), decoding only the values of key-named variables: this runs for every trial stored."""
    env = os.environ
    values = {env.get(name, "") for name in env if _SECRET_NAME.search(name.upper())}
    return sorted((v for v in values if len(v) >= MIN_SECRET), key=len, reverse=True)


def refuse_keys(field: str, text: str) -> str:
    """`text` unchanged, or InputError (without echoing the secret) when it holds a key-like string or a
    configured key's value (none fits in a text shorter than `MIN_SECRET`)."""
    if _KEY.search(text) or (len(text) >= MIN_SECRET and any(v in text for v in secret_values())):
        raise InputError("refusing to store what looks like an API key; the ledger never keeps keys", key=field)
    return text


def mask_secrets(text: str) -> str:
    """`text` with every configured key's value and every key-like string replaced by `MASK`."""
    for value in secret_values():
        text = text.replace(value, MASK)
    return _KEY.sub(MASK, text)


def mask_logs(limit: int = 4000) -> None:
    """Make every log record of this process carry its message masked (`mask_secrets`) and cut to
    `limit` characters: a provider's echoed key or a 1 MB bad value never reaches a log whole."""
    make = logging.getLogRecordFactory()

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = make(*args, **kwargs)
        message = record.getMessage()
        clean = clip(mask_secrets(message), limit)
        if clean != message:
            record.msg, record.args = clean, None
        return record

    logging.setLogRecordFactory(factory)
