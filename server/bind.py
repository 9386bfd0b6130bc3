"""Where the HTTP transport may listen: loopback freely, any other address only behind a bearer token."""

from __future__ import annotations

import ipaddress

from paratune.oracle.errors import InputError


def is_loopback(host: str) -> bool:
    """Whether `host` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse a non-loopback address without a bearer token."""
    if not is_loopback(host) and not token:
        raise InputError(f"refusing to listen on {host} without a bearer token: pass --token or set "
                         "PARATUNE_MCP_TOKEN (or bind to 127.0.0.1)", key="--host")
