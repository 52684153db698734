"""Pure-Python twin of ``rust/proxy.rs``, with the same results: ``proxy_flags``, what a
``docker-proxy`` argv forwards.

It reads untrusted text (any user can name a process ``docker-proxy``): a port is only ever plain
decimal 1-65535.
"""

from __future__ import annotations

from collections.abc import Sequence

_PROXY_FLAGS = ("proto", "host-ip", "host-port", "container-ip", "container-port")


def _port(text: str) -> int | None:
    """A port in plain decimal ASCII digits (``int`` would also take ``+80``, ``8_0``, ``٨٠``)."""
    if not (0 < len(text) <= 5 and text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if 0 < value <= 0xFFFF else None


def proxy_flags(argv: Sequence[str]) -> tuple[str, int, str, int] | None:
    """(host address, host port, container address, container port) of a ``docker-proxy`` argv,
    the addresses as given. Flags take Go's `flag` package forms (``-name value``,
    ``-name=value``, one or two dashes; the last one given wins) and ``-proto`` defaults to
    ``tcp`` (moby cmd/docker-proxy/main.go, parseFlags, at 4be37b1); other arguments are
    passed over."""
    if not argv or argv[0].rsplit("/", 1)[-1] != "docker-proxy":
        return None
    values: dict[str, str] = {"proto": "tcp"}
    args = iter(argv[1:])
    for arg in args:
        if not arg.startswith("-"):
            continue
        name, equals, value = arg[2 if arg.startswith("--") else 1 :].partition("=")
        if name in _PROXY_FLAGS:
            values[name] = value if equals else next(args, "")
    if values["proto"] != "tcp" or any(name not in values for name in _PROXY_FLAGS):
        return None
    host_port, container_port = _port(values["host-port"]), _port(values["container-port"])
    if host_port is None or container_port is None:
        return None
    return values["host-ip"], host_port, values["container-ip"], container_port
