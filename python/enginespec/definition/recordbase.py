"""The base of an engine definition's records: frozen, and strict about the fields they take
(a misspelt field in an engine's file is an error, never silently ignored)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


#: Which of a server's keys a request needs: ``api`` (every route takes it) or ``admin`` (the
#: routes that change what it serves, where the engine has a key of its own for them).
KeyRole = Literal["api", "admin"]
