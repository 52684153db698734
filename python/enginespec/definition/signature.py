"""How an engine's server shows up in argv, declared as data.

Each engine module declares one :class:`Signature`. The Rust matcher is compiled from the JSON form
of all signatures and the pure-Python fallback interprets the very same objects, so there is one
source of truth per engine and a plugin gets the native speed for free.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# rust/matcher.rs MAX_FACT_FLAGS: the matcher keeps per-fact slots in fixed arrays.
_MAX_FACT_FLAGS = 8
# rust/matcher.rs MAX_EVIDENCE_FLAGS: evidence flags are bits of one word per engine.
_MAX_EVIDENCE_FLAGS = 64
# Each checkout file is one stat of another process's files: a few are enough to tell a checkout.
_MAX_CHECKOUT_FILES = 8
_FLAG = re.compile(r"-{1,2}[A-Za-z0-9][A-Za-z0-9_.-]*", re.ASCII)
_TOKEN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*", re.ASCII)
# Loaders may be dot files (the APE loader extracted to `~/.ape-1.10`).
_LOADER = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.+-]*", re.ASCII)
_SUFFIX = re.compile(r"\.[A-Za-z0-9_][A-Za-z0-9_.+-]*", re.ASCII)
# A directory a program lies in, as path components: `lib/ollama`.
_DIRECTORY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.+-]*)*", re.ASCII)
# A file of a checkout, relative to the program's directory: `common/args.py`.
_CHECKOUT_FILE = _DIRECTORY


def _check_flags(values: Iterable[str], field: str) -> None:
    for value in values:
        if not _FLAG.fullmatch(value):
            raise ValueError(f"{field}: {value!r} is not a flag name (like --port or -m)")


#: What a launch form starts: ``server`` serves the HTTP API; ``runner`` is a per-model child of a
#: supervising server; ``follower`` is a multi-node or data-parallel worker that serves no HTTP API
#: (vLLM ``--headless``, SGLang ``--node-rank 1``).
FormRole = Literal["server", "runner", "follower"]

#: What a process is to its engine: a :data:`FormRole`, or ``worker`` (a process that set one of
#: the engine's worker titles, ``VLLM::EngineCore``: what its argv alone says), or ``orphan`` (such
#: a worker, or a tree of them, whose server is gone: it may still hold GPU memory; only a scan can
#: tell, as a worker under a live server is folded into that server's ``worker_pids``).
Role = Literal["server", "runner", "follower", "worker", "orphan"]

#: Roles that serve no HTTP API: never health-checked over HTTP.
NOT_SERVING_ROLES: frozenset[Role] = frozenset({"follower", "worker", "orphan"})
#: Why such a process is not asked, said first in a health or load reason (a table cuts the end).
NOT_SERVING_REASONS: dict[Role, str] = {
    "follower": "a follower (a multi-node or data-parallel worker) serves no HTTP API",
    "worker": "a worker serves no HTTP API",
    "orphan": "an orphaned worker (its server is gone) serves no HTTP API",
}


class Evidence(BaseModel):
    """What argv must show, besides the launch form, before a process counts as this engine: for an
    executable name too common to trust alone (pre-rename llama.cpp builds called their server
    ``server``). Every condition given must hold.

    ``model_suffixes``: the model argv names ends with one of these (ASCII case ignored; ``.gguf``).
    ``any_flags``: at least one of these flags (any spelling the engine accepts) is given.
    ``positionals``: one of argv's positional arguments (a token that is no flag and no flag's
    value) is one of these, exactly (uvicorn's app: ``llama_cpp.server.app:create_app``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_suffixes: tuple[str, ...] = ()
    any_flags: tuple[str, ...] = ()
    positionals: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _check(self) -> Evidence:
        if not self.model_suffixes and not self.any_flags and not self.positionals:
            raise ValueError("evidence needs model_suffixes, any_flags or positionals")
        for suffix in self.model_suffixes:
            if not suffix.isascii() or not suffix.isprintable() or not suffix:
                raise ValueError(f"evidence: model suffix {suffix!r} must be printable ASCII")
        for positional in self.positionals:
            if not positional.isascii() or not positional.isprintable() or not positional[:1].isalnum():
                raise ValueError(
                    f"evidence: positional {positional!r} must be printable ASCII"
                    " starting with a letter or digit"
                )
        _check_flags(self.any_flags, "evidence.any_flags")
        return self


class LaunchForm(BaseModel):
    """One way the server is started.

    ``executables`` are basenames of binaries or console scripts (``vllm``, ``llama-server``); a
    console script may also be run by an interpreter (``[python3, /venv/bin/vllm, ...]``).
    A trailing ``.exe`` (any case) is never part of a basename.
    ``executable_prefixes`` name renamed builds: a basename made of a prefix and a non-empty suffix
    of ASCII letters, digits, ``.``, ``_`` and ``-`` (``llama-server-b5678``, ``llama-server-cuda``),
    except a suffix ending in a file extension of letters only (``llama-server-wrapper.sh``,
    ``llama-server-x.log``: scripts and files, not builds).
    ``modules`` are ``python -m`` targets. ``subcommand`` tokens must follow the executable or module
    (``serve``). ``other_subcommands``: tokens that, right after the subcommand, name another
    command of the same program, so argv with one there is not this form (a click ``DefaultGroup``
    such as ``trtllm-serve``, where ``trtllm-serve MODEL`` means ``trtllm-serve serve MODEL`` unless
    MODEL is another command's name). ``positional_model`` says whether the first positional
    argument is the model.
    ``executable_suffixes`` name programs by their file name's ending (``x.llamafile``: a non-empty
    stem and the suffix). ``loaders`` (exact basenames) and ``loader_prefixes`` (as
    ``executable_prefixes``) are programs that run this form's program given as their first
    argument: the kernel shows an APE executable as ``[~/.ape-1.10, ./x.llamafile, args...]``.
    ``directories``: the program's path must lie in a directory ending with one of these path
    components (``lib/ollama``); such a form is tried before the other forms of the same name.
    ``program_model``: the program itself is the model when argv names none (a llamafile that
    carries its weights).
    ``evidence``, when given, must also be found in argv, else the form does not match.
    ``positional_port``: the positional argument after the model (the first one, without
    ``positional_model``) is the port. ``exit_subcommands``: a first positional argument naming one
    of these actions (``download``) runs it and exits: not a server. ``facts=False``: the
    program shares none of the signature's flags (llama.cpp's ``rpc-server``, whose ``-p`` is its
    RPC port): argv gives the engine and the role only (an exit flag still exits).
    ``no_arguments``: nothing may follow the subcommand (cobra ``ExactArgs(0)``, no flags): argv
    with more fails, not a server.
    ``max_positionals``: the program's own parser is strict about positional arguments (clap, or
    argparse with a fixed number of them): argv with more positionals than this (the positional
    model included, every token after ``--`` counted) is a usage error, the program exits at once
    (``text-generation-launcher /bin/sh -c ...`` from a broken entrypoint, a lone ``" "`` left by
    a shell line continuation). Only for a form whose flags that take no value, or several, are
    all in the signature, else a value may be counted as a positional.
    ``any_program``: the program run by one of the form's loaders may have any name (a llamafile
    copied to ``./model``): the form then needs evidence, and a program that looks like a flag is
    none.
    ``host_flags`` and ``port_flags``, only with ``facts=False``: the program's own flags for its
    listen address (exact spellings; each takes the next argument, which must be there, else the
    program exits): a follower's own address (``rpc-server -H 0.0.0.0 -p 50052``).
    ``listen_default``, with them: the (host, port) the program listens on when they are not given
    (rpc-server's ``127.0.0.1:50052``); read by the facade for the effective address, not by
    the matchers.
    ``checkout_files`` are files that must exist next to the program (relative to its directory,
    seen from the process's working directory) for a scanned process to count: ``main.py`` is a
    TabbyAPI server only inside a TabbyAPI checkout. The matcher cannot look at files; the scanner
    checks them and :func:`enginespec.parse_argv` checks them against a ``cwd`` it is given.
    ``leading_flags`` and ``leading_switches``: the program's global options, which argparse takes
    between the program and its subcommand (``ramalama --runtime=mlx serve M``): each of
    ``leading_flags`` with its value (``--flag value`` or ``--flag=value``), each of
    ``leading_switches`` alone, is passed over before the subcommand is looked for; a leading
    switch that is one of the signature's ``exit_flags`` (``--dryrun``, ``--version``) exits.
    ``role`` is what a process of this form is (see :data:`Role`); the signature's follower flags
    make a ``server`` a ``follower``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    executables: tuple[str, ...] = ()
    executable_prefixes: tuple[str, ...] = ()
    executable_suffixes: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    loaders: tuple[str, ...] = ()
    loader_prefixes: tuple[str, ...] = ()
    directories: tuple[str, ...] = ()
    subcommand: tuple[str, ...] = ()
    other_subcommands: tuple[str, ...] = ()
    positional_model: bool = False
    positional_port: bool = False
    program_model: bool = False
    exit_subcommands: tuple[str, ...] = ()
    no_arguments: bool = False
    max_positionals: int | None = Field(default=None, ge=0)
    any_program: bool = False
    facts: bool = True
    host_flags: tuple[str, ...] = ()
    port_flags: tuple[str, ...] = ()
    listen_default: tuple[str, int] | None = None
    evidence: Evidence | None = None
    checkout_files: tuple[str, ...] = Field(default=(), max_length=_MAX_CHECKOUT_FILES)
    leading_flags: tuple[str, ...] = ()
    leading_switches: tuple[str, ...] = ()
    role: FormRole = "server"

    @model_validator(mode="after")
    def _check(self) -> LaunchForm:
        if not (
            self.executables
            or self.executable_prefixes
            or self.executable_suffixes
            or self.modules
            or self.any_program
        ):
            raise ValueError(
                "a launch form needs at least one executable, executable prefix or suffix, or module"
            )
        if self.any_program and not ((self.loaders or self.loader_prefixes) and self.evidence):
            raise ValueError("any_program: the form needs loaders and evidence")
        if (self.host_flags or self.port_flags) and self.facts:
            raise ValueError("host_flags, port_flags: only for a form with facts=False")
        _check_flags((*self.host_flags, *self.port_flags), "launch form host_flags/port_flags")
        _check_flags((*self.leading_flags, *self.leading_switches), "launch form leading flags")
        if (self.leading_flags or self.leading_switches) and not self.subcommand:
            raise ValueError("leading_flags, leading_switches: options before a subcommand, which it needs")
        for name in (
            *self.executables,
            *self.executable_prefixes,
            *self.modules,
            *self.subcommand,
            *self.exit_subcommands,
            *self.other_subcommands,
        ):
            if not _TOKEN.fullmatch(name):
                raise ValueError(f"launch form token {name!r} must be a plain name")
        for field, pattern, values in (
            ("executable_suffixes", _SUFFIX, self.executable_suffixes),
            ("loaders", _LOADER, (*self.loaders, *self.loader_prefixes)),
            ("directories", _DIRECTORY, self.directories),
            ("checkout_files", _CHECKOUT_FILE, self.checkout_files),
        ):
            for value in values:
                if not pattern.fullmatch(value) or ".." in value.split("/"):
                    raise ValueError(f"{field}: {value!r} is not a plain name or relative path")
        if self.listen_default is not None and not (self.host_flags or self.port_flags):
            raise ValueError("listen_default: the address of a form's own host_flags or port_flags")
        if self.checkout_files and not self.executables:
            raise ValueError("checkout_files: the files lie next to a program named in executables")
        return self


class Signature(BaseModel):
    """Where an engine's facts sit in its server's argv.

    Flag names are canonical: ``aliases`` maps every other spelling (short forms, old names) to the
    canonical one. Value lists are in priority order where several flags carry the same fact; for
    one flag given twice the last occurrence wins, as in argparse and llama.cpp.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: str = Field(pattern=r"^[a-z][a-z0-9_-]*$")
    launch_forms: tuple[LaunchForm, ...] = Field(min_length=1)
    #: argparse-based engines that normalise ``--max_model_len`` to ``--max-model-len``.
    underscore_is_dash: bool = False
    aliases: Mapping[str, str] = Field(default_factory=dict)
    model_flags: tuple[str, ...] = Field(default=(), max_length=_MAX_FACT_FLAGS)
    served_name_flags: tuple[str, ...] = Field(default=(), max_length=_MAX_FACT_FLAGS)
    #: splits one served-name value into several (llama-server ``--alias a,b``).
    served_name_separator: str | None = None
    #: clients see the model under the name it is given by (TabbyAPI's ``--model-name`` folder):
    #: with no served-name flag, the model is the served name. Applied where invocations are
    #: built, not in the matcher.
    model_is_served_name: bool = False
    host_flags: tuple[str, ...] = Field(default=(), max_length=_MAX_FACT_FLAGS)
    port_flags: tuple[str, ...] = Field(default=(), max_length=_MAX_FACT_FLAGS)
    #: flags whose value is ``HOST:PORT`` (``[v6]:PORT``); host and port flags win over them.
    address_flags: tuple[str, ...] = Field(default=(), max_length=_MAX_FACT_FLAGS)
    #: flags that take no value, so the token after them may be the positional model.
    no_value_flags: frozenset[str] = frozenset()
    #: prefixes of flags that take no value (argparse ``BooleanOptionalAction`` ``--no-x``).
    no_value_prefixes: tuple[str, ...] = ()
    #: flags that take one or more values (argparse ``nargs="+"``).
    multi_value_flags: frozenset[str] = frozenset()
    #: flags that make the program print and exit instead of serving (``--help``, ``--version``).
    exit_flags: frozenset[str] = frozenset()
    #: flags whose value (the last occurrence's) names an action that runs and exits instead of
    #: serving: ``{"--action": ("stop",)}`` (TensorRT-LLM's ``mgmn_leader_node --action stop``).
    exit_values: Mapping[str, tuple[str, ...]] = Field(default_factory=dict, max_length=_MAX_FACT_FLAGS)
    #: flags choosing what the program does, the last one given deciding: serve (``True``) or a
    #: mode that does not serve (``False``: llamafile ``--server`` vs ``--cli``, ``--chat``).
    mode_flags: Mapping[str, bool] = Field(default_factory=dict)
    #: flags that make the program not serve when no mode flag is given (llamafile ``-p``).
    modeless_exit_flags: frozenset[str] = frozenset()
    #: flags whose presence makes a server a follower that serves no HTTP API (vLLM ``--headless``).
    follower_flags: frozenset[str] = frozenset()
    #: flags giving a node rank, in priority order: a rank other than 0 (a decimal number, the last
    #: occurrence) makes a server a follower (SGLang ``--node-rank 1``); ``0`` or no rank leaves it.
    follower_rank_flags: tuple[str, ...] = Field(default=(), max_length=_MAX_FACT_FLAGS)
    #: fold every descendant process into the server's workers (vLLM/SGLang retitle their children
    #: `VLLM::EngineCore`, `sglang::scheduler_TP0`; forked children may even keep the server's argv).
    fold_workers: bool = False
    #: prefixes of the process titles the engine's workers set (setproctitle), so that a worker
    #: whose server is gone (killed with SIGKILL) is still found and reported as an ``orphan``:
    #: argv[0] is the whole title, ``VLLM::EngineCore``.
    worker_titles: tuple[str, ...] = ()
    #: flags whose value is a secret (``--api-key``): redacted in every output, as is the value of
    #: any flag whose name says secret (``--*-token``, ``--*-key``, ``--password``).
    secret_flags: frozenset[str] = frozenset()
    #: argparse's ``allow_abbrev``: a unique prefix of a long flag is that flag (``--api-ke``).
    abbreviations: bool = False
    #: clap-style parsing: a long flag that takes one value and is given none (the end of argv or
    #: another flag follows) is a usage error and the program exits. Short flags are left alone
    #: (clap also reads ``-p8080`` and clusters). Only for an engine whose no-value flags are all
    #: listed, else a flag missing from ``no_value_flags`` hides its server.
    values_required: bool = False
    default_host: str
    default_port: int = Field(ge=1, le=65535)

    @field_validator("aliases")
    @classmethod
    def _check_aliases(cls, aliases: Mapping[str, str]) -> Mapping[str, str]:
        _check_flags(aliases.keys(), "aliases")
        _check_flags(aliases.values(), "aliases")
        return dict(sorted(aliases.items()))

    @field_validator("exit_values")
    @classmethod
    def _check_exit_values(cls, exits: Mapping[str, tuple[str, ...]]) -> Mapping[str, tuple[str, ...]]:
        _check_flags(exits.keys(), "exit_values")
        for flag, values in exits.items():
            if not values or not all(v and v.isascii() and v.isprintable() for v in values):
                raise ValueError(f"exit_values: {flag!r} needs one or more printable ASCII values")
        return dict(sorted(exits.items()))

    @field_validator("mode_flags")
    @classmethod
    def _sort_modes(cls, modes: Mapping[str, bool]) -> Mapping[str, bool]:
        return dict(sorted(modes.items()))

    @model_validator(mode="after")
    def _check(self) -> Signature:
        for field in (
            "model_flags",
            "served_name_flags",
            "host_flags",
            "port_flags",
            "no_value_flags",
            "multi_value_flags",
            "exit_flags",
            "secret_flags",
            "follower_flags",
            "follower_rank_flags",
            "address_flags",
            "mode_flags",
            "modeless_exit_flags",
        ):
            _check_flags(getattr(self, field), field)
        for title in self.worker_titles:
            if (
                len(title) < 2
                or not title.isascii()
                or not title.isprintable()
                or "/" in title
                or " " in title
            ):
                raise ValueError(
                    f"worker_titles: {title!r} must be printable ASCII of 2+ characters, no '/' or space"
                )
        if self.served_name_separator == "":
            raise ValueError("served_name_separator must be None or non-empty")
        fact_groups = (
            self.model_flags,
            self.served_name_flags,
            self.host_flags,
            self.port_flags,
            self.address_flags,
            self.follower_rank_flags,
            tuple(self.follower_flags),
            tuple(self.exit_values),
        )
        seen: set[str] = set()
        for group in fact_groups:
            shared = seen.intersection(group)
            if shared:
                raise ValueError(f"flag {sorted(shared)[0]!r} is listed for two different facts")
            seen.update(group)
        aliased = seen.intersection(self.aliases)
        if aliased:
            raise ValueError(f"fact flags must be canonical names, {sorted(aliased)[0]!r} is an alias")
        evidence_flags = {
            self.canonical(flag)
            for form in self.launch_forms
            if form.evidence is not None
            for flag in form.evidence.any_flags
        }
        if len(evidence_flags) > _MAX_EVIDENCE_FLAGS:
            raise ValueError(
                f"launch_forms: {len(evidence_flags)} evidence flags, "
                f"at most {_MAX_EVIDENCE_FLAGS} are supported"
            )
        return self

    def canonical(self, flag: str) -> str:
        """The canonical name of a flag as written in argv (``--max_model_len`` -> ``--max-model-len``)."""
        if self.underscore_is_dash and flag.startswith("--"):
            flag = flag.replace("_", "-")
        return self.aliases.get(flag, flag)


#: The signatures last serialised, with their JSON: signatures are frozen (tuples, frozensets and
#: mappings typed read-only), so the very same objects give the same JSON, and a new scanner of
#: the same engines (each ``scan()``, each command) does not serialise them again.
_last_json: tuple[tuple[Signature, ...], str] | None = None


def signatures_json(signatures: Iterable[Signature]) -> str:
    """The one serialised form the Rust matcher is compiled from (sets sorted for stable output)."""
    global _last_json
    signatures = tuple(signatures)
    last = _last_json
    if last is not None and len(last[0]) == len(signatures) and all(map(operator.is_, last[0], signatures)):
        return last[1]
    documents = []
    for signature in signatures:
        document = signature.model_dump(mode="json")
        for key in (
            "no_value_flags",
            "multi_value_flags",
            "exit_flags",
            "modeless_exit_flags",
            "secret_flags",
            "follower_flags",
        ):
            document[key] = sorted(document[key])
        documents.append(document)
    text = json.dumps(documents, separators=(",", ":"))
    _last_json = (signatures, text)
    return text
