"""Where the HTTP transport may listen (loopback freely, any other address only behind a bearer token), and
which Host headers it answers (DNS-rebinding protection: a page on another site that resolves its own name
to this machine sends its own name as Host, and is refused)."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from contextlib import suppress

from mcp.server.transport_security import TransportSecuritySettings

from paratune.oracle.errors import InputError

WILDCARDS = ("0.0.0.0", "::", "")


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


def host_names(host: str, extra: Sequence[str]) -> list[str]:
    """The names a request to a server bound to `host` may carry as its Host: loopback's, `host` itself or,
    for a wildcard address, this machine's name, full name and addresses; plus `extra` (--allow-host)."""
    names = {"127.0.0.1", "localhost", "[::1]", *extra}
    if host in WILDCARDS:
        name = socket.gethostname()
        names |= {name, socket.getfqdn()}
        with suppress(OSError):  # a name that does not resolve: its addresses stay unknown, the rest apply
            names |= set(socket.gethostbyname_ex(name)[2])
    else:
        names.add(f"[{host}]" if ":" in host else host)
    return sorted(names)


def transport_security(host: str, extra: Sequence[str]) -> TransportSecuritySettings:
    """Host and Origin checks for every bind address (the SDK turns them on for loopback only): each allowed
    name with any port, over http or https."""
    names = host_names(host, extra)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=[*names, *(f"{n}:*" for n in names)],
        allowed_origins=[f"{scheme}://{n}{port}" for n in names for scheme in ("http", "https") for port in ("", ":*")])
