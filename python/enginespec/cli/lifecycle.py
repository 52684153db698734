"""The lifecycle subcommands of ``enginespec``: ``run``, ``stop`` and ``logs`` (registered by
:mod:`enginespec.cli.app` through :func:`add_commands`)."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from enginespec.cli.args import duration, grace
from enginespec.cli.common import fail, json_text
from enginespec.display import literal

# What the commands do is imported when one runs (the CLI starts without pydantic or a scanner).
if TYPE_CHECKING:
    from enginespec.cli.runs import Recorder
    from enginespec.failures import Failure
    from enginespec.lifecycle.running import RunningEngine
    from enginespec.lifecycle.runrecords import RunState
    from enginespec.lifecycle.stopping import StopResult
    from enginespec.process.record import EngineProcess

#: Exit status of a run stopped by Ctrl-C (128 + SIGINT, as shells report it).
INTERRUPTED = 130


def _print_failure(failure: Failure, as_json: bool) -> None:
    if as_json:
        print(json_text(failure))
        return
    print(f"enginespec run: failed to start: {failure.summary()}", file=sys.stderr)
    for line in failure.cause_lines:
        print(f"  {literal(line)}", file=sys.stderr)
    if failure.hint:
        print(f"  hint: {literal(failure.hint)}", file=sys.stderr)


def _log_dir(args: argparse.Namespace) -> Path:
    from enginespec.cli.runs import data_dir

    return Path(args.log_dir) if args.log_dir else data_dir(args) / "logs"


class _Ended(Exception):
    """``run`` was told to end by a signal (SIGTERM, SIGHUP; SIGINT comes as KeyboardInterrupt)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_ended(signum: int, _frame: object) -> None:
    raise _Ended(signum)


class _Restart(Exception):
    """``enginespec restart NAME`` asked this run (SIGUSR1) to restart its engine."""


class _Following:
    """Whether ``run`` is following a ready engine's output: the one place a restart may begin
    (not while it starts, not while ``run`` winds up), so SIGUSR1 is acted on only then."""

    def __init__(self) -> None:
        #: inside the wait for the engine's next line
        self.waiting = False
        #: what the readiness wait found (``ready_at`` once the engine was ready)
        self.outcome: dict[str, Any] = {}

    def restart_asked(self, _signum: int, _frame: object) -> None:
        if self.waiting and "ready_at" in self.outcome:
            self.waiting = False
            raise _Restart


def _cmd_run(args: argparse.Namespace) -> int:
    from enginespec.cli import runs
    from enginespec.errors import EngineSpecError, LaunchFailed
    from enginespec.lifecycle.recipe import Recipe
    from enginespec.lifecycle.running import launch

    try:
        taken = runs.name_in_use(args)
        if taken is not None:
            fail("run", taken)
            runs.report(args, f"error: {taken}")
            return 2
        if args.restart_of is not None:
            engine = _restarted(args)
        elif args.recipe is None:
            fail("run", "a recipe file is needed (enginespec run RECIPE)")
            return 2
        elif args.detach:
            Recipe.from_file(args.recipe)  # a bad recipe is said here, not by the detached run
            return runs.detach(args)
        else:
            engine = launch(Recipe.from_file(args.recipe), log_dir=_log_dir(args))
    except LaunchFailed as failed:
        _print_failure(failed.failure, args.json)
        runs.report(args, f"error: failed to start: {failed.failure.summary()}")
        return 1
    except (EngineSpecError, OSError) as err:
        fail("run", err)
        runs.report(args, f"error: {err}")
        return 2
    recorder = runs.Recorder(args, engine, _log_dir(args))
    runs.report(args, f"started {recorder.record.name if recorder.record else engine.instance_id}")
    # SIGTERM and SIGHUP (a service manager, a closed terminal) end `run` as Ctrl-C does, and so
    # does a reader of its output that went away: the tree it started is stopped, never left
    # writing into pipes nobody reads
    before = {
        sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)
    }
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_ended)
    following = _Following()
    signal.signal(signal.SIGUSR1, following.restart_asked)
    try:
        while True:
            try:
                status, state, outcome = _follow_run(args, engine, recorder, following)
                break
            except _Restart:
                engine.restart(grace=args.grace)
                recorder.restarted(engine)
                fail("run", f"restarted: {engine.instance_id} pid {engine.pid}")
        recorder.end(state, outcome, status)
        return status
    except (KeyboardInterrupt, _Ended, BrokenPipeError) as why:
        for sig in before:
            signal.signal(sig, signal.SIG_IGN)  # the stop is not cut short by a second signal
        if isinstance(why, BrokenPipeError):
            # nothing more reaches the reader that went away (nor Python's flush at exit); as
            # `ps | head`, that is no error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            said, status = "its output closed", 0
        elif isinstance(why, _Ended):
            said, status = signal.Signals(why.signum).name, 128 + why.signum
        else:
            said, status = "Ctrl-C", INTERRUPTED
        result = engine.stop(grace=args.grace)
        with contextlib.suppress(OSError):  # stderr may be the terminal that hung up
            fail("run", f"stopped on {said}; leftover pids: {list(result.leftover) or 'none'}")
        engine.close()
        recorder.end("ended", f"stopped on {said}", status)
        return status
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _restarted(args: argparse.Namespace) -> RunningEngine:
    """``enginespec restart`` of an engine no run kept (``--restart-of PID:TICKS``): that very
    process (its start checked), adopted, stopped and started again as this run's child."""
    from enginespec.cli.targets import find
    from enginespec.errors import InvalidInputError
    from enginespec.lifecycle.running import adopt

    pid, _, ticks = args.restart_of.partition(":")
    if not (pid.isdigit() and ticks.isdigit()):
        raise InvalidInputError(f"--restart-of: {args.restart_of!r} is not PID:TICKS")
    process = find(pid)
    if process.pid != int(pid) or process._start_ticks != int(ticks):
        raise InvalidInputError(f"pid {pid}: the engine to restart is gone")
    engine = adopt(process, log_dir=_log_dir(args))
    engine.restart(grace=args.grace)
    return engine


def _follow_run(
    args: argparse.Namespace, engine: RunningEngine, recorder: Recorder, following: _Following
) -> tuple[int, RunState, str]:
    """Prints the engine's output until it ends, or until it never became ready; the exit
    status, and the run's state and outcome for its record. While the engine is ready and its
    output followed, SIGUSR1 raises :class:`_Restart` here."""
    from enginespec.errors import LaunchFailed, NotReady
    from enginespec.failures import ended

    fail("run", f"started {engine.instance_id} pid {engine.pid}; log {engine.log_path}")
    if args.quiet and not args.json:
        print(engine.instance_id, flush=True)
    outcome: dict[str, Any] = {}
    following.outcome = outcome
    given_up = threading.Event()

    def wait() -> None:
        try:
            outcome["health"] = engine.wait_ready(timeout=args.timeout, stall_timeout=args.stall_timeout)
            outcome["ready_at"] = time.monotonic()
            recorder.ready()
            fail("run", f"ready at {engine.base_url}")
        except LaunchFailed as failed:
            outcome["error"] = failed
        except NotReady as err:
            outcome["error"] = err
            given_up.set()

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    lines = engine.follow(until=given_up)
    while True:
        following.waiting = True  # read by the SIGUSR1 handler, on this thread
        line = next(lines, None)
        following.waiting = False
        if line is None:
            break
        if not args.quiet:
            print(literal(line.text), flush=True)
    waiter.join()
    error = outcome.get("error")
    if isinstance(error, NotReady):
        fail("run", error)
        engine.close()
        return 1, "failed", str(error)
    if "ready_at" in outcome:
        # it was serving: its end is not a failed start (`enginespec stop`, or it ended itself)
        status = engine.wait(timeout=10.0) or (None, None)
        seconds = time.monotonic() - outcome["ready_at"]
        engine.close()
        said = f"ended {seconds:.0f} s after it was ready: {ended(*status)}"
        fail("run", f"{engine.instance_id} {said}")
        code, sig = status
        return (128 + sig if sig is not None else (code if code is not None else 1)), "ended", said
    failure = error.failure if isinstance(error, LaunchFailed) else engine.failure()
    engine.close()
    if failure is not None:
        _print_failure(failure, args.json)
    return 1, "failed", f"failed to start: {failure.summary()}" if failure is not None else "failed to start"


def _find(target: str) -> EngineProcess | str:
    """The engine a target names (see :mod:`enginespec.cli.targets`), or why there is none."""
    from enginespec.cli.targets import find
    from enginespec.errors import InvalidInputError

    try:
        return find(target)
    except InvalidInputError as err:
        return str(err)


def _adopted(targets: list[str]) -> tuple[list[tuple[EngineProcess, RunningEngine]], bool]:
    """The engines the targets name, each once (a pid and a :PORT may name one engine), adopted
    to be stopped; and whether every target named one (each that did not is said)."""
    from enginespec.errors import EngineSpecError
    from enginespec.lifecycle.running import adopt

    found: dict[tuple[int, float], tuple[EngineProcess, RunningEngine]] = {}
    every = True
    for target in targets:
        process = _find(target)
        if isinstance(process, str):
            fail("stop", process)
            every = False
            continue
        if (process.pid, process.start_time) in found:
            continue
        try:
            found[(process.pid, process.start_time)] = (process, adopt(process))
        except EngineSpecError as err:
            fail("stop", err)
            every = False
    return list(found.values()), every


def _said(process: EngineProcess, result: StopResult) -> str:
    sent = ", ".join(f"{s.signal} to {s.target} {s.pid}" for s in result.signals)
    said = [result.container.detail] if result.container is not None else []
    done = "; ".join([*said, *([sent] if sent else [])]) or "no signal (already gone)"
    line = f"stopped {process.instance_id} (pid {process.pid}): {done}"
    return line + (f"\nstill alive: {', '.join(map(str, result.leftover))}" if result.leftover else "")


def _cmd_stop(args: argparse.Namespace) -> int:
    from concurrent.futures import ThreadPoolExecutor

    from enginespec.untrusted.documents import dumps

    engines, every = _adopted(args.targets)
    # All at once, as `docker stop` does: several engines take one grace period, not one each.
    try:
        with ThreadPoolExecutor(max(len(engines), 1)) as pool:
            results = list(pool.map(lambda pair: pair[1].stop(grace=args.grace), engines))
    finally:
        for _process, engine in engines:
            engine.close()
    if args.json and len(args.targets) == 1:
        for result in results:
            print(json_text(result))
    elif args.json:
        print(dumps([result.model_dump(mode="json") for result in results], indent=2))
    else:
        for (process, _engine), result in zip(engines, results, strict=True):
            print(_said(process, result))
    if not every:
        return 2
    return 1 if any(result.leftover for result in results) else 0


def _newest_log(log_dir: Path, instance_id: str) -> Path | None:
    folder = log_dir / instance_id
    if not folder.is_dir() or "/" in instance_id or instance_id.startswith("."):
        return None
    found = sorted(folder.glob("*.log"))
    return found[-1] if found else None


def _cmd_logs(args: argparse.Namespace) -> int:
    from enginespec.cli.targets import run_named
    from enginespec.lifecycle.logbook import follow_file, tail_file
    from enginespec.lifecycle.running import adopt

    found = _find(args.target)
    process = found if not isinstance(found, str) else None
    instance_id = process.instance_id if process is not None else args.target
    log_dir = _log_dir(args)
    run = run_named(args.target)
    if run is not None and (process is None or process.pid == run.pid):
        # a run's name: its log, where that run kept it (it may have ended long ago)
        instance_id, log_dir = run.instance_id, Path(args.log_dir or run.log_dir)
    kept = _newest_log(log_dir, instance_id)
    if kept is not None:
        try:
            for text in tail_file(kept, args.n):
                print(literal(text))
            if args.follow:
                for text in follow_file(kept):
                    print(literal(text), flush=True)
        except OSError as err:  # a FIFO or a device where a kept log should be
            fail("logs", f"{kept}: {err.strerror}; not read")
            return 1
        return 0
    if process is None:
        fail("logs", f"{found}; and no log is kept for {args.target!r}")
        return 2
    engine = adopt(process)
    source = engine.log_source
    if source.kind in ("terminal", "pipe", "none"):
        fail("logs", f"pid {process.pid}: no log to read: {source.reason}")
        engine.close()
        return 1
    try:
        for line in engine.logs(args.n) if not args.follow else engine.follow(args.n):
            print(literal(line.text), flush=args.follow)
    finally:
        engine.close()
    return 0


def add_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Adds ``run``, ``stop`` and ``logs`` through ``command(name, summary, description,
    *examples)``, the ``enginespec`` parser's maker of subcommands (so they read as every other)."""
    run = command(
        "run",
        "start a recipe in the foreground and print its output",
        "Launches the recipe (own process group, output kept under the log dir), prints its output "
        "and waits for it; lines over 64 KiB are cut. Ctrl-C stops it (exit 130), as do SIGTERM "
        "(143) and SIGHUP (129). A failed start prints the failure class, the lines that show the "
        "cause and a hint, and exits 1.",
        "enginespec run recipe.toml                  # until Ctrl-C",
        "enginespec run recipe.toml --quiet --timeout 1200",
    )
    run.add_argument("recipe", nargs="?", help="recipe file (.toml, .yaml, .yml or .json)")
    run.add_argument("--timeout", type=duration, default=600.0, help="how long to wait for ready")
    run.add_argument(
        "--stall-timeout", type=duration, default=None, help="give up after this long without progress"
    )
    run.add_argument(
        "--grace",
        type=grace,
        default=10.0,
        help="time between SIGTERM and SIGKILL on Ctrl-C; 0: at once",
    )
    run.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="print only the engine's id once it started, not its output (as ps -q prints only pids); "
        "with --json, only a failure's JSON",
    )
    run.add_argument("--json", action="store_true", help="print a failure as JSON")
    run.add_argument(
        "--name",
        help="the run's name, which stop, logs, restart and runs take (default: the engine id); "
        "refused while a run of that name is running",
    )
    run.add_argument(
        "-d",
        "--detach",
        action="store_true",
        help="run in the background: the engine outlives this terminal, its log still kept; prints "
        "the run's name (as docker run -d)",
    )
    # how a detached run tells the `run --detach` that started it how the start went
    run.add_argument("--report-fd", type=int, default=None, help=argparse.SUPPRESS)
    # `enginespec restart` of an engine no run keeps: this run adopts and restarts it (PID:TICKS)
    run.add_argument("--restart-of", default=None, help=argparse.SUPPRESS)
    run.set_defaults(handler=_cmd_run)
    stop = command(
        "stop",
        "stop a running engine and its whole process tree",
        "Each TARGET is a pid (the server or a worker), an engine id from `enginespec ps` (as the "
        "exporter's engine_id label gives it), :PORT, HOST:PORT or a URL; several are stopped at "
        "once (exit 2 when one names no engine: the others are stopped). SIGTERM, then SIGKILL "
        "after --grace seconds, through pidfds (never a reused pid); an engine in a Docker or "
        "Podman container is stopped through the runtime's API.",
        "enginespec stop 1234",
        "enginespec stop :8001 :8002",
        "enginespec stop vllm-8002-1b690e57 --grace 30 --json",
    )
    stop.add_argument(
        "targets", nargs="+", metavar="target", help="pid, engine id, run name, :PORT, HOST:PORT or URL"
    )
    stop.add_argument(
        "--grace", type=grace, default=10.0, help="time between SIGTERM and SIGKILL; 0: at once"
    )
    stop.add_argument(
        "--json", action="store_true", help="print the StopResult as JSON (a list for several targets)"
    )
    stop.set_defaults(handler=_cmd_stop)
    logs = command(
        "logs",
        "print an engine's output",
        "The newest log kept by `enginespec run` for the engine, else where a running engine's "
        "output goes (a file its stdout points at, its systemd journal, its container's log); says "
        "so when the output goes to a terminal or nowhere.",
        "enginespec logs 1234 -n 20",
        "enginespec logs vllm-8002-1b690e57 -f",
    )
    logs.add_argument("target", help="pid, engine id, run name, :PORT, HOST:PORT or URL")
    logs.add_argument("-n", type=int, default=100, help="lines to show")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    logs.set_defaults(handler=_cmd_logs)
    for sub in (run, logs):
        sub.add_argument("--log-dir", help="where logs are kept (default: the data dir's logs)")
        sub.add_argument(
            "--data-dir", help="data directory (default: $ENGINESPEC_DATA_DIR or the user data dir)"
        )
