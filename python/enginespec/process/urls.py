"""Addresses of engine servers: how to reach what a server listens on.

A listen address read from a process's argv is untrusted: it is used in a URL only when it is an
address (an IP literal, a hostname by RFC 1123, or a unix socket path where the engine supports
one), so nothing can smuggle a port, a path or a header into a request (``--host
'127.0.0.1:8000/admin?x='``, ``--host $'127.0.0.1\\n'``).
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import quote, unquote, urlsplit

from enginespec.errors import InvalidInputError

#: Scheme enginespec uses for servers on a unix socket (the path is percent-encoded as the host).
UNIX_SCHEME = "http+unix://"

_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)", re.ASCII)
# A last label that makes a URL parser read the host as an IPv4 number (WHATWG URL "ends in a
# number"; inet_aton takes `127.1`, `0177.0.0.1`, `2130706433`, `0x7f000001`): such a host is a
# number in another spelling, never a name.
_NUMERIC_LABEL = re.compile(r"[0-9]+|0[xX][0-9A-Fa-f]*", re.ASCII)
# Wildcard listen addresses and where a client on this host reaches them.
_WILDCARDS = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}
# Longest unix socket path the kernel takes (sun_path is 108 bytes with the NUL).
_MAX_SOCKET_PATH = 107


def is_socket_path(host: str) -> bool:
    """A listen "host" that names a unix socket (llama-server listens on one when --host ends
    with .sock, tools/server/server.cpp)."""
    return host.startswith("/") or host.endswith(".sock")


def is_relative_socket_path(host: str) -> bool:
    """A socket-path host that is relative to the server's working directory (Docker Model
    Runner's llama-server runners: ``--host inference-runner-0.sock``)."""
    return is_socket_path(host) and not host.startswith("/")


def socket_in(directory: str, path: str) -> str | None:
    """The relative socket path ``path`` resolved against the absolute ``directory`` (where the
    server's working directory is), or ``None`` when ``path`` has a ``..`` component (it would
    leave that directory for a place argv alone chose) or is empty. ``.`` components and
    repeated slashes are dropped, so one socket has one spelling."""
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if not parts or ".." in parts or not directory.startswith("/"):
        return None
    return "/".join([directory.rstrip("/"), *parts])


def is_wildcard(host: str) -> bool:
    """A listen address that means every address of the host (``0.0.0.0``, ``::``, empty)."""
    return host in _WILDCARDS


def usable_socket_path(path: str) -> bool:
    """Whether a socket path can be connected to: absolute, printable, short enough."""
    return (
        path.startswith("/")
        and 0 < len(path.encode("utf-8", "surrogateescape")) <= _MAX_SOCKET_PATH
        and path.isprintable()
    )


def connect_host(host: str) -> str | None:
    """The host part of a URL that reaches a server listening on ``host`` (wildcards mapped to
    loopback, IPv6 bracketed, an IPv4-mapped IPv6 address as the IPv4 address it is), or
    ``None`` when ``host`` is not a canonical IP literal or an RFC 1123 hostname: other spellings
    of a number (``127.1``, ``0177.0.0.1``, ``2130706433``, ``0x7f000001``, ``256.0.0.1``) are
    refused, as they would be read as another address than they look (or crash a URL parser)."""
    host = _WILDCARDS.get(host, host)
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        labels = host[:-1].split(".") if host.endswith(".") else host.split(".")
        if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
            return None
        if _NUMERIC_LABEL.fullmatch(labels[-1]):
            return None
        return host
    if "%" in host:  # a zone index (fe80::1%eth0) is no address another host or URL can use
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return f"[{address}]" if address.version == 6 else str(address)


def unix_socket_url(path: str) -> str | None:
    """The ``http+unix://`` URL of a socket path, or ``None`` when the path is not usable."""
    return UNIX_SCHEME + quote(path, safe="") if usable_socket_path(path) else None


def base_url(host: str, port: int | None, *, sockets: bool = True) -> str | None:
    """The URL that reaches a server listening on ``host:port``, or ``None`` when there is no
    usable address: ``host`` is not an address, or ``port`` is not 1-65535. With ``sockets``, a
    socket-path host is reached as ``http+unix://``."""
    if sockets and is_socket_path(host):
        return unix_socket_url(host)
    connect = connect_host(host)
    if connect is None or port is None or not 1 <= port <= 65535:
        return None
    return f"http://{connect}:{port}"


def checked_url(url: str, field: str = "base_url") -> str:
    """A URL given by a caller, refused with an :class:`InvalidInputError` naming ``field`` unless
    it is ``http://``, ``https://`` or ``http+unix://`` with a usable address and port."""
    if not url.isprintable():
        raise InvalidInputError(f"{field}: {url!r} contains control characters")
    if url.startswith(UNIX_SCHEME):
        parts = urlsplit("http://" + url[len(UNIX_SCHEME) :])
        if not usable_socket_path(unquote(parts.netloc)):
            raise InvalidInputError(f"{field}: {url!r} does not name an absolute socket path")
        return url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise InvalidInputError(f"{field}: {url!r} must start with http://, https:// or {UNIX_SCHEME}")
    try:
        port = parts.port
    except ValueError:
        raise InvalidInputError(f"{field}: {url!r} has a port outside 1-65535") from None
    if port == 0:
        raise InvalidInputError(f"{field}: {url!r} has a port outside 1-65535")
    host = parts.hostname or ""
    if not host or connect_host(host) is None or parts.username is not None:
        raise InvalidInputError(f"{field}: {url!r} has no usable host")
    return url
