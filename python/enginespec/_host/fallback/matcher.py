"""Pure-Python twin of the Rust matcher (``rust/matcher.rs``): same algorithm, same results.

Both interpret the JSON form of the engines' signatures. Keep the two in step: the differential
property test in ``tests/engines/test_differential.py`` runs them side by side.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from enginespec._host.shapes import (
    RawInvocation,
    basename,
    is_python,
    looks_like_flag,
    parse_port,
    python_target,
)
from enginespec.definition.signature import LaunchForm, Role, Signature

# What may follow an executable prefix (`llama-server-` + `b5678`), and a trailing file extension
# of letters only (`.sh`, `.log`) that makes it a script or a file rather than a renamed build.
_PREFIX_SUFFIX = re.compile(r"[A-Za-z0-9._-]+", re.ASCII)
_LETTERS_EXTENSION = re.compile(r".*\.[A-Za-z]+", re.ASCII | re.DOTALL)


def prefixed(name: str, prefix: str) -> bool:
    """Whether a basename is ``prefix`` + a renamed build's suffix (as ``prefixed`` in Rust)."""
    if not name.startswith(prefix):
        return False
    suffix = name[len(prefix) :]
    return bool(_PREFIX_SUFFIX.fullmatch(suffix)) and not _LETTERS_EXTENSION.fullmatch(suffix)


def _ascii_endswith_ignore_case(value: str, suffix: str) -> bool:
    tail = value[len(value) - len(suffix) :] if len(suffix) <= len(value) else None
    return tail is not None and tail.isascii() and tail.lower() == suffix.lower()


def _nonzero_rank(value: str) -> bool:
    """A decimal rank other than 0 (``1``, ``01``); anything else (``0``, ``$RANK``) is none."""
    return value.isascii() and value.isdigit() and value.strip("0") != ""


def in_directory(path: str, directories: tuple[str, ...]) -> bool:
    """Whether ``path``'s directory ends with one of ``directories`` (path components, `/` or `\\`
    separated, empty ones ignored), as ``in_directory`` in Rust."""
    end = max(path.rfind("/"), path.rfind("\\"))
    if end < 0:
        return False
    parts = [part for part in re.split(r"[/\\]", path[:end]) if part]
    for directory in directories:
        wanted = directory.split("/")
        if len(parts) >= len(wanted) and parts[len(parts) - len(wanted) :] == wanted:
            return True
    return False


def _split_address(value: str) -> tuple[str | None, str | None]:
    """``HOST:PORT`` or ``[V6]:PORT`` -> (host or None, port text); (None, None) for anything else."""
    if value.startswith("["):
        close = value.find("]")
        if close < 0 or value[close + 1 : close + 2] != ":":
            return None, None
        return value[1:close] or None, value[close + 2 :]
    colon = value.rfind(":")
    if colon < 0 or ":" in value[:colon]:
        return None, None
    return value[:colon] or None, value[colon + 1 :]


def _accepts_loader(form: LaunchForm, loader: str) -> bool:
    return loader in form.loaders or any(prefixed(loader, prefix) for prefix in form.loader_prefixes)


class _Compiled:
    def __init__(self, signature: Signature) -> None:
        self.signature = signature
        # Evidence flags by canonical name: written with any spelling the engine accepts.
        self.evidence_flags = {
            id(form): frozenset(signature.canonical(flag) for flag in form.evidence.any_flags)
            for form in signature.launch_forms
            if form.evidence is not None
        }
        wanted = (
            *signature.model_flags,
            *signature.served_name_flags,
            *signature.host_flags,
            *signature.port_flags,
            *signature.address_flags,
            *signature.follower_rank_flags,
            *signature.follower_flags,
            *signature.exit_values,
            *(flag for flags in self.evidence_flags.values() for flag in flags),
        )
        self.wanted = frozenset(wanted)


_Candidates = list[tuple[int, LaunchForm]]


def _past_leading(argv: Sequence[str], start: int, form: LaunchForm, signature: Signature) -> int | None:
    """Where the form's subcommand should be: past the program's global options
    (``LaunchForm.leading_flags`` with their values, ``leading_switches``); ``None`` when one of
    them is an exit flag (``leading_in`` of matcher.rs)."""
    if not form.leading_flags and not form.leading_switches:
        return start
    at = start
    while at < len(argv):
        name, joined, _value = argv[at].partition("=")
        # a flag declared both ways takes its value, as matcher.rs's table finds it first
        if name in form.leading_flags:
            at += 1 if joined else 2
        elif name in form.leading_switches and not joined:
            if name in signature.exit_flags:
                return None
            at += 1
        else:
            break
    return at


class Matcher:
    """Classifies argv against a list of signatures given as JSON (see ``signatures_json``)."""

    def __init__(self, signatures_json: str) -> None:
        import json

        documents = json.loads(signatures_json)
        self._engines = [_Compiled(Signature.model_validate(doc)) for doc in documents]
        self._by_executable: dict[str, _Candidates] = {}
        self._by_module: dict[str, _Candidates] = {}
        self._by_prefix: list[tuple[str, int, LaunchForm]] = []
        self._by_suffix: list[tuple[str, int, LaunchForm]] = []
        self._loaders: set[str] = set()
        # Forms whose program a loader runs under any name, in signature order.
        self._any_program: _Candidates = []
        loader_prefixes: set[str] = set()
        for index, compiled in enumerate(self._engines):
            for form in compiled.signature.launch_forms:
                if form.any_program:
                    self._any_program.append((index, form))
                for name in form.executables:
                    self._by_executable.setdefault(name, []).append((index, form))
                for name in form.executable_prefixes:
                    self._by_prefix.append((name, index, form))
                for name in form.executable_suffixes:
                    self._by_suffix.append((name, index, form))
                for name in form.modules:
                    self._by_module.setdefault(name, []).append((index, form))
                self._loaders.update(form.loaders)
                loader_prefixes.update(form.loader_prefixes)
        # A form bound to a directory is tried before the other forms of the same name.
        for candidates in self._by_executable.values():
            candidates.sort(key=lambda candidate: not candidate[1].directories)
        self._prefixes = tuple(prefix for prefix, _, _ in self._by_prefix)
        self._suffixes = tuple(suffix for suffix, _, _ in self._by_suffix)
        self._loader_prefixes = tuple(sorted(loader_prefixes))
        self._worker_titles = [
            (title, index)
            for index, compiled in enumerate(self._engines)
            for title in compiled.signature.worker_titles
        ]

    def engines(self) -> list[str]:
        return [compiled.signature.engine for compiled in self._engines]

    def _is_loader(self, name: str) -> bool:
        return name in self._loaders or (
            bool(self._loader_prefixes)
            and name.startswith(self._loader_prefixes)
            and any(prefixed(name, prefix) for prefix in self._loader_prefixes)
        )

    def parse(self, argv: Sequence[str]) -> RawInvocation | None:
        """The facts of the first form argv launches (subcommand given, evidence found), if any.
        The forms argv's program may be are tried in signature order, exact names before prefixes
        and suffixes (forms bound to a directory first).
        """
        if not argv:
            return None
        exe = basename(argv[0])
        start = 1
        program: str = argv[0]
        loader: str | None = None
        candidates: _Candidates | None
        if is_python(exe):
            target = python_target(argv)
            if target is None:
                return None
            kind, name, start = target
            if kind == "module":
                candidates = self._by_module.get(name)
                exe = ""
            else:
                program, exe = name, basename(name)
                candidates = self._by_executable.get(exe)
        else:
            candidates = self._by_executable.get(exe)
            # A loader running the program named next (`[~/.ape-1.10, ./x.llamafile, ...]`).
            if not candidates and len(argv) > 1 and self._is_loader(exe):
                loader, program, start = exe, argv[1], 2
                exe = basename(program)
                candidates = self._by_executable.get(exe)
        # One C-level test for the common case: no prefix or suffix at all.
        if exe and self._prefixes and exe.startswith(self._prefixes):
            candidates = [*(candidates or ()), *((i, f) for p, i, f in self._by_prefix if prefixed(exe, p))]
        if exe and self._suffixes and exe.endswith(self._suffixes):
            suffixed = ((i, f) for x, i, f in self._by_suffix if len(exe) > len(x) and exe.endswith(x))
            candidates = [*(candidates or ()), *suffixed]
        # Last, the forms that take a loader's program under any name; a flag is no program.
        if loader is not None and self._any_program and not program.startswith("-"):
            candidates = [*(candidates or ()), *self._any_program]
        if not candidates:
            return self._worker(argv)  # almost every process on a host: None
        for index, form in candidates:
            if loader is not None and not _accepts_loader(form, loader):
                continue
            if form.directories and not in_directory(program, form.directories):
                continue
            at = _past_leading(argv, start, form, self._engines[index].signature)
            if at is None:
                return None  # a leading exit flag: the program prints and exits
            end = at + len(form.subcommand)
            if tuple(argv[at:end]) != form.subcommand:
                continue
            if end < len(argv) and argv[end] in form.other_subcommands:
                continue
            outcome = self._parse_form(argv, index, form, end, program)
            if outcome != "no evidence":
                return outcome
        return None

    def _worker(self, argv: Sequence[str]) -> RawInvocation | None:
        """A worker that set its process title (``VLLM::EngineCore``): the whole title is argv[0],
        so a path (``/x/VLLM::y``) is never one. It names its engine and nothing else."""
        title = argv[0]
        for prefix, index in self._worker_titles:
            if len(title) > len(prefix) and title.startswith(prefix):
                return RawInvocation(index, None, [], None, None, "worker")
        return None

    def _own_flags(self, argv: Sequence[str], index: int, form: LaunchForm, i: int) -> RawInvocation | None:
        """A program of the engine's that shares none of its flags (llama.cpp's rpc-server): only
        the form's own host and port flags and the signature's exit flags (as written or by an
        alias) are read."""
        sig = self._engines[index].signature
        host: str | None = None
        port: str | None = None
        n = len(argv)
        while i < n:
            token = argv[i]
            i += 1
            if token in sig.exit_flags or sig.aliases.get(token) in sig.exit_flags:
                return None
            if token in form.host_flags or token in form.port_flags:
                if i >= n:
                    return None  # its value is required: the program exits
                if token in form.host_flags:
                    host = argv[i]
                else:
                    port = argv[i]
                i += 1
        return RawInvocation(index, None, [], host or None, parse_port(port) if port else None, form.role)

    def _parse_form(
        self, argv: Sequence[str], index: int, form: LaunchForm, i: int, program: str
    ) -> RawInvocation | Literal["no evidence"] | None:
        """The facts of ``form`` from its arguments on (from ``argv[i]``), ``"no evidence"`` when
        the form needs evidence argv lacks, ``None`` when the program would exit (a usage error,
        ``--help``, ``--version``)."""
        compiled = self._engines[index]
        sig = compiled.signature
        if form.no_arguments and i < len(argv):
            return None
        if not form.facts:
            return self._own_flags(argv, index, form, i)
        read = _read_arguments(argv, compiled, form, i)
        if read is None:
            return None
        seen, positional = read.seen, read.positional
        exited = read.exited

        def last(flags: tuple[str, ...]) -> str | None:
            for flag in flags:
                values = seen.get(flag)
                if values and values[-1]:
                    return values[-1]
            return None

        if form.max_positionals is not None and read.positionals > form.max_positionals:
            # clap "unexpected argument", argparse "unrecognized arguments": a usage error
            exited = True
        for flag, actions in sig.exit_values.items():
            given = seen.get(flag)
            if given and given[-1] in actions:
                exited = True
        model = positional or last(sig.model_flags) or (program if form.program_model else None)
        served: list[str] = []
        for flag in sig.served_name_flags:
            for value in seen.get(flag, ()):
                parts = value.split(sig.served_name_separator) if sig.served_name_separator else [value]
                served.extend(part for part in parts if part)
            if served:
                break
        address = last(sig.address_flags)
        address_host, address_port = _split_address(address) if address is not None else (None, None)
        port_value = last(sig.port_flags) or read.positional_port or address_port or None
        port = parse_port(port_value) if port_value is not None else None
        model = model or None
        evidence = form.evidence
        if evidence is not None:
            if evidence.model_suffixes and not (
                model is not None
                and any(_ascii_endswith_ignore_case(model, suffix) for suffix in evidence.model_suffixes)
            ):
                return "no evidence"
            if evidence.any_flags and seen.keys().isdisjoint(compiled.evidence_flags[id(form)]):
                return "no evidence"
            if evidence.positionals and not read.positional_found:
                return "no evidence"
        if exited or read.mode is False or (read.mode is None and read.modeless_exit):
            return None
        role: Role = form.role
        if role == "server" and (sig.follower_flags or sig.follower_rank_flags):
            rank = last(sig.follower_rank_flags)
            if (rank is not None and _nonzero_rank(rank)) or not seen.keys().isdisjoint(sig.follower_flags):
                role = "follower"
        return RawInvocation(index, model, served, last(sig.host_flags) or address_host, port, role)


@dataclass(slots=True)
class _Read:
    """What one pass over a form's arguments found (``parse_form``'s locals in matcher.rs)."""

    #: the values of the flags the matcher wants, by canonical flag, as last given
    seen: dict[str, list[str]] = field(default_factory=dict)
    positional: str | None = None
    positional_port: str | None = None
    #: one of the positionals the form's evidence names was given
    positional_found: bool = False
    positionals: int = 0
    #: the program exits (a usage error, an exit flag or subcommand), for a form that needs evidence
    exited: bool = False
    #: what the last mode flag says (``False``: not serving), ``None`` when none was given
    mode: bool | None = None
    modeless_exit: bool = False


def _read_arguments(argv: Sequence[str], compiled: _Compiled, form: LaunchForm, i: int) -> _Read | None:
    """One pass over ``form``'s arguments from ``argv[i]``: its flags' values, positionals and
    exits; ``None`` when the program exits and the form needs no evidence (one that does reads
    on past an exit: without the evidence argv is not this engine at all, whatever it asks)."""
    sig = compiled.signature
    n = len(argv)
    read = _Read()
    wanted_positionals = form.evidence.positionals if form.evidence is not None else ()
    port_position = 1 if form.positional_model else 0
    while i < n:
        token = argv[i]
        i += 1
        if token == "--":
            if form.positional_model and read.positional is None and i < n:
                read.positional = argv[i]
            read.positionals += n - i  # everything after `--` is positional
            break
        if not looks_like_flag(token):
            if read.positionals == 0 and token in form.exit_subcommands:
                if form.evidence is None:
                    return None
                read.exited = True
            if form.positional_model and read.positional is None:
                read.positional = token
            elif form.positional_port and read.positionals == port_position:
                read.positional_port = token
            read.positional_found = read.positional_found or token in wanted_positionals
            read.positionals += 1
            continue
        inline: str | None = None
        name = token
        if token.startswith("--"):
            eq = token.find("=")
            if eq > 0:
                name, inline = token[:eq], token[eq + 1 :]
        flag = sig.canonical(name)
        if flag in sig.exit_flags:
            if form.evidence is None:
                return None
            read.exited = True
        read.mode = sig.mode_flags.get(flag, read.mode)
        read.modeless_exit = read.modeless_exit or flag in sig.modeless_exit_flags
        if inline is not None:
            values = [inline]
        elif flag in sig.no_value_flags or flag.startswith(sig.no_value_prefixes):
            values = []
        elif flag in sig.multi_value_flags:
            values = []
            while i < n and not looks_like_flag(argv[i]) and argv[i] != "--":
                values.append(argv[i])
                i += 1
        elif i < n and not looks_like_flag(argv[i]):
            values = [argv[i]]
            i += 1
        else:
            values = []
            if sig.values_required and token.startswith("--"):
                # "a value is required for ...": a usage error, the program exits
                if form.evidence is None:
                    return None
                read.exited = True
        if flag in compiled.wanted:
            read.seen[flag] = values
    return read
