"""Recognising an engine server from its argv."""

from __future__ import annotations

import os
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, computed_field

from enginespec._backend import MatcherType
from enginespec.registry import all_signatures, find_engine
from enginespec.signature import Signature, signatures_json


class Invocation(BaseModel):
    """What a server's argv says. ``host``/``port`` are exactly as given (``None`` when absent);
    ``effective_host``/``effective_port`` fill in the engine's defaults. ``model`` is ``None`` when
    argv does not name it (``--config file.yaml``, llama-server router mode): never guessed."""

    model_config = ConfigDict(frozen=True)

    engine: str
    model: str | None
    served_model_names: tuple[str, ...]
    host: str | None
    port: int | None
    effective_host: str
    effective_port: int

    @computed_field  # type: ignore[prop-decorator]
    @property
    def served_model_name(self) -> str | None:
        """The first served name, or ``None``."""
        return self.served_model_names[0] if self.served_model_names else None


class _Compiled:
    def __init__(self, signatures: tuple[Signature, ...]) -> None:
        self.signatures = signatures
        self.matcher = MatcherType(signatures_json(signatures))


_compiled: _Compiled | None = None


def _current() -> _Compiled:
    """The matcher for the registered signatures, rebuilt only when the registry changed."""
    global _compiled
    signatures = all_signatures()
    if _compiled is None or _compiled.signatures != signatures:
        _compiled = _Compiled(signatures)
    return _compiled


def _checked(argv: Sequence[str]) -> list[str]:
    """argv as a list of str that the OS could have given (both backends refuse the same input)."""
    if isinstance(argv, (str, bytes)):
        raise TypeError("argv must be a sequence of strings, not a single string")
    tokens = list(argv)
    for index, token in enumerate(tokens):
        if not isinstance(token, str):
            raise TypeError(f"argv[{index}] must be str, not {type(token).__name__}")
        if not token.isascii():
            try:
                # Canonical form: what os.fsdecode gives for the bytes the OS would hold.
                tokens[index] = os.fsdecode(os.fsencode(token))
            except UnicodeEncodeError as err:
                raise ValueError(f"argv[{index}] cannot be an OS argument: {err.reason}") from None
    return tokens


def parse_argv(argv: Sequence[str]) -> Invocation | None:
    """Recognises a serving process of a known engine from its argv, else returns ``None``.

    Strings may carry surrogate escapes (``os.fsdecode`` of bytes that are not UTF-8).
    """
    tokens = _checked(argv)
    compiled = _current()
    raw = compiled.matcher.parse(tokens)
    if raw is None:
        return None
    index, model, served, host, port = raw
    signature = compiled.signatures[index]
    return Invocation(
        engine=signature.engine,
        model=model,
        served_model_names=tuple(served),
        host=host,
        port=port,
        effective_host=host or signature.default_host,
        effective_port=signature.default_port if port is None else port,
    )


REDACTED = "***"


def redact_argv(argv: Sequence[str], engine: str | None = None) -> list[str]:
    """argv with the values of secret flags (``--api-key``, ``--hf-token``, ...) replaced by ``***``.

    ``engine`` picks whose secret flags apply; by default the engine argv is recognised as, or every
    known engine's when it is none of them.
    """
    if engine is None:
        invocation = parse_argv(argv)
        engine = invocation.engine if invocation else None
    signatures = (find_engine(engine).signature,) if engine else all_signatures()
    out = list(argv)
    for index, token in enumerate(out):
        name, eq, _value = token.partition("=")
        for signature in signatures:
            if signature.canonical(name) not in signature.secret_flags:
                continue
            if eq:
                out[index] = f"{name}={REDACTED}"
            elif index + 1 < len(out):
                out[index + 1] = REDACTED
            break
    return out


def flag_value(argv: Sequence[str], signature: Signature, flag: str) -> str | None:
    """The value of the last occurrence of a flag (any spelling the engine accepts), or None."""
    wanted = signature.canonical(flag)
    value: str | None = None
    for index, token in enumerate(argv):
        name, eq, inline = token.partition("=")
        if signature.canonical(name if name.startswith("--") else token) != wanted:
            continue
        if eq and name.startswith("--"):
            value = inline
        elif index + 1 < len(argv):
            value = argv[index + 1]
    return value or None


def detect_engine(argv: Sequence[str]) -> str | None:
    """The engine id of a server argv, or ``None``."""
    invocation = parse_argv(argv)
    return invocation.engine if invocation else None
