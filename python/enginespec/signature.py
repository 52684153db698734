"""How an engine's server shows up in argv, declared as data.

Each engine module declares one :class:`Signature`. The Rust matcher is compiled from the JSON form
of all signatures and the pure-Python fallback interprets the very same objects, so there is one
source of truth per engine and a plugin gets the native speed for free.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# rust/matcher.rs MAX_FACT_FLAGS: the matcher keeps per-fact slots in fixed arrays.
_MAX_FACT_FLAGS = 8
_FLAG = re.compile(r"^-{1,2}[A-Za-z0-9][A-Za-z0-9_.-]*$")
_TOKEN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")


def _check_flags(values: Iterable[str], field: str) -> None:
    for value in values:
        if not _FLAG.match(value):
            raise ValueError(f"{field}: {value!r} is not a flag name (like --port or -m)")


class LaunchForm(BaseModel):
    """One way the server is started.

    ``executables`` are basenames of binaries or console scripts (``vllm``, ``llama-server``); a
    console script may also be run by an interpreter (``[python3, /venv/bin/vllm, ...]``).
    ``modules`` are ``python -m`` targets. ``subcommand`` tokens must follow the executable or module
    (``serve``). ``positional_model`` says whether the first positional argument is the model.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    executables: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    subcommand: tuple[str, ...] = ()
    positional_model: bool = False

    @model_validator(mode="after")
    def _check(self) -> LaunchForm:
        if not self.executables and not self.modules:
            raise ValueError("a launch form needs at least one executable or module")
        for name in (*self.executables, *self.modules, *self.subcommand):
            if not _TOKEN.match(name):
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
    #: fold every descendant process into the server's workers (vLLM/SGLang retitle their children
    #: `VLLM::EngineCore`, `sglang::scheduler_TP0`; forked children may even keep the server's argv).
    fold_workers: bool = False
    #: flags whose value is a secret (``--api-key``): redacted in every output, as is the value of
    #: any flag whose name says secret (``--*-token``, ``--*-key``, ``--password``).
    secret_flags: frozenset[str] = frozenset()
    #: argparse's ``allow_abbrev``: a unique prefix of a long flag is that flag (``--api-ke``).
    abbreviations: bool = False
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
        ):
            _check_flags(getattr(self, field), field)
        if self.served_name_separator == "":
            raise ValueError("served_name_separator must be None or non-empty")
        fact_groups = (self.model_flags, self.served_name_flags, self.host_flags, self.port_flags)
        seen: set[str] = set()
        for group in fact_groups:
            shared = seen.intersection(group)
            if shared:
                raise ValueError(f"flag {sorted(shared)[0]!r} is listed for two different facts")
            seen.update(group)
        aliased = seen.intersection(self.aliases)
        if aliased:
            raise ValueError(f"fact flags must be canonical names, {sorted(aliased)[0]!r} is an alias")
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
        for key in ("no_value_flags", "multi_value_flags", "exit_flags", "secret_flags"):
            document[key] = sorted(document[key])
        documents.append(document)
    return json.dumps(documents, separators=(",", ":"))
