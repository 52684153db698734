"""Stub of the Rust extension module (rust/python.rs)."""

from collections.abc import Sequence

RawInvocation = tuple[int, str | None, list[str], str | None, int | None]

class Matcher:
    """Engine signatures (JSON from ``signatures_json``) compiled once; classifies argv."""

    def __init__(self, signatures_json: str) -> None: ...
    def engines(self) -> list[str]: ...
    def parse(self, argv: Sequence[str]) -> RawInvocation | None:
        """(engine index, model, served names, host, port) for a server's argv, else None."""
