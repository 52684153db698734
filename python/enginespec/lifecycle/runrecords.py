"""What ``enginespec run`` remembers of each run: one small JSON file per run name under the data
dir's ``runs/`` (``runs/NAME.json``), written whole (a temporary file renamed over the old one), so
``enginespec runs`` lists past runs with their outcome and ``stop``, ``logs`` and ``restart`` take
a run's name.

A record is read back as untrusted: a regular file (never through a symlink) of at most
:data:`MAX_RECORD_BYTES`, parsed within limits and validated; one that is not is skipped with the
reason. A pid in a record is never signalled on the record's word: it names an engine only while
the process with that pid still started at the recorded clock tick (and a scan finds it).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from enginespec._host.root import HOST_ROOT
from enginespec.errors import InvalidInputError
from enginespec.untrusted.documents import DocumentError, dumps, parse_json
from enginespec.untrusted.safewrite import replace_file

#: What a run's name may be (as Docker's container names): it is a file name, too.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", re.ASCII)
#: A record is a few hundred bytes; a larger file is not one of ours.
MAX_RECORD_BYTES = 64 * 1024
#: The most records ``runs`` reads (the newest first by modification time).
MAX_RECORDS = 1000

RunState = Literal["starting", "ready", "ended", "failed"]


class RunRecord(BaseModel):
    """One run of a recipe by ``enginespec run``: its name, the engine, the pids of the engine and
    of the ``run`` process that keeps its log (each with its start in clock ticks since boot: the
    identity a pid alone is not), where its log is kept, and how it went."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=NAME.pattern, max_length=128)
    recipe: str = Field(max_length=4096)
    engine: str = Field(max_length=128)
    instance_id: str = Field(max_length=256)
    pid: int = Field(ge=1, le=2**22)
    start_ticks: int = Field(ge=0)
    supervisor_pid: int = Field(ge=1, le=2**22)
    supervisor_start_ticks: int = Field(ge=0)
    log_dir: str = Field(max_length=4096)
    detached: bool = False
    #: wall-clock seconds
    started_at: float
    state: RunState = "starting"
    ended_at: float | None = None
    #: how it ended, in words (``ended 12 s after it was ready: signal 15 (SIGTERM)``)
    outcome: str | None = Field(default=None, max_length=4096)
    #: ``run``'s own exit status
    exit_status: int | None = None
    restarts: int = Field(default=0, ge=0)

    def engine_alive(self) -> bool:
        """Whether the recorded engine process still runs (its pid started when recorded)."""
        return _still(self.pid, self.start_ticks)

    def supervised(self) -> bool:
        """Whether the ``run`` that keeps this engine's log still runs."""
        return _still(self.supervisor_pid, self.supervisor_start_ticks)


def _still(pid: int, ticks: int) -> bool:
    found = HOST_ROOT.stat(pid)
    return found is not None and found.start_ticks == ticks and found.state != "Z"


def checked_name(name: str) -> str:
    """``name`` when it may name a run; :class:`InvalidInputError` naming it otherwise."""
    if not NAME.fullmatch(name):
        raise InvalidInputError(
            f"--name: {name!r} is not a run name (a letter or digit, then letters, digits, '_', '.' "
            "or '-', at most 128)"
        )
    return name


def runs_dir(data_dir: Path) -> Path:
    return data_dir / "runs"


def write(data_dir: Path, record: RunRecord) -> None:
    """Writes ``record`` whole (the old one replaced at once; 0600: argv-free, but the user's)."""
    path = runs_dir(data_dir) / f"{record.name}.json"
    data = dumps(record.model_dump(mode="json")).encode()
    replace_file(os.fspath(path), data, field="run record", mode=0o600, parents=True)


def read(path: Path) -> RunRecord | str:
    """The record in ``path``, or why it is not one."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as err:
        why = "a symlink" if err.errno == errno.ELOOP else err.strerror
        return f"{path}: not read: {why}"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_RECORD_BYTES:
            return f"{path}: not read: not a regular file of at most {MAX_RECORD_BYTES} bytes"
        data = os.read(fd, MAX_RECORD_BYTES + 1)
    finally:
        os.close(fd)
    try:
        record = RunRecord.model_validate(parse_json(data, max_bytes=MAX_RECORD_BYTES, where="record"))
    except (DocumentError, ValidationError) as err:
        first = str(err).splitlines()[0] if isinstance(err, DocumentError) else err.errors()[0]["msg"]
        return f"{path}: not a run record: {first}"
    if f"{record.name}.json" != path.name:
        return f"{path}: not a run record: it names the run {record.name!r}"
    return record


def records(data_dir: Path) -> tuple[list[RunRecord], list[str]]:
    """Every run recorded under ``data_dir``, newest first, and each file that is not a record."""
    folder = runs_dir(data_dir)
    try:
        names = [entry for entry in os.scandir(folder) if entry.name.endswith(".json")]
    except FileNotFoundError:
        return [], []
    except OSError as err:
        return [], [f"{folder}: not read: {err.strerror}"]
    names.sort(key=lambda entry: entry.stat(follow_symlinks=False).st_mtime, reverse=True)
    found: list[RunRecord] = []
    problems: list[str] = []
    for entry in names[:MAX_RECORDS]:
        record = read(Path(entry.path))
        if isinstance(record, str):
            problems.append(record)
        else:
            found.append(record)
    return sorted(found, key=lambda r: r.started_at, reverse=True), problems


def find(data_dir: Path, name: str) -> RunRecord | None:
    """The record of the run ``name``, or ``None`` (no such run, or no readable record)."""
    if not NAME.fullmatch(name):
        return None
    record = read(runs_dir(data_dir) / f"{name}.json")
    return None if isinstance(record, str) else record
