"""Refuse to store anything that looks like an API key: the ledger keeps usage, never secrets."""

from __future__ import annotations

import re

from oracle.errors import InputError

_KEY = re.compile(
    r"\b(?:sk-[A-Za-z0-9_-]{16,}"  # OpenAI, Anthropic (sk-ant-...), DeepSeek, ...
    r"|sk_(?:live|test)_[A-Za-z0-9]{16,}"
    r"|AKIA[0-9A-Z]{16}"  # AWS access key id
    r"|AIza[0-9A-Za-z_-]{35}"  # Google
    r"|gh[pousr]_[A-Za-z0-9]{30,}"  # GitHub
    r"|hf_[A-Za-z0-9]{30,}"  # Hugging Face
    r"|xox[abposr]-[A-Za-z0-9-]{10,})"  # Slack
)


def refuse_keys(field: str, text: str) -> str:
    """`text` unchanged, or InputError (without echoing the secret) when it holds a key-like string."""
    if _KEY.search(text):
        raise InputError("refusing to store what looks like an API key; the ledger never keeps keys", key=field)
    return text
