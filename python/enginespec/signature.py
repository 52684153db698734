"""How an engine's server shows up in argv, declared as data.

Each engine module declares one :class:`Signature`. The Rust matcher is compiled from the JSON form
of all signatures and the pure-Python fallback interprets the very same objects, so there is one
source of truth per engine and a plugin gets the native speed for free.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# rust/matcher.rs MAX_FACT_FLAGS: the matcher keeps per-fact slots in fixed arrays.
_MAX_FACT_FLAGS = 8
# rust/matcher.rs MAX_EVIDENCE_FLAGS: evidence flags are bits of one word per engine.
_MAX_EVIDENCE_FLAGS = 64
_FLAG = re.compile(r"-{1,2}[A-Za-z0-9][A-Za-z0-9_.-]*", re.ASCII)
_TOKEN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*", re.ASCII)


def _check_flags(values: Iterable[str], field: str) -> None:
    for value in values:
        if not _FLAG.fullmatch(value):
            raise ValueError(f"{field}: {value!r} is not a flag name (like --port or -m)")


#: What a process is to its engine: ``server`` serves the HTTP API; ``runner`` is a per-model child
#: of a supervising server; ``follower`` is a multi-node or data-parallel worker that serves no
#: HTTP API (vLLM ``--headless``, SGLang ``--node-rank 1``).
Role = Literal["server", "runner", "follower"]


class Evidence(BaseModel):
    """What argv must show, besides the launch form, before a process counts as this engine: for an
    executable name too common to trust alone (pre-rename llama.cpp builds called their server
    ``server``). Every condition given must hold.

    ``model_suffixes``: the model argv names ends with one of these (ASCII case ignored; ``.gguf``).
    ``any_flags``: at least one of these flags (any spelling the engine accepts) is given.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_suffixes: tuple[str, ...] = ()
    any_flags: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _check(self) -> Evidence:
        if not self.model_suffixes and not self.any_flags:
            raise ValueError("evidence needs model_suffixes or any_flags")
        for suffix in self.model_suffixes:
            if not suffix.isascii() or not suffix.isprintable() or not suffix:
                raise ValueError(f"evidence: model suffix {suffix!r} must be printable ASCII")
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
    ``evidence``, when given, must also be found in argv, else the form does not match.
    ``role`` is what a process of this form is (see :data:`Role`); the signature's follower flags
    make a ``server`` a ``follower``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    executables: tuple[str, ...] = ()
    executable_prefixes: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    subcommand: tuple[str, ...] = ()
    other_subcommands: tuple[str, ...] = ()
    positional_model: bool = False
    evidence: Evidence | None = None
    role: Role = "server"

    @model_validator(mode="after")
    def _check(self) -> LaunchForm:
        if not self.executables and not self.executable_prefixes and not self.modules:
            raise ValueError("a launch form needs at least one executable, executable prefix or module")
        names = (*self.executables, *self.executable_prefixes, *self.modules, *self.subcommand)
        for name in (*names, *self.other_subcommands):
            if not _TOKEN.fullmatch(name):
                raise ValueError(f"launch form token {name!r} must be a plain name")
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
    host_flags: tuple[str, ...] = Field(default=(), max_length=_MAX_FACT_FLAGS)
    port_flags: tuple[str, ...] = Field(default=(), max_length=_MAX_FACT_FLAGS)
    #: flags that take no value, so the token after them may be the positional model.
    no_value_flags: frozenset[str] = frozenset()
    #: prefixes of flags that take no value (argparse ``BooleanOptionalAction`` ``--no-x``).
    no_value_prefixes: tuple[str, ...] = ()
    #: flags that take one or more values (argparse ``nargs="+"``).
    multi_value_flags: frozenset[str] = frozenset()
    #: flags that make the program print and exit instead of serving (``--help``, ``--version``).
    exit_flags: frozenset[str] = frozenset()
    #: flags whose presence makes a server a follower that serves no HTTP API (vLLM ``--headless``).
    follower_flags: frozenset[str] = frozenset()
    #: flags giving a node rank, in priority order: a rank other than 0 (a decimal number, the last
    #: occurrence) makes a server a follower (SGLang ``--node-rank 1``); ``0`` or no rank leaves it.
    follower_rank_flags: tuple[str, ...] = Field(default=(), max_length=_MAX_FACT_FLAGS)
    #: fold every descendant process into the server's workers (vLLM/SGLang retitle their children
    #: `VLLM::EngineCore`, `sglang::scheduler_TP0`; forked children may even keep the server's argv).
    fold_workers: bool = False
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
        ):
            _check_flags(getattr(self, field), field)
        if self.served_name_separator == "":
            raise ValueError("served_name_separator must be None or non-empty")
        fact_groups = (
            self.model_flags,
            self.served_name_flags,
            self.host_flags,
            self.port_flags,
            self.follower_rank_flags,
            tuple(self.follower_flags),
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


def signatures_json(signatures: Iterable[Signature]) -> str:
    """The one serialised form the Rust matcher is compiled from (sets sorted for stable output)."""
    documents = []
    for signature in signatures:
        document = signature.model_dump(mode="json")
        for key in ("no_value_flags", "multi_value_flags", "exit_flags", "secret_flags", "follower_flags"):
            document[key] = sorted(document[key])
        documents.append(document)
    return json.dumps(documents, separators=(",", ":"))
