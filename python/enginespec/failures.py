"""Why an engine failed to start: the failure classes, the vocabulary an engine declares as data
(:class:`Failures`, beside its argv signature), and the pure matcher that turns a log into a
:class:`Failure` with the lines that show the cause, verbatim.

The matcher is engine-agnostic: an engine's patterns (its own messages first, then those of the
layers it is built on, see ``enginespec.engines._libraries``) are tried line by line. The
precedence, a cause before its consequence:

1. the first *cause* pattern, in the engine's order, that some line matches decides the class;
   the layers are ordered so that a cause comes before what it causes (a missing driver library
   before the import error it raises, an allocation that failed before the load that failed);
   every line that a cause pattern of that class matches is a cause line;
2. *context* patterns of that class add the figures of other lines (vLLM's ``# GPU blocks: 0``
   before its KV-cache refusal) but are no cause and never decide;
3. wrapper lines ("Engine core initialization failed. See root cause above.", a warning the
   engine survives) are never a cause, of a pattern or of the fallback;
4. no cause matched: the cgroup's OOM kill makes it ``cpu_oom``; an *ending* pattern (a line
   that says the process was killed: ``signal: killed``, ``Segmentation fault (core dumped)``)
   or a signal ending the process makes it ``killed``; else the root
   exception of the last Python traceback chain (the one "the above exception" points back at,
   not the exceptions raised while handling it) or the last error line that is no wrapper makes
   it ``other``; else ``exited`` (the exit status says nothing of why).

The figures a cause line states are typed and named the same way for every engine
(:class:`FailureFigures`: a bind failure's ``port`` and ``address``, memory as :class:`Memory`
with the unit the log used, the KV cache's blocks, tokens and sizes, a crash's ``signal``, the
``missing`` library or module, the rejected ``flag``). A pattern's named groups are those fields
(or ``<field>_<unit>`` for a bare number, ``free_gib``); ``numbers`` keeps every group that is a
number (or hex text) as parsed, as before.
"""

from __future__ import annotations

import functools
import re
import signal as signals
from collections.abc import Mapping, Sequence, Set
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

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
# (the bare `Exception: ...` too: raised as is, SGLang's `Capture cuda graph failed: ...`)
_EXCEPTION = re.compile(
    r"(?:^|[\s|:)\]])(?:[A-Za-z_][\w]*\.)*(?:[A-Z]\w*(?:Error|Exception|Interrupt)|Exception): \S"
)
# An error-level log line (`ERROR ...`, `level=ERROR`, `error: ...`, `[E] ...`, `panic: `).
_ERROR_LINE = re.compile(r"\bERROR\b|level=ERROR|^\s*(?:error|Error|panic|fatal|FATAL)\b[:\s]")
# Log noise that names an error but is none: a traceback header, a `raise` source line.
# (rich's tracebacks draw a box: `│   File "...", line 308, in __init__ │`, `│     raise ValueError(`)
# (a `File "X" not found` statement is no traceback line: those name a line number)
# (a line whose `Traceback (most recent call last):` follows a statement, `X: message, Traceback`,
# states it: vLLM's worker `Exception in worker ... init_device: NCCL error: ..., Traceback ...`)
_NOT_CAUSE = re.compile(
    r"^(?:(?!: \S).)*Traceback \(most recent call last\)|^[\s│]*raise\b|^[\s│]*File \"[^\"]*\", line \d"
)
_TRACEBACK_FILE = re.compile(r"^[\s│]*File \".*\", line \d+")
# What a log puts before a traceback's lines: a compose service (`vllm-1  | `), a worker
# (`(VllmWorkerProcess pid=195297) `, `[rank0]: `), a logger's level, date and place (vLLM's
# `ERROR 11-18 18:07:28 engine.py:366] `, `ERROR 03-02 19:49:43 [multiproc_worker_utils.py:242] `),
# journald's short form (`nov 02 10:34:04 host ollama[227009]: `).
_LOG_PREFIX = re.compile(
    r"^(?:[A-Za-z]{3} [ \d]\d \d\d:\d\d:\d\d \S+ [\w.@-]+\[\d+\]: )?"
    r"(?:[\w.-]+\s+\|\s)?(?:\([^)]*\)\s*)?(?:\[rank\d+\]:\s?)?"
    r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+\[?[\w.]+:\d+\]\s?)?"
)

#: Lines no engine's cause is on: generic wrappers of Python servers (a start that failed for a
#: reason logged above them).
COMMON_WRAPPERS = (
    r"See (?:the )?root cause above",
    r"Application startup failed",
    # (not where the cause follows on the line: Docker's `failed to start container X: ... bind:
    # address already in use`)
    r"failed to start\b(?!.*: \S)",
    r"initialization failed\.?\s*$",
)


class ArgvHint(BaseModel):
    """A hint that replaces a pattern's own when the engine's argv has ``flag`` (``--flag`` or
    ``--flag=value``): the remedy depends on how the engine was started."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    flag: str = Field(min_length=2, pattern=r"^-")
    hint: str = Field(min_length=1)


class FailurePattern(BaseModel):
    """One message of an engine or of a layer under it: a regular expression searched in each
    log line, the class it shows, and the hint for it.

    Named groups are the figures parsed from the line, by the names of :class:`FailureFigures`
    (``(?P<free>[\\d.]+ GiB)``, or ``(?P<free_gib>[\\d.]+)`` with the unit in the name); ``hint``
    may name them (``--max-model-len <= {max_model_len_fits}``). ``role="context"``: the line adds
    figures to a failure of this class but is no cause and decides nothing. ``role="ending"``: the
    line states how a process ended (``signal: killed``), the consequence of whatever caused it:
    with no cause recognised it makes the failure ``killed`` (its ``kind`` is ``other``, unused)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: PatternKind
    pattern: str = Field(min_length=1)
    hint: str | None = None
    role: Literal["cause", "context", "ending"] = "cause"
    argv_hints: tuple[ArgvHint, ...] = ()

    @model_validator(mode="after")
    def _ending_has_no_class(self) -> FailurePattern:
        if self.role == "ending" and self.kind != "other":
            raise ValueError(f"kind {self.kind!r}: an ending pattern states no class, give kind 'other'")
        return self

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
        """Both vocabularies, this one's first; a pattern or wrapper both hold is kept once, where
        it comes first (a layer two composites share)."""
        patterns = tuple(dict.fromkeys(self.patterns + other.patterns))
        return Failures(patterns=patterns, wrappers=tuple(dict.fromkeys(self.wrappers + other.wrappers)))


#: A figure of a cause line: a number, or text where the figure is no number (a host, a hex
#: magic: groups named ``*_hex`` stay text).
Number = int | float | str


MemoryUnit = Literal["B", "KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB", "TB"]
_UNIT_BYTES: Mapping[str, int] = {
    "B": 1,
    "KiB": 1 << 10,
    "MiB": 1 << 20,
    "GiB": 1 << 30,
    "TiB": 1 << 40,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
}


class Memory(BaseModel):
    """An amount of memory as the log states it: the value and its unit (``448.0 MiB``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    value: float = Field(ge=0, allow_inf_nan=False)
    unit: MemoryUnit

    @property
    def bytes(self) -> int:
        return round(self.value * _UNIT_BYTES[self.unit])

    def __str__(self) -> str:
        return f"{self.value:g} {self.unit}"


class FailureFigures(BaseModel):
    """The figures a failure's cause lines state, named the same way for every engine; a figure
    the log does not state is ``None``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: a bind failure's port and address (``0.0.0.0``, ``::1``, a host name)
    port: int | None = Field(default=None, ge=0, le=65535)
    address: str | None = Field(default=None, max_length=255)
    #: the GPU (or other device) the failure names, as the log numbers it
    device: str | None = Field(default=None, max_length=64)
    #: an allocation: what was asked for, what was free, the device's or host's total
    requested: Memory | None = None
    free: Memory | None = None
    total: Memory | None = None
    #: the KV cache: its blocks and tokens, the memory one request needs and the memory left
    kv_cache_blocks: int | None = Field(default=None, ge=0)
    kv_cache_tokens: int | None = Field(default=None, ge=0)
    kv_cache_needed: Memory | None = None
    kv_cache_available: Memory | None = None
    #: the context length asked for and the longest that fits
    max_model_len: int | None = Field(default=None, ge=0)
    max_model_len_fits: int | None = Field(default=None, ge=0)
    #: the signal a crash states, by name (``SIGSEGV``)
    signal: str | None = Field(default=None, pattern=r"^SIG[A-Z0-9]+$")
    #: the library or module that is missing (``libcuda.so.1``, ``flashinfer``)
    missing: str | None = Field(default=None, max_length=255)
    #: the flag or argument a parser rejected
    flag: str | None = Field(default=None, max_length=255)


class Failure(BaseModel):
    """Why an engine failed: the class, the log lines that show it (verbatim, ANSI colours
    removed), the figures they state (``figures``: typed; ``numbers``: every named group as
    parsed, ``free_gib``, ``max_model_len``, ``port``), what to change, and how the process
    ended."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: str
    kind: FailureKind
    cause_lines: tuple[str, ...] = ()
    numbers: Mapping[str, Number] = Field(default_factory=dict)
    figures: FailureFigures = Field(default_factory=FailureFigures)
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


_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+")


def _number(name: str, text: str) -> Number | None:
    if not text:
        return None
    if name.endswith("_hex"):
        return text
    if _THOUSANDS.fullmatch(text):
        # vLLM: "GPU KV cache size: 175,856 tokens"
        text = text.replace(",", "")
    try:
        return int(text) if re.fullmatch(r"[+-]?\d+", text) else float(text)
    except ValueError:
        return text


#: Group names that name a figure another way (the engines' older names).
_FIGURE_ALIASES: Mapping[str, str] = {
    "alloc": "requested",
    "required": "requested",
    "desired": "requested",
    "available": "free",
    "kv_needed": "kv_cache_needed",
    "kv_available": "kv_cache_available",
    "kv_tokens": "kv_cache_tokens",
    "estimated_max_model_len": "max_model_len_fits",
    "host": "address",
    # a second place a pattern names the missing library (a group name is used once)
    "library": "missing",
}
_UNIT_SUFFIXES: Mapping[str, MemoryUnit] = {"bytes": "B", "kib": "KiB", "mib": "MiB", "gib": "GiB"}
_MEMORY_FIELDS = frozenset({"requested", "free", "total", "kv_cache_needed", "kv_cache_available"})
_INT_FIELDS = frozenset({"port", "kv_cache_blocks", "kv_cache_tokens", "max_model_len", "max_model_len_fits"})
_MEMORY_TEXT = re.compile(r"(\d[\d,]*(?:\.\d+)?)\s*(bytes?|[KMGT]i?B|B)")
#: How logs name a signal: Go's os/exec ("signal: segmentation fault"), a shell ("Killed",
#: "Aborted (core dumped)"), Windows' NTSTATUS of a crash (signed, unsigned, hex): an illegal
#: instruction, an access violation, and the fail-fast status (STATUS_STACK_BUFFER_OVERRUN) that
#: abort() ends a process with under the Microsoft C runtime.
_SIGNAL_WORDS: Mapping[str, str] = {
    "killed": "SIGKILL",
    "segmentation fault": "SIGSEGV",
    "aborted": "SIGABRT",
    "abort": "SIGABRT",
    "abort trap": "SIGABRT",
    "illegal instruction": "SIGILL",
    "illegal hardware instruction": "SIGILL",
    "bus error": "SIGBUS",
    "floating point exception": "SIGFPE",
    "terminated": "SIGTERM",
    "interrupt": "SIGINT",
    "hangup": "SIGHUP",
    "access violation": "SIGSEGV",
    "-1073741795": "SIGILL",
    "3221225501": "SIGILL",
    "0xc000001d": "SIGILL",
    "-1073741819": "SIGSEGV",
    "3221225477": "SIGSEGV",
    "0xc0000005": "SIGSEGV",
    "-1073740791": "SIGABRT",
    "3221226505": "SIGABRT",
    "0xc0000409": "SIGABRT",
}


def _signal_name(text: str) -> str | None:
    word = text.strip().lower()
    if word in _SIGNAL_WORDS:
        return _SIGNAL_WORDS[word]
    if word.isdigit():
        try:
            return signals.Signals(int(word)).name
        except ValueError:
            return None
    return word.upper() if re.fullmatch(r"sig[a-z0-9]+", word) else None


def _exit_signal(text: str) -> str | None:
    """The signal an exit code of 128 + n stands for (a shell's convention)."""
    try:
        return signals.Signals(int(text) - 128).name
    except ValueError:
        return None


def _memory(text: str, unit: MemoryUnit | None = None) -> dict[str, object] | None:
    if unit is not None:
        return {"value": float(text.replace(",", "")), "unit": unit}
    found = _MEMORY_TEXT.fullmatch(text.strip())
    if found is None:
        return None
    stated = found[2]
    return {"value": float(found[1].replace(",", "")), "unit": "B" if stated.startswith("byte") else stated}


def _figure(name: str, text: str) -> tuple[str, object] | None:
    """The figure a named group gives: ``(field, value)``, ``None`` for a group that is none."""
    suffixed = re.fullmatch(r"(.+)_(bytes|kib|mib|gib)", name)
    if suffixed is not None:
        field = _FIGURE_ALIASES.get(suffixed[1], suffixed[1])
        if field not in _MEMORY_FIELDS:
            return None
        memory = _memory(text, _UNIT_SUFFIXES[suffixed[2]])
        return (field, memory) if memory is not None else None
    if name.startswith("signal_"):
        # `signal_exit_code`: a shell's 128 + n; any other `signal_*`: the signal in words
        named = _exit_signal(text) if name == "signal_exit_code" else _signal_name(text)
        return ("signal", named) if named is not None else None
    field = _FIGURE_ALIASES.get(name, name)
    if field not in FailureFigures.model_fields:
        return None
    value: object
    if field in _MEMORY_FIELDS:
        value = _memory(text)
    elif field in _INT_FIELDS:
        value = int(text.replace(",", ""))
    elif field == "signal":
        value = _signal_name(text)
    elif field == "address":
        value = text.strip("[]")
    else:
        value = text.strip()
    return (field, value) if value not in (None, "") else None


def _figures(groups: Sequence[tuple[str, str]]) -> FailureFigures:
    """The typed figures of the named groups, in line order (the first statement of a figure
    wins); a value that is no valid figure (a port of 99999, an overflowing size) is left out."""
    valid: dict[str, object] = {}
    for name, text in groups:
        try:
            item = _figure(name, text)
            if item is None or item[0] in valid:
                continue
            FailureFigures.model_validate({item[0]: item[1]})
        except (ValidationError, ValueError, OverflowError):
            continue
        valid[item[0]] = item[1]
    return FailureFigures.model_validate(valid)


def _has_flag(argv: Sequence[str], flag: str) -> bool:
    return any(arg == flag or arg.startswith(flag + "=") for arg in argv)


def _hint(pattern: FailurePattern, fields: Mapping[str, object], argv: Sequence[str]) -> str | None:
    """The pattern's hint for this argv (an :class:`ArgvHint` whose flag the argv has, else its
    own) with the figures filled in; ``None`` when it names a figure the log did not state."""
    texts = [h.hint for h in pattern.argv_hints if _has_flag(argv, h.flag)]
    if pattern.hint is not None:
        texts.append(pattern.hint)
    for text in texts:
        try:
            return text.format_map(fields)
        except (KeyError, IndexError, ValueError, AttributeError):
            continue
    return None


def _hint_fields(numbers: Mapping[str, Number], figures: FailureFigures) -> dict[str, object]:
    """What a hint may name: the numbers, and the figures; a number that names a figure the
    figures left out (a port of 99999999) is left out too, so no hint repeats it."""
    fields: dict[str, object] = {}
    for name, number in numbers.items():
        field = _FIGURE_ALIASES.get(name, name)
        if field in FailureFigures.model_fields and getattr(figures, field) is None:
            continue
        fields[name] = f"{number:g}" if isinstance(number, float) else number
    for name, value in figures.model_dump(exclude_none=True).items():
        figure = getattr(figures, name)
        fields[name] = str(figure) if isinstance(figure, Memory) else value
    return fields


def _unprefixed(line: str) -> str:
    found = _LOG_PREFIX.match(line)
    return line[found.end() :] if found is not None else line


def _is_source(lines: Sequence[str], index: int) -> bool:
    """Whether a line is source code a Python traceback quotes (the line after ``File "...",
    line N``, or a ``raise``), also behind a log prefix: it names an error without stating it."""
    line = _unprefixed(lines[index])
    if _NOT_CAUSE.search(line):
        return True
    follows_file = index > 0 and _TRACEBACK_FILE.search(_unprefixed(lines[index - 1])) is not None
    return follows_file and line.lstrip("│")[:1].isspace()


# "The above exception was the direct cause of the following exception:" / "During handling of
# the above exception, another exception occurred:" (CPython's traceback module): the exception
# before it is the cause of the ones after.
_CHAIN = re.compile(
    r"The above exception was the direct cause of the following exception|"
    r"During handling of the above exception"
)
# "Exception ignored in: <function Llama.__del__ ...>": an exception of a destructor, after the end.
_IGNORED = re.compile(r"Exception ignored in\b")
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)")


def _in_ignored_block(lines: Sequence[str], index: int) -> bool:
    for back in range(index - 1, max(index - 200, 0) - 1, -1):
        if _TRACEBACK.search(lines[back]):
            return back > 0 and _IGNORED.search(lines[back - 1]) is not None
        if _IGNORED.search(lines[back]):
            return True
    return False


def _fallback_cause(
    lines: Sequence[str], wrappers: Sequence[re.Pattern[str]], skip: Set[int] = frozenset()
) -> str | None:
    """The most specific error statement when no pattern matched: the root exception of the
    last traceback chain that is no wrapper, else the last error-level line that is none
    (``skip``: the indices of lines that are no candidates)."""
    candidates = [
        (index, line)
        for index, line in enumerate(lines)
        if index not in skip
        and line.strip()
        and not _is_source(lines, index)
        and not any(w.search(line[:MAX_MATCH_CHARS]) for w in wrappers)
    ]
    exceptions = [
        (index, line)
        for index, line in candidates
        if _EXCEPTION.search(line[:MAX_MATCH_CHARS]) and not _in_ignored_block(lines, index)
    ]
    if exceptions:
        root_index, root = exceptions[-1]
        for index, line in reversed(exceptions[:-1]):
            if not any(_CHAIN.search(between) for between in lines[index + 1 : root_index]):
                break
            root_index, root = index, line
        return root
    # the level in a logger's prefix counts, and a statement behind a prefix (journald's) too
    errors = [
        line
        for _index, line in candidates
        if _ERROR_LINE.search(line[:MAX_MATCH_CHARS])
        or _ERROR_LINE.search(_unprefixed(line)[:MAX_MATCH_CHARS])
    ]
    return errors[-1] if errors else None


def _ending_signals(
    failures: Failures, first: Mapping[int, tuple[int, re.Match[str]]]
) -> list[tuple[str, str]]:
    """The signal groups of the ending lines, in line order: the signal figure of a failure whose
    class a cause decided."""
    endings = sorted(
        (line, index) for index, (line, _found) in first.items() if failures.patterns[index].role == "ending"
    )
    return [
        (name, text)
        for _line, index in endings
        for name, text in first[index][1].groupdict().items()
        if text is not None and (name == "signal" or name.startswith("signal_"))
    ]


def match_failure(
    failures: Failures,
    engine: str,
    log_text: str,
    exit_code: int | None = None,
    signal: int | None = None,
    *,
    oom_kill: bool = False,
    argv: Sequence[str] = (),
) -> Failure:
    """The failure a log shows, by ``failures`` (see the module's docstring). ``oom_kill``: the
    kernel's OOM killer killed a process of the engine's cgroup (``memory.events``); ``argv``:
    the engine's argv, for the hints that depend on it."""
    lines = [clean_line(line) for line in log_text[-MAX_LOG_CHARS:].split("\n")]
    wrappers = [_compiled(w) for w in (*failures.wrappers, *COMMON_WRAPPERS)]
    ended_as = Failure(engine=engine, kind="exited", exit_code=exit_code, signal=signal)
    compiled = [_compiled(p.pattern) for p in failures.patterns]
    # pattern index -> (line index, match) of the first line it matches
    first: dict[int, tuple[int, re.Match[str]]] = {}
    for line_index, line in enumerate(lines):
        head = line[:MAX_MATCH_CHARS]
        if _is_source(lines, line_index) or any(w.search(head) for w in wrappers):
            continue
        for pattern_index, regex in enumerate(compiled):
            if pattern_index not in first:
                found = regex.search(head)
                if found is not None:
                    first[pattern_index] = (line_index, found)
    causes_found = [i for i in first if failures.patterns[i].role == "cause"]
    endings = [i for i in first if failures.patterns[i].role == "ending"]
    # an exception or error line that is no ending's statement: a cause the vocabulary lacks
    # beats the statement of its consequence (SGLang kills itself after a failed warm-up)
    fallback = _fallback_cause(lines, wrappers, skip={first[i][0] for i in endings})
    ending = bool(endings) and not oom_kill and (signal is not None or fallback is None)
    if causes_found or ending:
        role = "cause" if causes_found else "ending"
        kind: FailureKind = failures.patterns[min(causes_found)].kind if causes_found else "killed"
        chosen = sorted(
            (line_index, pattern_index, found)
            for pattern_index, (line_index, found) in first.items()
            if (role == "cause") == (failures.patterns[pattern_index].role != "ending")
            and (role == "ending" or failures.patterns[pattern_index].kind == kind)
        )
        causes: dict[str, None] = {}
        numbers: dict[str, Number] = {}
        groups: list[tuple[str, str]] = []
        for line_index, pattern_index, found in chosen:
            if len(causes) < MAX_CAUSE_LINES and failures.patterns[pattern_index].role == role:
                causes[lines[line_index]] = None
            for name, text in found.groupdict().items():
                if text is None:
                    continue
                groups.append((name, text))
                # a memory figure with its unit in the text is a figure only, not a number
                value = None if name in _MEMORY_FIELDS else _number(name, text)
                if value is not None:
                    numbers.setdefault(name, value)
        if role == "cause":
            # how the process ended, where the log says it beside the cause (an abort after a panic)
            groups += _ending_signals(failures, first)
        figures = _figures(groups)
        fields = _hint_fields(numbers, figures)
        hint = None
        for pattern_index in sorted(p for _l, p, _m in chosen):
            hint = _hint(failures.patterns[pattern_index], fields, argv)
            if hint is not None:
                break
        update = {
            "cause_lines": tuple(causes),
            "numbers": numbers,
            "figures": figures,
            "hint": hint or _KIND_HINTS.get(kind),
        }
        return ended_as.model_copy(update={"kind": kind, **update})
    if oom_kill:
        return ended_as.model_copy(update={"kind": "cpu_oom", "hint": _KIND_HINTS["cpu_oom"]})
    if signal is not None:
        return ended_as.model_copy(update={"kind": "killed", "hint": _KIND_HINTS["killed"]})
    if fallback is not None:
        return ended_as.model_copy(update={"kind": "other", "cause_lines": (fallback,)})
    return ended_as
