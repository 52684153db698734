"""Stub of the Rust extension module (rust/python.rs)."""

from collections.abc import Sequence

RawInvocation = tuple[int, str | None, list[str], str | None, int | None]

class Matcher:
    """Engine signatures (JSON from ``signatures_json``) compiled once; classifies argv."""

    def __init__(self, signatures_json: str) -> None: ...
    def engines(self) -> list[str]: ...
    def parse(self, argv: Sequence[str]) -> RawInvocation | None:
        """(engine index, model, served names, host, port) for a server's argv, else None."""

RawFacts = tuple[int, str | None, list[str], str | None, int | None]
#: (pid, start time, ppid, argv, facts, exe, descendants, parent argv, listen ports)
RawProcess = tuple[int, float, int, list[str], RawFacts, str | None, list[int], list[str], list[int]]

class Scanner:
    """Incremental /proc scanner (Linux only); the GIL is released during ``scan``."""

    def __init__(
        self, signatures_json: str, wrappers: list[str], young_seconds: float, listen_ports: bool
    ) -> None: ...
    def scan(self) -> list[RawProcess]: ...
    def stats(self) -> tuple[int, int, int, int, int, bool, int]:
        """(scanned, new, vanished, unreadable, reread, full_recheck, known) of the last scan."""
