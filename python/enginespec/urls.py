"""Addresses of engine servers: how to reach what a server listens on."""

from __future__ import annotations

import ipaddress
from urllib.parse import quote

#: Scheme enginespec uses for servers on a unix socket (the path is percent-encoded as the host).
UNIX_SCHEME = "http+unix://"


def is_socket_path(host: str) -> bool:
    """A listen "host" that is a unix socket path (llama-server listens on one when --host ends
    with .sock, tools/server/server.cpp)."""
    return host.startswith("/") or host.endswith(".sock")


def unix_socket_url(path: str) -> str:
    return UNIX_SCHEME + quote(path, safe="")


def base_url(host: str, port: int) -> str:
    """The URL that reaches a server listening on ``host:port``: wildcard addresses (``0.0.0.0``,
    ``::``, empty) map to loopback, IPv6 literals are bracketed, socket paths use ``http+unix://``."""
    if is_socket_path(host):
        return unix_socket_url(host)
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    try:
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    except ValueError:
        pass
    return f"http://{host}:{port}"
