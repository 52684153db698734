"""Churn soak: is a Scanner polled at 10 Hz on a busy, forking host trustworthy for minutes on end?

Opt-in (never run by CI). As root, from the repository root, with the package installed:

    python benches/soak.py [--minutes 10] [--idle 5000] [--churn-rate 200] [--engines 5]
                           [--backend native|python|both] [--interval 0.1]

It starts ``--idle`` idle processes with ordinary host-like argv (``tests/helpers/idle.c``),
``--engines`` engine servers that stay up throughout, and ``benches/churn.c``, which starts about
``--churn-rate`` processes a second (half engine-like, half ordinary look-alikes such as
``grep llama-server`` or ``pip install vllm``) that each live 30 ms to 2 s. Both C programs are
compiled with gcc into ``target/soak/``. Meanwhile a ``Scanner()`` polls every ``--interval``
seconds in a worker process of its own per backend (``ENGINESPEC_BACKEND`` is read at import),
which also samples its own VmRSS and open file descriptors.

At the end it prints, per backend: scans and scan times; engine-like churn children that lived
>= 300 ms while polling ran and were never reported (missed, matched by pid and start time);
reports that match no process the soak started, none that was there before and none alive with
that pid and start time right after the scan (phantom); ordinary processes reported as engines;
reports of a process after it exited; live engines absent from a scan; wrong engine, model or
port; exceptions; RSS growth after warm-up and the fd count. It exits non-zero when any check
fails. Everything it started is killed (by pid) at exit, also on Ctrl-C, SIGTERM or SIGHUP.

On a shared host other users' engines are reported too (rightly): those alive when read back are
listed and not counted, but one that exits within milliseconds cannot be told from a phantom.
``--isolate`` runs the whole soak in a private pid namespace with its own /proc, where the
scanner sees only what the soak starts, and where even a SIGKILLed soak leaves nothing behind
(on the host, a SIGKILLed soak leaves its idle helpers; churn and the worker follow it).
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import ctypes
import functools
import itertools
import json
import os
import queue
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from _mix import host_mix

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "target" / "soak"
IDLE_SOURCE = ROOT / "tests" / "helpers" / "idle.c"
CHURN_SOURCE = Path(__file__).resolve().parent / "churn.c"

#: A churn engine that lived at least this long must have been reported at 10 Hz.
MIN_LIFE_SECONDS = 0.3
#: ... and, by a watch driven by the kernel's process events, this long (issue #13).
MIN_LIFE_EVENTS_SECONDS = 0.05


def min_life_seconds(mode: str) -> float:
    return MIN_LIFE_EVENTS_SECONDS if mode == "events" else MIN_LIFE_SECONDS


#: How long churn children live (uniform), in ms.
CHURN_LIFE_MS = (30, 2000)
#: RSS growth after warm-up that fails the soak.
RSS_LIMIT_KB = 5 * 1024
#: How often the worker samples its VmRSS and fd count.
SAMPLE_SECONDS = 2.0
#: The start time's clock-tick tolerance when matching a report to a process.
TICK_TOLERANCE = 1

#: Signals that stop the soak (Ctrl-C included).
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}

Backend = Literal["native", "python"]
Kind = Literal["idle", "stay", "churn-engine", "churn-ordinary", "ours"]

# Engine-like churn children: the launch forms the engines' signatures declare (console script through a venv
# Python, module forms, options before the positional model, `--k=v`, a path with a space).
CHURN_ENGINES: list[list[str]] = [
    ["vllm", "serve", "/models/churn-a"],
    ["vllm", "serve", "--host", "127.0.0.1", "--port", "8011", "/models/churn-b"],
    ["/opt/venv/bin/python3", "/opt/venv/bin/vllm", "serve", "Qwen/Qwen2.5-0.5B-Instruct", "--port", "8012"],
    ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/churn-c", "--port", "8013"],
    ["python3", "-m", "sglang.launch_server", "--model-path", "/models/churn-d", "--port", "30011"],
    ["python3.11", "-m", "sglang.launch_server", "--model-path=/models/churn-e", "--tp-size", "2"],
    ["sglang", "serve", "--model-path", "/models/churn-f"],
    ["llama-server", "-m", "/m/churn-g.gguf"],
    ["/usr/local/bin/llama-server", "--model", "/m/churn-h.gguf", "--port", "8081", "-c", "4096"],
    ["llama-server", "-m", "/m/churn i.gguf", "--host", "0.0.0.0"],
    ["mlx_lm.server", "--model", "mlx-community/churn-j"],
    ["python3", "-m", "mlx_lm.server", "--model", "/models/churn-k", "--port", "8090"],
]  # fmt: skip

# Ordinary churn children, many of them look-alikes that must NOT be reported: shells and
# wrappers (which the scanner watches for an exec that never comes here), tools naming an
# engine, and engine commands that are not servers.
CHURN_ORDINARY: list[list[str]] = [
    ["sh", "-c", "true"],
    ["/bin/sh", "-c", "sleep 0.5; echo done"],
    ["bash", "-c", "vllm serve /models/x"],
    ["env", "VLLM_LOGGING_LEVEL=DEBUG", "vllm", "serve", "/models/e"],
    ["nohup", "llama-server", "-m", "/m/x.gguf"],
    ["grep", "llama-server"],
    ["grep", "--color=auto", "-E", "vllm serve|sglang"],
    ["pip", "install", "vllm"],
    ["python3", "-m", "pip", "install", "sglang[all]"],
    ["uv", "pip", "install", "vllm==0.33.0"],
    ["tail", "-f", "/var/log/llama-server.log"],
    ["vim", "/src/llama.cpp/README.md"],
    ["vllm", "bench", "serve", "--model", "/models/a"],
    ["vllm", "serve", "--help"],
    ["python3", "-m", "sglang.bench_serving", "--backend", "sglang"],
    ["llama-cli", "-m", "/m/x.gguf", "-p", "hi"],
    ["llama-server", "--version"],
    ["mlx_lm.generate", "--model", "mlx-community/x", "--prompt", "hi"],
    ["python3", "train.py", "--model", "meta-llama/Llama-3.1-8B"],
    ["ps", "-eo", "pid,args"],
]  # fmt: skip


def stay_argv(index: int) -> list[str]:
    """The argv of the ``index``-th engine that stays up for the whole soak."""
    port = str(8200 + index)
    forms = [
        ["vllm", "serve", f"/models/stay-{index}", "--port", port],
        ["llama-server", "-m", f"/m/stay-{index}.gguf", "--port", port],
        ["python3", "-m", "sglang.launch_server", "--model-path", f"/models/stay-{index}", "--port", port],
        ["mlx_lm.server", "--model", f"/models/stay-{index}", "--port", port],
        ["/opt/venv/bin/python3", "/opt/venv/bin/vllm", "serve", f"/models/stay-{index}", "--port", port],
    ]
    return forms[index % len(forms)]


# --- /proc helpers, shared by the orchestrator and the worker ---------------------------------


def start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time, clock ticks since boot); counted from the last
    ')' because the command name may hold spaces and parentheses."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
        return int(stat[stat.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def read_argv(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            data = file.read()
    except OSError:
        return None
    if data.endswith(b"\0"):
        data = data[:-1]
    return [os.fsdecode(part) for part in data.split(b"\0")] if data else []


def boot_time() -> int:
    with open("/proc/stat") as file:
        return next(int(line.split()[1]) for line in file if line.startswith("btime "))


def host_identities() -> set[tuple[int, int]]:
    """(pid, start ticks) of every process on the host now."""
    found = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            ticks = start_ticks(int(name))
            if ticks is not None:
                found.add((int(name), ticks))
    return found


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _p99(values: Sequence[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


# --- worker: one backend's Scanner, in its own process ------------------------------------------


def _die_with_parent() -> None:
    """SIGTERM us when the orchestrator dies, so no worker outlives a killed soak."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _memory() -> tuple[int, int]:
    """(VmRSS in kB, open fds) of this process."""
    with open("/proc/self/status") as file:
        rss = next(int(line.split()[1]) for line in file if line.startswith("VmRSS:"))
    return rss, len(os.listdir("/proc/self/fd"))


def _same_argv(reported: Sequence[str], actual: Sequence[str]) -> bool:
    """Equal, except where the scanner masked a secret."""
    return len(reported) == len(actual) and all(
        r == a or "***" in r for r, a in zip(reported, actual, strict=True)
    )


def run_worker(config_path: str) -> None:
    """Polls for ``seconds``, writing JSON lines (scans, sightings, samples, errors) to ``events``.

    Memory must stay flat for the RSS check to mean anything, so nothing here grows with the
    run: each scan is written out at once and only the sightings still open are kept.
    """
    config = json.loads(Path(config_path).read_text())
    _die_with_parent()
    if os.getppid() != config["parent"]:
        return  # the orchestrator died before we asked to follow it
    stopping = False

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the orchestrator decides when we stop

    import enginespec  # only now: ENGINESPEC_BACKEND was set for this process

    if config["backend"] != enginespec.BACKEND:
        raise SystemExit(f"asked for backend {config['backend']}, got {enginespec.BACKEND}")
    interval: float = config["interval"]
    with open(config["events"], "w", buffering=1 << 16) as out:

        def emit(**event: Any) -> None:
            out.write(json.dumps(event) + "\n")

        scanner = enginespec.Scanner()
        if config["watch"]:
            _run_watch(enginespec, scanner, config, emit, lambda: stopping)
            return
        # (pid, start_time) -> the open sighting: first and last scan index, facts, confirmation.
        sightings: dict[tuple[int, float], dict[str, Any]] = {}
        begin = time.monotonic()
        deadline = begin + config["seconds"]
        next_scan = next_sample = begin
        scan_cpu = 0.0
        scans = 0
        while not stopping:
            now = time.monotonic()
            if now >= next_sample:
                rss, fds = _memory()
                emit(k="mem", t=now, rss=rss, fds=fds)
                next_sample += SAMPLE_SECONDS
            if now >= deadline:
                break
            if now < next_scan:
                time.sleep(max(0.0, min(next_scan, next_sample, deadline) - now))
                continue
            t0, cpu0 = time.monotonic(), time.process_time()
            try:
                reports = scanner.scan()
                stats = scanner.stats
            except Exception as error:  # counted, never fatal: that is what is under test
                emit(k="error", i=scans, t=t0, error=f"{type(error).__name__}: {error}")
                scans += 1
                next_scan = max(t0 + interval, time.monotonic())
                continue
            t1 = time.monotonic()
            scan_cpu += time.process_time() - cpu0
            emit(
                k="scan",
                i=scans,
                t0=t0,
                t1=t1,
                n=len(reports),
                known=stats.known,
                new=stats.new,
                reread=stats.reread,
                unreadable=stats.unreadable,
                full_recheck=stats.full_recheck,
            )
            current = {(p.pid, p.start_time): p for p in reports}
            for key in [key for key in sightings if key not in current]:
                emit(k="seen", **sightings.pop(key))
            for key, process in current.items():
                if key in sightings:
                    sightings[key]["last"] = scans
                    continue
                # Read the process back at once: a report about a process started by someone
                # else can only be told from a phantom while that process still runs. Its argv
                # may have changed since the scan (exec, retitle): kept, short, for the report.
                actual = read_argv(process.pid)
                changed = actual is not None and not _same_argv(process.argv, actual)
                sightings[key] = {
                    "pid": process.pid,
                    "start": process.start_time,
                    "first": scans,
                    "last": scans,
                    "engine": process.engine,
                    "model": process.model,
                    "port": process.effective_port,
                    "argv": list(process.argv),
                    "now_ticks": start_ticks(process.pid),
                    "now_argv": actual[:20] if changed and actual is not None else None,
                }
            scans += 1
            # Keep the schedule; after an overrun start the next scan at once, without a burst.
            next_scan = max(next_scan + interval, time.monotonic())
        for sighting in sightings.values():
            emit(k="seen", **sighting)
        emit(k="end", wall=time.monotonic() - begin, scan_cpu=scan_cpu, scans=scans)


def _sighting(process: Any, first: int) -> dict[str, Any]:
    """A report of a process, read back at once: a report about a process started by someone
    else can only be told from a phantom while that process still runs. Its argv may have changed
    since the scan (exec, retitle): kept, short, for the report."""
    actual = read_argv(process.pid)
    changed = actual is not None and not _same_argv(process.argv, actual)
    return {
        "pid": process.pid,
        "start": process.start_time,
        "first": first,
        "last": first,
        "engine": process.engine,
        "model": process.model,
        "port": process.effective_port,
        "argv": list(process.argv),
        "now_ticks": start_ticks(process.pid),
        "now_argv": actual[:20] if changed and actual is not None else None,
    }


def _run_watch(enginespec: Any, scanner: Any, config: dict[str, Any], emit: Any, stopping: Any) -> None:
    """``--watch``: the events of ``scanner.watch()`` instead of scans. Each event is one "scan"
    record (t0 = t1 = when it was seen), so a sighting runs from its ``started`` event to the event
    before its ``stopped`` one, and says whether a ``stopped`` event closed it. The CPU counted is
    the whole worker's (the watch runs on threads)."""
    watch = scanner.watch(config["interval"], poll=config["watch"] == "poll")
    emit(k="mode", mode=watch.mode, reason=watch.polling_reason)
    events: queue.Queue[Any] = queue.Queue()
    threading.Thread(target=lambda: [events.put(e) for e in watch], daemon=True).start()
    sightings: dict[tuple[int, float], dict[str, Any]] = {}
    begin = next_sample = time.monotonic()
    deadline = begin + config["seconds"]
    cpu = time.process_time()
    index = 0
    while not stopping():
        now = time.monotonic()
        if now >= next_sample:
            rss, fds = _memory()
            emit(k="mem", t=now, rss=rss, fds=fds)
            next_sample += SAMPLE_SECONDS
        if now >= deadline:
            break
        try:
            event = events.get(timeout=max(0.0, min(next_sample, deadline) - now))
        except queue.Empty:
            continue
        if isinstance(event, BaseException):
            emit(k="error", i=index, t=now, error=f"{type(event).__name__}: {event}")
            continue
        emit(k="scan", i=index, t0=event.monotonic, t1=event.monotonic, n=len(sightings), known=0,
             new=0, reread=0, unreadable=0, full_recheck=False)  # fmt: skip
        if isinstance(event, enginespec.Stopped):
            sighting = sightings.pop((event.identity.pid, event.identity.start_time), None)
            if sighting is None:
                emit(k="error", i=index, t=now, error=f"stopped without started: {event.identity}")
            else:
                emit(k="seen", **{**sighting, "last": index - 1}, stopped=True)
        elif isinstance(event, enginespec.Started):
            sightings[(event.process.pid, event.process.start_time)] = _sighting(event.process, index)
        index += 1
    for sighting in sightings.values():
        emit(k="seen", **{**sighting, "last": index - 1}, stopped=False)
    emit(k="end", wall=time.monotonic() - begin, scan_cpu=time.process_time() - cpu, scans=index)
    watch.close()


# --- orchestrator -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Started:
    """A process this soak started: identity, argv, what it is and (churn) when it lived."""

    pid: int
    ticks: int
    argv: tuple[str, ...]
    kind: Kind
    fork: float = float("-inf")
    exit: float = float("inf")
    status: int = 0


@dataclass
class Figures:
    """What one backend's run measured; ``failures`` says which checks failed."""

    backend: Backend
    #: "scan" (polling scan()), or the watch's mode: "events" or "polling".
    mode: str = "scan"
    scans: int = 0
    scan_seconds: list[float] = field(default_factory=list)
    wall: float = 0.0
    scan_cpu: float = 0.0
    overruns: int = 0
    max_known: int = 0
    max_reread: int = 0
    full_rechecks: int = 0
    churn_spawned: int = 0
    churn_seconds: float = 0.0
    churn_engines: int = 0
    eligible: int = 0
    missed: list[tuple[Started, int]] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    phantom: list[dict[str, Any]] = field(default_factory=list)
    foreign: list[dict[str, Any]] = field(default_factory=list)
    preexisting: int = 0
    false_positive: list[tuple[Started, dict[str, Any]]] = field(default_factory=list)
    stale: list[tuple[Started, dict[str, Any]]] = field(default_factory=list)
    gaps: list[tuple[Started, int]] = field(default_factory=list)
    stay_absent: int = 0
    wrong_facts: list[tuple[Started, dict[str, Any]]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    rss_start_kb: int = 0
    rss_end_kb: int = 0
    rss_max_kb: int = 0
    fds_min: int = 0
    fds_max: int = 0
    fds_start: int = 0
    #: the fewest fds among the last samples: a leak raises even that
    fds_end: int = 0
    failures: list[str] = field(default_factory=list)


class Identities:
    """Processes by (pid, start ticks), matched with a tolerance of one tick."""

    def __init__(self) -> None:
        self._by_pid: dict[int, list[Started]] = {}

    def add(self, started: Started) -> None:
        self._by_pid.setdefault(started.pid, []).append(started)

    def find(self, pid: int, ticks: int) -> Started | None:
        for started in self._by_pid.get(pid, ()):
            if abs(started.ticks - ticks) <= TICK_TOLERANCE:
                return started
        return None

    def __iter__(self) -> Iterator[Started]:
        for group in self._by_pid.values():
            yield from group


@functools.cache
def _expected_facts(argv: tuple[str, ...]) -> tuple[str, str | None, int | None] | None:
    """What the argv layer says this argv is: the oracle for the scanner's reports."""
    from enginespec import parse_argv

    parsed = parse_argv(argv)
    return None if parsed is None else (parsed.engine, parsed.model, parsed.effective_port)


def _check_labels(idle_mix: Sequence[Sequence[str]], stay: Sequence[Sequence[str]]) -> None:
    """Our engine/ordinary labels must agree with the argv parser, or a mistake in this file would
    show up as scanner misses or false positives."""
    wrong = [a for a in [*CHURN_ENGINES, *stay] if _expected_facts(tuple(a)) is None]
    wrong += [a for a in [*CHURN_ORDINARY, *idle_mix] if _expected_facts(tuple(a)) is not None]
    if wrong:
        raise SystemExit("argv labelled wrongly in soak.py: " + "; ".join(shlex.join(a) for a in wrong))


@contextlib.contextmanager
def _stop_signals_held() -> Iterator[None]:
    """Delays Ctrl-C (and SIGTERM, SIGHUP) to the end of the block: between a process being
    started or reaped and that being on record, an interruption would leak a process or make
    us signal a pid that is no longer ours."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.hz = os.sysconf("SC_CLK_TCK")
        self.btime = boot_time()
        #: Our unreaped children: idle helpers and stay-up engines; churn and the worker.
        self.helpers: list[int] = []
        self.running: list[int] = []
        self.ours = Identities()
        self.host: set[tuple[int, int]] = set()

    def build(self) -> tuple[Path, Path]:
        BUILD.mkdir(parents=True, exist_ok=True)
        idle, churn = BUILD / "idle", BUILD / "churn"
        subprocess.run(["gcc", "-O1", "-o", str(idle), str(IDLE_SOURCE)], check=True)
        cmd = ["gcc", "-O2", "-Wall", "-Wextra", "-o", str(churn), str(CHURN_SOURCE), "-lm"]
        subprocess.run(cmd, check=True)
        return idle, churn

    def _start(self, path: Path | str, argv: Sequence[str], env: dict[str, str], kind: Kind) -> int:
        with _stop_signals_held():
            # Own process group: a Ctrl-C at the terminal reaches only us, and we stop everything
            # in order. The child starts with no signal blocked.
            pid = os.posix_spawn(str(path), [os.fsencode(a) for a in argv], env, setpgroup=0, setsigmask=())
            # Unreaped, so the pid is still ours: this start time is the child's.
            self.ours.add(Started(pid, start_ticks(pid) or -1, tuple(argv), kind))
            (self.helpers if kind in ("idle", "stay") else self.running).append(pid)
        return pid

    def _reap(self, pid: int, timeout: float | None) -> int | None:
        """Waits for one of ``self.running``; its exit code, or None after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with _stop_signals_held():
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    self.running.remove(pid)
                    return os.waitstatus_to_exitcode(status)
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(0.05)

    def start_helpers(self, helper: Path) -> None:
        mix = host_mix(max(self.args.idle, 1), engine_share=0.0, seed=self.args.seed)
        idle = [argv or ["kworker/0:1"] for argv in mix][: self.args.idle]
        stay = [stay_argv(i) for i in range(self.args.engines)]
        _check_labels(idle, stay)
        self.host = host_identities()
        for argv in idle:
            self._start(helper, argv, {}, "idle")
        for argv in stay:
            self._start(helper, argv, {}, "stay")
        # Until a helper has exec'd it shows our argv; a first scan that caught it then would
        # (rightly) treat it as an old ordinary process, so wait for every argv to be in place.
        deadline = time.monotonic() + 60
        pending = list(self.ours)
        while pending and time.monotonic() < deadline:
            pending = [s for s in pending if read_argv(s.pid) != list(s.argv)]
            time.sleep(0.05)
        if pending:
            raise SystemExit(f"{len(pending)} helpers did not start")

    def run_backend(self, backend: Backend, churn: Path) -> Figures:
        args = self.args
        lines = BUILD / "churn-argv.txt"
        text = "".join("E\x1f" + "\x1f".join(a) + "\n" for a in CHURN_ENGINES)
        text += "".join("O\x1f" + "\x1f".join(a) + "\n" for a in CHURN_ORDINARY)
        lines.write_text(text)
        records = BUILD / f"{backend}-churn.txt"
        events = BUILD / f"{backend}-events.jsonl"
        low, high = CHURN_LIFE_MS
        churn_argv = [str(churn), str(lines), str(records), str(args.churn_rate), str(args.seed)]
        churn_argv += [str(low), str(high)]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        generator = self._start(churn, churn_argv, env, "ours")
        # Let the churn population reach its steady size (children live up to 2 s).
        time.sleep(high / 1000)
        config = {
            "backend": backend,
            "seconds": args.minutes * 60,
            "interval": args.interval,
            "watch": args.watch,
            "events": str(events),
            "parent": os.getpid(),
        }
        with tempfile.NamedTemporaryFile("w", suffix=".json", dir=BUILD, delete=False) as file:
            json.dump(config, file)
        worker_argv = [sys.executable, str(Path(__file__).resolve()), "--worker", file.name]
        worker = self._start(
            sys.executable, worker_argv, {**os.environ, "ENGINESPEC_BACKEND": backend}, "ours"
        )
        try:
            code = self._reap(worker, None)
        finally:
            Path(file.name).unlink(missing_ok=True)
        os.kill(generator, signal.SIGTERM)  # it kills, reaps and records what it started
        if self._reap(generator, 30) is None:
            raise SystemExit("churn did not stop")
        if code != 0:
            raise SystemExit(f"{backend} worker failed with exit code {code}")
        return self.analyse(backend, events, records)

    def _churn_children(self, records: Path, figures: Figures) -> list[Started]:
        # Line order of the argv file churn was given (engines first).
        catalogue: list[tuple[Kind, list[str]]] = [("churn-engine", a) for a in CHURN_ENGINES]
        catalogue += [("churn-ordinary", a) for a in CHURN_ORDINARY]
        children = []
        first_fork, last_exit = float("inf"), float("-inf")
        for line in records.read_text().splitlines():
            if line.startswith("#"):
                figures.churn_spawned = int(line.split()[2])
                continue
            pid, ticks, index, fork_ns, exit_ns, status = (int(x) for x in line.split())
            kind, argv = catalogue[index]
            started = Started(pid, ticks, tuple(argv), kind, fork_ns / 1e9, exit_ns / 1e9, status)
            children.append(started)
            first_fork, last_exit = min(first_fork, started.fork), max(last_exit, started.exit)
        figures.churn_seconds = max(0.0, last_exit - first_fork)
        return children

    def analyse(self, backend: Backend, events: Path, records: Path) -> Figures:
        figures = Figures(backend)
        scans: dict[int, tuple[float, float]] = {}
        seen: list[dict[str, Any]] = []
        memory: list[tuple[float, int, int]] = []
        begin = end = 0.0
        for line in events.read_text().splitlines():
            event = json.loads(line)
            if event["k"] == "scan":
                scans[event["i"]] = (event["t0"], event["t1"])
                figures.max_known = max(figures.max_known, event["known"])
                figures.max_reread = max(figures.max_reread, event["reread"])
                figures.full_rechecks += event["full_recheck"]
            elif event["k"] == "seen":
                seen.append(event)
            elif event["k"] == "mem":
                memory.append((event["t"], event["rss"], event["fds"]))
            elif event["k"] == "error":
                figures.errors.append(event["error"])
            elif event["k"] == "mode":
                figures.mode = event["mode"]
            elif event["k"] == "end":
                figures.wall, figures.scan_cpu = event["wall"], event["scan_cpu"]
                figures.scans = event["scans"]
        watching = self.args.watch is not None
        min_life = min_life_seconds(figures.mode)
        order = sorted(scans)
        starts = [scans[i][0] for i in order]
        ends = [scans[i][1] for i in order]
        if order:
            begin, end = starts[0], ends[-1]
        figures.scan_seconds = [t1 - t0 for t0, t1 in scans.values()]
        figures.overruns = sum(1 for s in figures.scan_seconds if s > self.args.interval)
        ours = Identities()
        for started in self.ours:
            ours.add(started)
        children = self._churn_children(records, figures)
        for child in children:
            ours.add(child)

        # Every report: whose is it, was it true when it was made?
        reported: dict[tuple[int, int], list[dict[str, Any]]] = {}
        for sighting in seen:
            ticks = round((sighting["start"] - self.btime) * self.hz)
            match = ours.find(sighting["pid"], ticks)
            if match is None:
                near = range(ticks - TICK_TOLERANCE, ticks + TICK_TOLERANCE + 1)
                if any((sighting["pid"], t) in self.host for t in near):
                    figures.preexisting += 1
                elif (
                    sighting["now_ticks"] is not None and abs(sighting["now_ticks"] - ticks) <= TICK_TOLERANCE
                ):
                    # Alive with that very identity right after the scan: real, just not ours.
                    figures.foreign.append(sighting)
                else:
                    figures.phantom.append(sighting)
                continue
            started = match
            reported.setdefault((started.pid, started.ticks), []).append(sighting)
            if started.kind not in ("stay", "churn-engine"):
                figures.false_positive.append((started, sighting))
                continue
            facts = (sighting["engine"], sighting["model"], sighting["port"])
            if facts != _expected_facts(started.argv) or tuple(sighting["argv"]) != started.argv:
                figures.wrong_facts.append((started, sighting))
            if watching:
                # Its exit must have been told by a stopped event (when it exited during the watch).
                if not sighting["stopped"] and started.exit < end:
                    figures.stale.append((started, sighting))
            # A scan that began after the child was reaped cannot have seen it alive.
            elif scans[sighting["last"]][0] > started.exit or scans[sighting["first"]][1] < started.fork:
                figures.stale.append((started, sighting))

        # Every engine we started: was it reported, and in every scan while it ran?
        for started in [*ours]:
            if started.kind == "stay":
                intervals = reported.get((started.pid, started.ticks), [])
                if watching:  # started once, never stopped
                    figures.stay_absent += not intervals or any(s["stopped"] for s in intervals)
                    continue
                present = sum(s["last"] - s["first"] + 1 for s in intervals)
                figures.stay_absent += len(order) - present
                continue
            if started.kind != "churn-engine" or started.status == 127 << 8:
                continue
            figures.churn_engines += 1
            life = started.exit - started.fork
            overlap = min(started.exit, end) - max(started.fork, begin)
            intervals = sorted(reported.get((started.pid, started.ticks), []), key=lambda s: s["first"])
            if intervals:
                gap = sum(
                    bisect.bisect_left(order, b["first"]) - bisect.bisect_right(order, a["last"])
                    for a, b in itertools.pairwise(intervals)
                )
                if gap:
                    figures.gaps.append((started, gap))
            if life < min_life or overlap < min_life:
                continue
            figures.eligible += 1
            if intervals:
                # From fork to the end of the first scan that reported it; children forked
                # before polling began would measure the worker's start-up instead.
                if started.fork >= begin:
                    figures.latencies.append(scans[intervals[0]["first"]][1] - started.fork)
            else:
                # Scans that ran entirely within its life: >= 2 means it was there, unambiguously.
                covering = bisect.bisect_right(ends, started.exit) - bisect.bisect_left(starts, started.fork)
                figures.missed.append((started, max(0, covering)))

        self._memory(figures, memory)
        self._judge(figures)
        return figures

    def _memory(self, figures: Figures, memory: list[tuple[float, int, int]]) -> None:
        if not memory:
            return
        first = memory[0][0]
        warmup = self.args.warmup
        if warmup is None:
            warmup = min(60.0, max(5.0, self.args.minutes * 60 / 4))
        after = [m for m in memory if m[0] - first >= warmup] or memory
        rss = [m[1] for m in after]
        fds = [m[2] for m in after]
        # Medians of three samples at each end, so one sample taken mid-allocation does not decide.
        figures.rss_start_kb = int(statistics.median(rss[:3]))
        figures.rss_end_kb = int(statistics.median(rss[-3:]))
        figures.rss_max_kb = max(rss)
        figures.fds_start, figures.fds_min, figures.fds_max = fds[0], min(fds), max(fds)
        figures.fds_end = min(fds[-3:])

    def _judge(self, figures: Figures) -> None:
        checks = {
            "missed": len(figures.missed),
            "phantom": len(figures.phantom),
            "false positives": len(figures.false_positive),
            "reported after exit": len(figures.stale),
            "gaps": len(figures.gaps),
            "stay-up engine absences": figures.stay_absent,
            "wrong facts": len(figures.wrong_facts),
            "exceptions": len(figures.errors),
        }
        figures.failures = [f"{name} = {count}" for name, count in checks.items() if count]
        growth = figures.rss_end_kb - figures.rss_start_kb
        if growth >= RSS_LIMIT_KB:
            figures.failures.append(f"RSS grew {growth / 1024:.1f} MB")
        # A watch reads /proc on its own thread while the fds are counted: only fds still open at
        # the end count (a scan in the polling loop never overlaps a sample).
        grown = figures.fds_end if self.args.watch else figures.fds_max
        if grown > figures.fds_start:
            figures.failures.append(f"fds grew {figures.fds_start} -> {grown}")
        if figures.scans == 0:
            figures.failures.append("no scans")

    def stop(self) -> None:
        """Kills and reaps everything still running that we started, by pid; a second Ctrl-C
        does not cut this short."""
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)
        for pid in self.running:
            os.kill(pid, signal.SIGTERM)  # unreaped: still ours, even if it has exited
        for pid in list(self.running):
            if self._reap(pid, 10) is None:
                os.kill(pid, signal.SIGKILL)
                self._reap(pid, None)
        for pid in self.helpers:
            os.kill(pid, signal.SIGKILL)
        for pid in self.helpers:
            os.waitpid(pid, 0)
        self.helpers.clear()


# --- report -------------------------------------------------------------------------------------


def _rows(f: Figures, interval: float) -> list[tuple[str, str, float | None]]:
    """(label, shown value, number for a ratio or None)."""
    ms = [s * 1e3 for s in f.scan_seconds]
    rate = len(f.scan_seconds) / f.wall if f.wall else 0.0
    cpu = 100 * f.scan_cpu / f.wall if f.wall else 0.0
    lat = [x * 1e3 for x in f.latencies]
    churn_rate = f.churn_spawned / f.churn_seconds if f.churn_seconds else 0.0
    growth = (f.rss_end_kb - f.rss_start_kb) / 1024
    return [
        ("scans done (watch: events)", f"{f.scans}", None),
        ("mode", f.mode, None),
        (f"scan rate, Hz (asked {1 / interval:g})", f"{rate:.2f}", rate),
        ("scan time median, ms", f"{_median(ms):.2f}", _median(ms)),
        ("scan time p99, ms", f"{_p99(ms):.2f}", _p99(ms)),
        (f"scans longer than {interval * 1e3:g} ms", f"{f.overruns}", None),
        ("scanner CPU, % of one core", f"{cpu:.1f}", cpu),
        ("processes known to the scanner (max)", f"{f.max_known}", None),
        # Many re-reads in one scan mean the scanner could not trust what it knew (pid reuse).
        ("most processes re-read in one scan", f"{f.max_reread}", None),
        ("scans with a full pid-reuse recheck", f"{f.full_rechecks}", None),
        ("churn children started (per s)", f"{f.churn_spawned} ({churn_rate:.0f}/s)", None),
        ("  engine-like", f"{f.churn_engines}", None),
        (f"  engine-like, lived >= {min_life_seconds(f.mode) * 1e3:g} ms", f"{f.eligible}", None),
        ("  first report after fork, median/p99 ms", f"{_median(lat):.0f}/{_p99(lat):.0f}", _median(lat)),
        ("missed", f"{len(f.missed)}", None),
        ("phantom", f"{len(f.phantom)}", None),
        ("  not counted: others' engines, alive", f"{len(f.foreign)}", None),
        ("  not counted: engines there before", f"{f.preexisting}", None),
        ("ordinary processes reported", f"{len(f.false_positive)}", None),
        ("reported after exit (watch: exit not told)", f"{len(f.stale)}", None),
        ("live engine absent from a scan (gaps)", f"{len(f.gaps)}", None),
        ("stay-up engine absences (scans)", f"{f.stay_absent}", None),
        ("wrong facts (engine, model, port, argv)", f"{len(f.wrong_facts)}", None),
        ("exceptions", f"{len(f.errors)}", None),
        ("RSS after warm-up -> end (max), MB", f"{f.rss_start_kb / 1024:.1f} -> {f.rss_end_kb / 1024:.1f} "
         f"({f.rss_max_kb / 1024:.1f})", None),
        ("RSS growth, MB (limit 5)", f"{growth:+.2f}", None),
        ("open fds min/max", f"{f.fds_min}/{f.fds_max}", None),
        ("result", "PASS" if not f.failures else "FAIL", None),
    ]  # fmt: skip


def _show(argv: Sequence[str], limit: int = 160) -> str:
    text = shlex.join(argv)
    return text if len(text) <= limit else f"{text[: limit - 20]}... ({len(argv)} args)"


def _describe(started: Started, origin: float) -> str:
    life = (started.exit - started.fork) * 1e3
    return (
        f"pid {started.pid} start {started.ticks} lived {life:.0f} ms from t={started.fork - origin:.2f} s: "
        f"{_show(started.argv)}"
    )


def _describe_report(sighting: dict[str, Any], ticks: int) -> str:
    now_ticks = sighting["now_ticks"]
    if now_ticks is None:
        now = "gone when read back"
    elif abs(now_ticks - ticks) <= TICK_TOLERANCE:
        now = "alive when read back"
    else:
        now = f"pid now started at tick {now_ticks}"
    if sighting["now_argv"] is not None:
        now += f", argv now {_show(sighting['now_argv'])}"
    return (
        f"pid {sighting['pid']} start tick {ticks} "
        f"in scans {sighting['first']}-{sighting['last']} ({now}): {_show(sighting['argv'])}"
    )


def report(results: list[Figures], args: argparse.Namespace) -> None:
    btime, hz = boot_time(), os.sysconf("SC_CLK_TCK")

    def ticks_of(sighting: dict[str, Any]) -> int:
        return round((float(sighting["start"]) - btime) * hz)

    tables = [_rows(f, args.interval) for f in results]
    width = max(len(label) for label, _, _ in tables[0]) + 2
    header = f"{'':<{width}}" + "".join(f"{f.backend:>24}" for f in results)
    if len(results) == 2:
        header += f"{'python/native':>16}"
    where = "in a private pid namespace" if args.isolate else "on the host"
    print(
        f"\nsoak {where}: {args.minutes:g} min per backend, {args.idle} idle, "
        f"{args.engines} stay-up engines, churn {args.churn_rate:g}/s, interval {args.interval:g} s, "
        f"{os.cpu_count()} CPUs"
    )
    print(header)
    for row in zip(*tables, strict=True):
        line = f"{row[0][0]:<{width}}" + "".join(f"{value:>24}" for _, value, _ in row)
        if len(row) == 2 and row[0][2] and row[1][2] is not None:
            line += f"{row[1][2] / row[0][2]:>15.2f}x"
        print(line)
    for f in results:
        if not f.failures:
            continue
        print(f"\n{f.backend}: FAIL: {', '.join(f.failures)}")
        origin = min((s.fork for s, _ in f.missed), default=0.0)
        for started, covering in f.missed[:5]:
            print(f"  missed: {_describe(started, origin)} ({covering} scans ran within its life)")
        if f.phantom and not args.isolate:
            print(
                "  (a phantom gone when read back may be someone else's short-lived process on a shared "
                "host: --isolate rules that out)"
            )
        for sighting in f.phantom[:5]:
            print(f"  phantom: {_describe_report(sighting, ticks_of(sighting))}")
        for started, sighting in f.false_positive[:5]:
            print(f"  ordinary reported as {sighting['engine']}: {_describe(started, origin)}")
        for started, sighting in f.stale[:5]:
            scans = f"scans {sighting['first']}-{sighting['last']}"
            print(f"  reported after exit ({scans}): {_describe(started, origin)}")
        for started, gap in f.gaps[:5]:
            print(f"  absent from {gap} scans while alive: {_describe(started, origin)}")
        for started, sighting in f.wrong_facts[:5]:
            print(
                f"  wrong facts: {sighting['engine']} {sighting['model']} port {sighting['port']} "
                f"argv {_show(sighting['argv'])} for {_describe(started, origin)}"
            )
        for error in f.errors[:5]:
            print(f"  exception: {error}")
    for f in results:
        if f.foreign:
            print(
                f"\n{f.backend}: {len(f.foreign)} reports were engines someone else started during the "
                "soak, alive with that pid and start time right after the scan (not counted; "
                "--isolate avoids them):"
            )
        for sighting in f.foreign[:3]:
            print(f"  {_describe_report(sighting, ticks_of(sighting))}")


def _isolated(argv: list[str]) -> int:
    """Runs this soak again as pid 1 of a private pid namespace with its own /proc, so the
    scanner sees only what the soak starts (other users' engines on a shared host would be
    reported, rightly, and blur the figures). The kernel kills everything in the namespace when
    we exit, whatever way."""
    command = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGTERM"]
    command += [sys.executable, str(Path(__file__).resolve())]
    code = subprocess.run([*command, *argv]).returncode
    return 128 - code if code < 0 else code  # killed by a signal: the shell's convention


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=10.0, help="per backend")
    parser.add_argument("--idle", type=int, default=5000)
    parser.add_argument("--churn-rate", type=float, default=200.0, help="processes started per second")
    parser.add_argument("--engines", type=int, default=5, help="engine servers that stay up")
    parser.add_argument("--backend", choices=["native", "python", "both"], default="native")
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between scans")
    parser.add_argument("--warmup", type=float, default=None, help="seconds before RSS is the baseline")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--isolate", action="store_true", help="run in a private pid namespace (shared hosts; needs root)"
    )
    parser.add_argument(
        "--watch",
        choices=["events", "poll"],
        help="consume Scanner().watch() events (process events, or forced polling) instead of polling scan()",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_worker(args.worker)
        return 0
    if args.isolate and os.getpid() != 1:
        try:
            return _isolated(sys.argv[1:])
        except KeyboardInterrupt:  # the namespace's pid 1 got it too and cleans up
            return 130

    def interrupted(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    # SIGTERM and SIGHUP clean up like Ctrl-C does.
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)
    backends: list[Backend] = ["native", "python"] if args.backend == "both" else [args.backend]
    soak = Soak(args)
    try:
        idle, churn = soak.build()
        print(f"starting {args.idle} idle processes and {args.engines} stay-up engines", flush=True)
        soak.start_helpers(idle)
        results = []
        for backend in backends:
            how = f"watching ({args.watch})" if args.watch else "polling"
            print(f"{backend}: {how} for {args.minutes:g} min under churn", flush=True)
            results.append(soak.run_backend(backend, churn))
    except KeyboardInterrupt:
        print("\ninterrupted: stopping everything the soak started", file=sys.stderr)
        return 130
    finally:
        soak.stop()
    report(results, args)
    return 1 if any(f.failures for f in results) else 0


if __name__ == "__main__":
    sys.exit(main())
