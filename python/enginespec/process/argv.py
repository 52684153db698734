"""Recognising an engine server from its argv."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, computed_field

from enginespec._host.backend import MatcherType
from enginespec._host.shapes import basename, checkout_paths, looks_like_flag, program_path
from enginespec.definition.records import EngineDefinition, Fact
from enginespec.definition.registry import all_signatures, find_engine
from enginespec.definition.signature import NOT_SERVING_ROLES, Role, Signature, signatures_json
from enginespec.display import literal
from enginespec.process.urls import base_url, is_relative_socket_path, unix_socket_url
from enginespec.untrusted.masking import REDACTED, is_secret_name


class Invocation(BaseModel):
    """What a server's argv says. ``host``/``port`` are exactly as given (``None`` when absent);
    ``effective_host``/``effective_port`` fill in the engine's defaults, except that a port argv
    gives but that is no port (``99999``, ``$PORT``) leaves ``effective_port`` ``None``: it is not
    the default. ``problems`` says what argv gives that cannot be used (an invalid port, a host
    that is not an address). ``model`` is ``None`` when argv does not name it (``--config
    file.yaml``, llama-server router mode): never guessed. ``role`` is what the process is to its
    engine: ``server`` (serves the HTTP API), ``runner`` (a per-model child of a supervising
    server) or ``follower`` (a multi-node or data-parallel worker with no HTTP API: vLLM
    ``--headless``, SGLang ``--node-rank 1``)."""

    model_config = ConfigDict(frozen=True)

    engine: str
    model: str | None
    served_model_names: tuple[str, ...]
    host: str | None
    port: int | None
    effective_host: str
    effective_port: int | None
    #: ``server`` by default only so that models built by hand stay valid; the parser and the
    #: scanner always say.
    role: Role = "server"
    problems: tuple[str, ...] = ()

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


def served_names(signature: Signature, model: str | None, served: Sequence[str]) -> tuple[str, ...]:
    """The names clients use: the served-name flags', or the model's where the engine serves it
    under the name it is given by."""
    if served or not signature.model_is_served_name:
        return tuple(served)
    return (model,) if model else ()


def checkout_programs(signature: Signature) -> dict[str, tuple[str, ...]]:
    """The programs that are ``signature``'s engine only inside its checkout, by name, with the
    files that must lie next to them (``LaunchForm.checkout_files``; the first form naming a
    program decides): what a scan's read set asks the backend to look for."""
    programs: dict[str, tuple[str, ...]] = {}
    for form in signature.launch_forms:
        if form.checkout_files:
            for name in form.executables:
                programs.setdefault(name, form.checkout_files)
    return programs


@dataclass(frozen=True)
class Checkout:
    """Files that must lie next to argv's program for it to be this engine (``LaunchForm.
    checkout_files``)."""

    program: str
    files: tuple[str, ...]

    def missing(self, cwd: str) -> str | None:
        """The first file that is not a regular file, seen from ``cwd`` on this host; ``None``
        when all are there. Nothing is followed but the path to the directory: a checkout's own
        files are plain files (``lstat``)."""
        paths = checkout_paths(self.program, self.files)
        if paths is None:
            return self.files[0]
        for name, path in zip(self.files, paths, strict=True):
            try:
                if not stat.S_ISREG(os.lstat(os.path.join(cwd, path)).st_mode):
                    return name
            except (OSError, ValueError):
                return name
        return None


def checkout(signature: Signature, argv: Sequence[str]) -> Checkout | None:
    """The checkout argv's program must be in, when a launch form of ``signature`` names its
    program with ``checkout_files``."""
    program = program_path(argv)
    files = checkout_programs(signature).get(basename(program))
    return None if files is None else Checkout(program, files)


def _listen_default(signature: Signature, argv: Sequence[str]) -> tuple[str, int] | None:
    """Where a program of one of ``signature``'s forms with its own address flags listens when
    argv gives none (``LaunchForm.listen_default``), found by its executable's name."""
    name = basename(program_path(argv))
    for form in signature.launch_forms:
        if form.listen_default is not None and name in form.executables:
            return form.listen_default
    return None


def parse_argv(argv: Sequence[str], cwd: str | os.PathLike[str] | None = None) -> Invocation | None:
    """Recognises a serving process of a known engine from its argv, else returns ``None``.

    Strings may carry surrogate escapes (``os.fsdecode`` of bytes that are not UTF-8). A program
    that is an engine only inside its checkout (TabbyAPI's ``main.py``) is looked for in ``cwd``,
    the process's working directory: ``None`` when its files are not there; without ``cwd`` the
    invocation is returned with a problem saying it was not checked.
    """
    tokens = _checked(argv)
    compiled = _current()
    raw = compiled.matcher.parse(tokens)
    if raw is None:
        return None
    index, model, served, host, port, role = raw
    signature = compiled.signatures[index]
    definition = find_engine(signature.engine)
    port_text = argv_port(signature, tokens)
    replaced = replaced_by_config(definition, tokens)
    if "host" in replaced:
        host = None
    if "port" in replaced:
        port, port_text = None, None
    where = endpoint(definition, tokens, host, port, port_text, role)
    problems = where.problems
    needed = checkout(signature, tokens)
    if needed is not None:
        if cwd is None:
            problems += (
                f"'{literal(basename(needed.program))}' is {signature.engine} only inside its checkout "
                f"({', '.join(needed.files)} next to it): not checked without the working directory",
            )
        elif needed.missing(os.fspath(cwd)) is not None:
            return None
    return Invocation(
        engine=signature.engine,
        model=model,
        served_model_names=served_names(signature, model, served),
        host=host,
        port=port,
        effective_host=where.effective_host,
        effective_port=where.effective_port,
        role=role,
        problems=problems,
    )


def replaced_by_config(definition: EngineDefinition, argv: Sequence[str]) -> frozenset[Fact]:
    """The facts argv gives that the engine ignores because argv names a config file."""
    settings = definition.settings
    if not settings.config_replaces_argv or settings.config_flag is None:
        return frozenset()
    given = flag_value(argv, definition.signature, settings.config_flag) is not None
    return settings.config_replaces_argv if given else frozenset()


@dataclass(frozen=True)
class ArgvAddress:
    """Where a server listens, as its argv and its engine's defaults say, and the URL that
    reaches it (``None`` when argv gives no usable address)."""

    effective_host: str
    effective_port: int | None
    base_url: str | None
    problems: tuple[str, ...]


def argv_port(signature: Signature, argv: Sequence[str]) -> str | None:
    """The text argv gives for the port (valid or not), or ``None`` when it gives none."""
    return next(
        (v for f in signature.port_flags if (v := flag_value(argv, signature, f, empty=True)) is not None),
        None,
    )


def endpoint(
    definition: EngineDefinition,
    argv: Sequence[str],
    host: str | None,
    port: int | None,
    port_text: str | None,
    role: Role = "server",
) -> ArgvAddress:
    """The endpoint of a server of ``definition`` listening on ``host`` and ``port`` (``None``: not
    given). ``port_text`` is what its settings say the port is, when they say so: a text that is
    no port leaves the port unknown, not the default. A process of a role that serves no HTTP API
    has no URL; a retitled worker has not even the engine's default port."""
    signature = definition.signature
    if role in ("worker", "orphan"):
        return ArgvAddress(host or signature.default_host, port, None, ())
    if role in NOT_SERVING_ROLES:
        own = _listen_default(signature, argv)
        if own is not None and port_text is None:  # a follower listening on its own address
            return ArgvAddress(host or own[0], own[1] if port is None else port, None, ())
        where = endpoint(definition, argv, host, port, port_text)
        return ArgvAddress(where.effective_host, where.effective_port, None, where.problems)
    problems: list[str] = []
    effective_host = (
        host or definition.serving.program_hosts.get(basename(program_path(argv))) or signature.default_host
    )
    effective_port: int | None = port
    if port is None:
        effective_port = signature.default_port if port_text is None else None
        if port_text is not None:
            problems.append(f"port '{literal(port_text)}' is not a port number (1-65535)")
    elif port == 0:
        effective_port = None
        problems.append("port 0 (any free port) says nothing about where it listens")
    socket_flag = definition.serving.socket_flag
    socket = flag_value(argv, signature, socket_flag) if socket_flag else None
    if socket is not None:
        url = unix_socket_url(socket)
        if url is None:
            problems.append(f"socket path '{literal(socket)}' is not an absolute, printable path")
    else:
        url = base_url(effective_host, effective_port, sockets=definition.serving.socket_host)
        # A socket path relative to the server's working directory, which argv does not say:
        # the scan finds it (scanning.stages.working_socket_url).
        relative = definition.serving.socket_host and is_relative_socket_path(effective_host)
        if url is None and effective_port is not None and not relative:
            problems.append(f"host '{literal(effective_host)}' is not an address")
    return ArgvAddress(effective_host, effective_port, url, tuple(problems))


def _secret_flag(signature: Signature, name: str) -> bool:
    canonical = signature.canonical(name)
    if canonical in signature.secret_flags:
        return True
    if canonical in signature.no_value_flags or not looks_like_flag(name):
        return False
    if is_secret_name(canonical):
        return True
    # An abbreviation argparse would expand: `--api-ke` for `--api-key` (three letters at least).
    return (
        signature.abbreviations
        and canonical.startswith("--")
        and len(canonical) >= 5
        and any(flag.startswith(canonical) for flag in signature.secret_flags)
    )


def redact_argv(argv: Sequence[str], engine: str | None = None) -> list[str]:
    """argv with the values of secret flags replaced by ``***``: the engine's ``secret_flags``
    (every value of one that takes several), any flag whose name says secret (``--*-token``,
    ``--*-key``, ``--password``), and their argparse abbreviations where the engine allows them.
    A secret flag followed by another flag has no value, so nothing else is hidden.

    ``engine`` picks whose flags apply; by default the engine argv is recognised as, or every
    known engine's when it is none of them.
    """
    if engine is None:
        invocation = parse_argv(argv)
        engine = invocation.engine if invocation else None
    signatures = (find_engine(engine).signature,) if engine else all_signatures()
    out = list(argv)
    index = 0
    while index < len(out):
        if not out[index].startswith("-"):  # values and positionals: most of a huge argv
            index += 1
            continue
        name, eq, _value = out[index].partition("=")
        secret = next((sig for sig in signatures if _secret_flag(sig, name)), None)
        index += 1
        if secret is None:
            continue
        if eq and name.startswith("--"):
            out[index - 1] = f"{name}={REDACTED}"
            continue
        several = secret.canonical(name) in secret.multi_value_flags
        while index < len(out) and not looks_like_flag(out[index]):
            out[index] = REDACTED
            index += 1
            if not several:
                break
    return out


def flag_value(argv: Sequence[str], signature: Signature, flag: str, *, empty: bool = False) -> str | None:
    """The value of the last occurrence of a flag (any spelling the engine accepts), or None (also
    for an empty value, unless ``empty``)."""
    wanted = signature.canonical(flag)
    value: str | None = None
    for index, token in enumerate(argv):
        if not token.startswith("-"):
            continue
        name, eq, inline = token.partition("=")
        if signature.canonical(name if name.startswith("--") else token) != wanted:
            continue
        if eq and name.startswith("--"):
            value = inline
        elif index + 1 < len(argv):
            value = argv[index + 1]
    return value if value or empty else None


def detect_engine(argv: Sequence[str]) -> str | None:
    """The engine id of a server argv, or ``None``."""
    invocation = parse_argv(argv)
    return invocation.engine if invocation else None
