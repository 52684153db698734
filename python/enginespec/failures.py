"""Why an engine failed to start: the failure classes, the vocabulary an engine declares as data
(:class:`Failures`, beside its argv signature), and the pure matcher that turns a log into a
:class:`Failure` with the lines that show the cause, verbatim.

The matcher is engine-agnostic: an engine's patterns (its own messages first, then those of the
libraries it is built on, see ``enginespec.engines._libraries``) are tried line by line; the first
pattern, in the engine's order, that some line matches decides the class, and every line that a
pattern of that class matches is a cause line. Wrapper lines ("Engine core initialization failed.
See root cause above.") are never a cause. Nothing matched: a Python exception or an error line
that is no wrapper makes the failure ``other``; no such line leaves ``killed`` (a signal; the
cgroup's OOM kill makes it ``cpu_oom``) or ``exited``.
"""

from __future__ import annotations

import functools
import re
import signal as signals
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: A class a log pattern can name.
PatternKind = Literal[
    "bad_flag",
    "port_in_use",
    "gpu_oom",
    "kv_cache_too_small",
    "cpu_oom",
    "model_not_found",
    "gated_or_auth",
    "trust_remote_code",
    "unsupported_architecture",
    "driver_missing",
    "dependency_error",
    "corrupt_model",
    "other",
]
#: Every failure class: the pattern classes, ``killed`` (ended by a signal, nothing in the log
#: says why) and ``exited`` (an exit status, nothing recognised).
FailureKind = Literal[PatternKind, "killed", "exited"]

#: At most this much of a log's end is read (a start-up failure is at its end).
MAX_LOG_CHARS = 2_000_000
#: Lines longer than this are matched on their first part only.
MAX_MATCH_CHARS = 4096
#: At most this many cause lines are kept (the first ones: the earliest statement of the cause).
MAX_CAUSE_LINES = 6

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
# A Python exception line (`ValueError: ...`, `torch.OutOfMemoryError: ...`,
# `huggingface_hub.errors.HFValidationError: ...`), possibly after a log prefix.
_EXCEPTION = re.compile(r"(?:^|[\s|:)\]])(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Interrupt): \S")
# An error-level log line (`ERROR ...`, `level=ERROR`, `error: ...`, `[E] ...`, `panic: `).
_ERROR_LINE = re.compile(r"\bERROR\b|level=ERROR|^\s*(?:error|Error|panic|fatal|FATAL)\b[:\s]")
# Log noise that names an error but is none: a traceback header, a `raise` source line.
_NOT_CAUSE = re.compile(r"Traceback \(most recent call last\)|^\s*raise\b|^\s*File \"")
_TRACEBACK_FILE = re.compile(r"^\s*File \".*\", line \d+")

#: Lines no engine's cause is on: generic wrappers of Python servers (a start that failed for a
#: reason logged above them).
COMMON_WRAPPERS = (
    r"See (?:the )?root cause above",
    r"Application startup failed",
    r"failed to start\b",
    r"initialization failed\.?\s*$",
)


class FailurePattern(BaseModel):
    """One message of an engine or of a library it uses: a regular expression searched in each
    log line, the class it shows, and the hint for it.

    Named groups are the figures parsed from the line (``(?P<free_gib>[\\d.]+)``: the unit is in
    the name); ``hint`` may name them (``--max-model-len <= {estimated_max_model_len}``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: PatternKind
    pattern: str = Field(min_length=1)
    hint: str | None = None

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            compiled = re.compile(value)
        except re.error as error:
            raise ValueError(f"pattern {value!r} is no regular expression: {error}") from None
        if compiled.search(""):
            raise ValueError(f"pattern {value!r} matches an empty line")
        return value


class Failures(BaseModel):
    """An engine's failure vocabulary: its patterns in priority order (the first that matches
    decides the class) and the wrapper lines that are never the cause."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    patterns: tuple[FailurePattern, ...] = ()
    wrappers: tuple[str, ...] = ()

    def __add__(self, other: Failures) -> Failures:
        return Failures(patterns=self.patterns + other.patterns, wrappers=self.wrappers + other.wrappers)


#: A figure of a cause line: a number, or text where the figure is no number (a host, a hex
#: magic: groups named ``*_hex`` stay text).
Number = int | float | str


class Failure(BaseModel):
    """Why an engine failed: the class, the log lines that show it (verbatim, ANSI colours
    removed), figures parsed from those lines (``free_gib``, ``max_model_len``, ``port``), what
    to change, and how the process ended."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: str
    kind: FailureKind
    cause_lines: tuple[str, ...] = ()
    numbers: Mapping[str, Number] = Field(default_factory=dict)
    hint: str | None = None
    exit_code: int | None = None
    signal: int | None = None

    def summary(self) -> str:
        """One line: the class and how the process ended (``gpu_oom (exit status 1)``)."""
        return f"{self.kind} ({ended(self.exit_code, self.signal)})"


def ended(exit_code: int | None, signal: int | None) -> str:
    """How a process ended, in words: ``exit status 1``, ``signal 9 (SIGKILL)``."""
    if signal is not None:
        try:
            name = signals.Signals(signal).name
        except ValueError:
            return f"signal {signal}"
        return f"signal {signal} ({name})"
    if exit_code is not None:
        return f"exit status {exit_code}"
    return "still running"


#: Said when a pattern has no hint of its own.
_KIND_HINTS: Mapping[FailureKind, str] = {
    "bad_flag": "remove or correct the flag the engine rejects (see its --help)",
    "port_in_use": "choose another port, or stop the process that holds it",
    "gpu_oom": "use a smaller model or quantization, a shorter context, or free the GPU",
    "kv_cache_too_small": "shorten the maximum context, or give the KV cache more memory",
    "cpu_oom": "the host ran out of memory: a smaller model, fewer offloaded layers, or more RAM",
    "model_not_found": "check the model path or repository id",
    "gated_or_auth": "accept the model's licence on the Hub and pass a token (HF_TOKEN)",
    "trust_remote_code": "the model ships its own code: start with trust_remote_code if you trust it",
    "unsupported_architecture": "this engine version does not know the model's architecture: upgrade",
    "driver_missing": "no usable GPU driver: check the driver, the devices visible to the engine",
    "dependency_error": "the engine's installation is broken: reinstall it or fix the named package",
    "corrupt_model": "the model file is damaged or incomplete: download it again",
    "killed": "the process was killed by a signal; see the end of its log",
}


@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def clean_line(line: str) -> str:
    """A log line as matched and shown: ANSI escapes and a trailing carriage return removed."""
    return _ANSI.sub("", line).rstrip("\r")


def _number(name: str, text: str) -> Number | None:
    if not text:
        return None
    if name.endswith("_hex"):
        return text
    try:
        return int(text) if re.fullmatch(r"[+-]?\d+", text) else float(text)
    except ValueError:
        return text


def _hint(pattern: FailurePattern, numbers: Mapping[str, Number]) -> str | None:
    if pattern.hint is None:
        return None
    try:
        return pattern.hint.format_map(
            {k: f"{v:g}" if isinstance(v, float) else v for k, v in numbers.items()}
        )
    except (KeyError, IndexError, ValueError):
        return None


def _is_source(lines: Sequence[str], index: int) -> bool:
    """Whether a line is source code a Python traceback quotes (the line after ``File "...",
    line N``, or a ``raise``): it names an error without stating it."""
    if _NOT_CAUSE.search(lines[index]):
        return True
    follows_file = index > 0 and _TRACEBACK_FILE.search(lines[index - 1]) is not None
    return follows_file and lines[index][:1].isspace()


def _fallback_cause(lines: Sequence[str], wrappers: Sequence[re.Pattern[str]]) -> str | None:
    """The most specific error statement when no pattern matched: the last Python exception line
    that is no wrapper, else the last error-level line that is none."""
    candidates = [
        line
        for index, line in enumerate(lines)
        if line.strip() and not _is_source(lines, index) and not any(w.search(line) for w in wrappers)
    ]
    for finder in (_EXCEPTION, _ERROR_LINE):
        found = [line for line in candidates if finder.search(line[:MAX_MATCH_CHARS])]
        if found:
            return found[-1]
    return None


def match_failure(
    failures: Failures,
    engine: str,
    log_text: str,
    exit_code: int | None = None,
    signal: int | None = None,
    *,
    oom_kill: bool = False,
) -> Failure:
    """The failure a log shows, by ``failures`` (see the module's docstring). ``oom_kill``: the
    kernel's OOM killer killed a process of the engine's cgroup (``memory.events``)."""
    lines = [clean_line(line) for line in log_text[-MAX_LOG_CHARS:].split("\n")]
    wrappers = [_compiled(w) for w in (*failures.wrappers, *COMMON_WRAPPERS)]
    ending = Failure(engine=engine, kind="exited", exit_code=exit_code, signal=signal)
    compiled = [_compiled(p.pattern) for p in failures.patterns]
    # pattern index -> (line index, match) of the first line it matches
    first: dict[int, tuple[int, re.Match[str]]] = {}
    for line_index, line in enumerate(lines):
        if _is_source(lines, line_index):
            continue
        head = line[:MAX_MATCH_CHARS]
        for pattern_index, regex in enumerate(compiled):
            if pattern_index not in first:
                found = regex.search(head)
                if found is not None:
                    first[pattern_index] = (line_index, found)
    if first:
        kind = failures.patterns[min(first)].kind
        chosen = sorted(
            (line_index, pattern_index, found)
            for pattern_index, (line_index, found) in first.items()
            if failures.patterns[pattern_index].kind == kind
        )
        causes: dict[str, None] = {}
        numbers: dict[str, Number] = {}
        for line_index, _pattern_index, found in chosen:
            if len(causes) < MAX_CAUSE_LINES:
                causes[lines[line_index]] = None
            for name, text in found.groupdict().items():
                value = None if text is None else _number(name, text)
                if value is not None:
                    numbers.setdefault(name, value)
        hint = None
        for pattern_index in sorted(p for _l, p, _m in chosen):
            hint = _hint(failures.patterns[pattern_index], numbers)
            if hint is not None:
                break
        update = {"cause_lines": tuple(causes), "numbers": numbers, "hint": hint or _KIND_HINTS.get(kind)}
        return ending.model_copy(update={"kind": kind, **update})
    if oom_kill:
        return ending.model_copy(update={"kind": "cpu_oom", "hint": _KIND_HINTS["cpu_oom"]})
    if signal is not None:
        return ending.model_copy(update={"kind": "killed", "hint": _KIND_HINTS["killed"]})
    cause = _fallback_cause(lines, wrappers)
    if cause is not None:
        return ending.model_copy(update={"kind": "other", "cause_lines": (cause,)})
    return ending
