"""Forks of an engine that keep its executable's name (ik_llama.cpp's ``llama-server``): recognised
as the engine, and named where their argv tells them apart (``EngineProcess.fork``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class Fork(BaseModel):
    """A fork of the engine that keeps its programs: the options only its parser takes, and the
    directory a checkout of it has by default (its repository's name), where its binaries are
    built. Either in a process's argv names the fork; what a user names a directory is no proof,
    so a fork is shown, never relied on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=64)
    #: options the engine's own parser rejects (``-mla``), as ``-x`` or ``--x``, with or without
    #: ``=value``
    flags: tuple[Annotated[str, Field(pattern=r"^--?[A-Za-z0-9][A-Za-z0-9_-]*$")], ...] = ()
    #: directory names in the path of the fork's executable (``ik_llama.cpp``)
    directories: tuple[Annotated[str, Field(min_length=1, pattern=r"^[^/\x00]+$")], ...] = ()

    def seen_in(self, argv: Sequence[str], exe: str | None) -> bool:
        """Whether ``argv`` (the executable's path first) or ``exe`` shows this fork."""
        for arg in argv[1:]:
            if arg.partition("=")[0] in self.flags:
                return True
        paths = (argv[0] if argv else "", exe or "")
        return any(part in self.directories for path in paths for part in path.split("/")[:-1])


def fork_of(forks: Sequence[Fork], argv: Sequence[str], exe: str | None) -> str | None:
    """The name of the first of ``forks`` that ``argv`` or ``exe`` shows, or ``None``."""
    return next((fork.name for fork in forks if fork.seen_in(argv, exe)), None)
