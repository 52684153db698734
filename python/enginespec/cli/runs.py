"""``run``'s records and ``run --detach``, and the ``runs`` command that lists them (as
``docker ps -a`` lists containers): each run of a recipe is recorded under the data dir
(:mod:`enginespec.lifecycle.runrecords`) as it starts, becomes ready and ends."""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from enginespec.cli.args import duration, grace
from enginespec.cli.common import fail
from enginespec.display import age, literal

if TYPE_CHECKING:
    from enginespec.cli.table import Column
    from enginespec.lifecycle.running import RunningEngine
    from enginespec.lifecycle.runrecords import RunRecord, RunState

#: How long ``run --detach`` waits for the detached ``run`` to say it started the engine.
DETACH_WAIT_SECONDS = 120.0


def data_dir(args: argparse.Namespace) -> Path:
    """The data dir ``--data-dir`` gives, else the configured one."""
    from enginespec.config import Config

    return (Config(data_dir=args.data_dir) if args.data_dir else Config()).data_dir


def name_in_use(args: argparse.Namespace) -> str | None:
    """Why ``--name`` cannot be taken (a run of that name still runs), or ``None``."""
    from enginespec.lifecycle import runrecords

    if not args.name:
        return None
    runrecords.checked_name(args.name)
    found = runrecords.find(data_dir(args), args.name)
    if found is not None and (found.supervised() or found.engine_alive()):
        return f"--name: the run {args.name!r} is running (engine pid {found.pid}); stop it first"
    return None


class Recorder:
    """Keeps one run's record up to date; a record that cannot be written is said once and the
    run goes on (the engine matters more than its record)."""

    def __init__(self, args: argparse.Namespace, engine: RunningEngine, log_dir: Path) -> None:
        from enginespec._host.root import HOST_ROOT
        from enginespec.lifecycle.runrecords import RunRecord

        self.data_dir = data_dir(args)
        self.said = False
        self.record: RunRecord | None = None
        engine_ticks, own_ticks = HOST_ROOT.start_ticks(engine.pid), HOST_ROOT.start_ticks(os.getpid())
        if engine_ticks is None or own_ticks is None:
            return  # the engine is gone already: its outcome is said on stderr
        self.record = RunRecord(
            name=args.name or engine.instance_id,
            # a restarted engine's run has no recipe: its command was the engine's own
            recipe=os.path.abspath(args.recipe) if args.recipe else "",
            engine=engine.engine,
            instance_id=engine.instance_id,
            pid=engine.pid,
            start_ticks=engine_ticks,
            supervisor_pid=os.getpid(),
            supervisor_start_ticks=own_ticks,
            log_dir=os.fspath(log_dir.absolute()),
            detached=args.report_fd is not None,
            started_at=time.time(),
        )
        self._write()

    def _write(self) -> None:
        from enginespec.errors import FileWriteError
        from enginespec.lifecycle import runrecords

        if self.record is None:
            return
        try:
            runrecords.write(self.data_dir, self.record)
        except FileWriteError as err:
            if not self.said:
                fail("run", f"{err}; the run goes on unrecorded")
                self.said = True

    def ready(self) -> None:
        if self.record is not None:
            self.record = self.record.model_copy(update={"state": "ready"})
            self._write()

    def restarted(self, engine: RunningEngine) -> None:
        """The engine was started again (``enginespec restart``): its new pid, one more restart."""
        from enginespec._host.root import HOST_ROOT

        ticks = HOST_ROOT.start_ticks(engine.pid)
        if self.record is not None and ticks is not None:
            update = {
                "pid": engine.pid,
                "start_ticks": ticks,
                "state": "starting",
                "restarts": self.record.restarts + 1,
            }
            self.record = self.record.model_copy(update=update)
            self._write()

    def end(self, state: RunState, outcome: str, status: int) -> None:
        if self.record is not None:
            update = {"state": state, "outcome": outcome, "exit_status": status, "ended_at": time.time()}
            self.record = self.record.model_copy(update=update)
            self._write()


def report(args: argparse.Namespace, line: str) -> None:
    """Tells the ``run --detach`` that started this run (through its pipe) how the start went."""
    if args.report_fd is None:
        return
    try:
        os.write(args.report_fd, (line + "\n").encode("utf-8", "surrogateescape")[:4096])
        os.close(args.report_fd)
    except OSError:
        pass  # it gave up waiting: the record says how the run went
    args.report_fd = None


def detach(args: argparse.Namespace) -> int:
    """``run --detach``: the same ``run`` in a session of its own, its output to nowhere (the
    engine's log is kept by it, under the log dir), so that it outlives this terminal; prints the
    run's name once the engine started."""
    name, why = start_detached(args, [os.path.abspath(args.recipe)])
    if name is not None:
        print(literal(name), flush=True)
        fail("run", f"running in the background as {literal(name)}: enginespec logs {literal(name)} -f")
        return 0
    fail("run", why)
    return 1


def start_detached(args: argparse.Namespace, source: list[str]) -> tuple[str | None, str]:
    """Starts ``enginespec run SOURCE`` (a recipe, or ``--restart-of PID:TICKS``) with ``args``'s
    options in a session of its own, and waits for it to say it started the engine: (the run's
    name, "") once it did, else (``None``, why not)."""
    read_end, write_end = os.pipe()
    argv = [sys.executable, "-m", "enginespec.cli", "run", *source, "-q"]
    argv += ["--report-fd", str(write_end), "--timeout", str(args.timeout), "--grace", str(args.grace)]
    for flag, value in (("--stall-timeout", args.stall_timeout), ("--name", args.name)):
        if value is not None:
            argv += [flag, str(value)]
    for flag, value in (("--log-dir", args.log_dir), ("--data-dir", args.data_dir)):
        if value:
            argv += [flag, os.path.abspath(value)]
    child = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        pass_fds=(write_end,),
        start_new_session=True,
    )
    os.close(write_end)
    said, deadline = b"", time.monotonic() + DETACH_WAIT_SECONDS
    try:
        while b"\n" not in said and (left := deadline - time.monotonic()) > 0:
            if not select.select([read_end], [], [], left)[0]:
                break
            chunk = os.read(read_end, 4096)
            if not chunk:
                break
            said += chunk
    finally:
        os.close(read_end)
    line = said.split(b"\n", 1)[0].decode("utf-8", "replace")
    if line.startswith("started "):
        return line.removeprefix("started "), ""
    if child.poll() is None and not line:
        return None, f"no word from the detached run (pid {child.pid}) in {DETACH_WAIT_SECONDS:.0f} s"
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=30)
    return None, literal(
        line.removeprefix("error: ")
    ) or "the detached run ended before it started the engine"


def _signal_run(record: RunRecord) -> str | None:
    """Sends SIGUSR1 to the ``run`` that keeps ``record``'s engine, through a pidfd opened and then
    checked to be that very process (its start, and a user this caller may signal); why not,
    or ``None`` once sent."""
    from enginespec._host.root import HOST_ROOT

    try:
        pidfd = os.pidfd_open(record.supervisor_pid)
    except OSError as err:
        return f"its run (pid {record.supervisor_pid}) is gone: {err.strerror}"
    try:
        found, status = HOST_ROOT.stat(record.supervisor_pid), HOST_ROOT.status(record.supervisor_pid)
        if found is None or found.start_ticks != record.supervisor_start_ticks or status is None:
            return f"its run (pid {record.supervisor_pid}) is gone"
        if os.geteuid() not in (0, status.ruid):
            return f"its run (pid {record.supervisor_pid}) is another user's (uid {status.ruid})"
        # its argv as `run --detach` starts it, or as a person types `enginespec run`
        argv = HOST_ROOT.read(record.supervisor_pid, "cmdline", 1 << 16).split(b"\0")
        if b"run" not in argv or not any(word.endswith((b"enginespec", b"enginespec.cli")) for word in argv):
            return f"pid {record.supervisor_pid} is not an `enginespec run` (the record is not to be trusted)"
        signal.pidfd_send_signal(pidfd, signal.SIGUSR1)
        return None
    except OSError as err:
        return f"its run (pid {record.supervisor_pid}) cannot be told: {err.strerror}"
    finally:
        os.close(pidfd)


def _cmd_restart(args: argparse.Namespace) -> int:
    from enginespec.lifecycle import runrecords

    target = args.target
    record = runrecords.find(data_dir(args), target) if runrecords.NAME.fullmatch(target) else None
    if record is None or (not record.supervised() and record.engine_alive()):
        # an engine no run keeps (or whose run was killed): by pid, engine id, address
        return _restart_engine(args, target if record is None else str(record.pid))
    if args.name:
        fail("restart", f"--name: {target!r} is a run already (its name stays)")
        return 2
    return _restart_run(args, record)


def _restart_run(args: argparse.Namespace, record: RunRecord) -> int:
    """Tells the ``run`` that keeps ``record``'s engine to restart it, and waits until it did."""
    from enginespec.lifecycle import runrecords

    name = record.name
    if not record.supervised():
        fail("restart", f"the run {name!r} is not running: {record.outcome or 'its run is gone'}")
        return 1
    if record.state != "ready":
        fail("restart", f"the run {name!r} is {record.state}: a run is restarted once it is ready")
        return 1
    why = _signal_run(record)
    if why is not None:
        fail("restart", f"the run {name!r}: {why}")
        return 1
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        now = runrecords.find(data_dir(args), name)
        if now is not None and now.restarts > record.restarts:
            print(f"restarted {literal(name)}: pid {record.pid} -> {now.pid} ({now.instance_id})")
            return 0
        if now is None or not now.supervised():
            break
        time.sleep(0.1)
    fail("restart", f"the run {name!r} did not say it restarted (enginespec runs -a; enginespec logs {name})")
    return 1


def _restart_engine(args: argparse.Namespace, target: str) -> int:
    """Restarts an engine no run keeps: a detached ``run`` adopts it, stops it and starts its
    command again (as its owner, with its environment and working directory, read from
    ``/proc``), and from then on keeps it as a run (``--name``, else its engine id), its log in
    the log dir."""
    from enginespec.cli.targets import find
    from enginespec.errors import InvalidInputError
    from enginespec.lifecycle import runrecords

    try:
        process = find(target)
    except InvalidInputError as err:
        fail("restart", err)
        return 2
    records, _problems = runrecords.records(data_dir(args))
    for record in records:
        if record.pid == process.pid and record.start_ticks == process._start_ticks and record.supervised():
            if args.name:
                fail("restart", f"--name: the run {record.name!r} keeps this engine already (its name stays)")
                return 2
            return _restart_run(args, record)  # its run restarts it, its log kept on
    name = args.name or process.instance_id
    try:
        runrecords.checked_name(name)
        taken = name_in_use(argparse.Namespace(name=name, data_dir=args.data_dir))
    except InvalidInputError as err:
        fail("restart", err)
        return 2
    if taken is not None:
        fail("restart", taken)
        return 2
    options = argparse.Namespace(
        name=name,
        timeout=args.ready_timeout,
        grace=args.grace,
        stall_timeout=None,
        log_dir=None,
        data_dir=args.data_dir,
    )
    started, why = start_detached(options, ["--restart-of", f"{process.pid}:{process._start_ticks}"])
    if started is None:
        fail("restart", f"{process.instance_id} (pid {process.pid}): {why}")
        return 1
    now = runrecords.find(data_dir(args), started)
    new = f"pid {now.pid}" if now is not None else "a new pid"
    engine = literal(process.instance_id)
    print(f"restarted {engine}: pid {process.pid} -> {new}, kept by the run {literal(started)}")
    fail("restart", f"its log: enginespec logs {literal(started)} -f; enginespec runs lists it")
    return 0


def _cmd_runs(args: argparse.Namespace) -> int:
    from enginespec.cli.table import fit, lines
    from enginespec.lifecycle import runrecords
    from enginespec.untrusted.documents import dumps

    found, problems = runrecords.records(data_dir(args))
    for problem in problems:
        fail("runs", literal(problem))
    if not args.all:
        found = [r for r in found if r.engine_alive() or r.supervised()]
    if args.json:
        print(dumps([r.model_dump(mode="json") for r in found], indent=2))
        return 0
    if args.quiet:
        for record in found:
            print(literal(record.name))
        return 0
    if not found:
        return 0
    columns = _columns(time.time())
    cells = [[literal(column.cell(record)) for column in columns] for record in found]
    headers, shown = fit(columns, cells, _width())
    for line in lines(headers, shown):
        print(line)
    return 0


def _columns(now: float) -> tuple[Column[RunRecord], ...]:
    from enginespec.cli.table import Column

    return (
        Column("NAME", lambda r: r.name, shorten="middle", minimum=12),
        Column("ENGINE ID", lambda r: r.instance_id, drop=2),
        Column("PID", lambda r: str(r.pid)),
        Column("STATE", _state),
        Column("STARTED", lambda r: age(now - r.started_at), drop=1),
        Column("OUTCOME", lambda r: r.outcome or "-", shorten="end", minimum=20),
    )


def _state(record: RunRecord) -> str:
    if record.state in ("ended", "failed"):
        return record.state
    if record.engine_alive():
        return record.state
    # its `run` was killed (SIGKILL leaves no word) and the engine is gone
    return "gone"


def _width() -> int | None:
    import shutil

    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def add_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Adds ``runs`` and ``restart`` through the ``enginespec`` parser's maker of subcommands."""
    runs = command(
        "runs",
        "list the runs of `enginespec run`, with how each went",
        "Each run of a recipe (in the foreground or --detach) is recorded under the data dir's "
        "runs/ as it starts, becomes ready and ends: its name (--name, else the engine id), the "
        "engine's id and pid, its state and how it ended. Lists the running ones; -a all.",
        "enginespec runs",
        "enginespec runs -a",
        "enginespec runs -a --json | jq '.[] | select(.state == \"failed\")'",
    )
    runs.add_argument("-a", "--all", action="store_true", help="also the runs that ended")
    runs.add_argument("-q", "--quiet", action="store_true", help="print the names only")
    runs.add_argument("--json", action="store_true", help="print the records as JSON")
    runs.set_defaults(handler=_cmd_runs)
    restart = command(
        "restart",
        "restart an engine: a run's, by its name, or any, by pid, engine id or address",
        "A run's engine (in the foreground or --detach): tells the `enginespec run` that keeps it to "
        "stop it (SIGTERM, SIGKILL after the run's --grace) and start the same command again, its "
        "log kept on, and waits until the run says it did; a run is restarted once it is ready. "
        "Any other engine (a pid, an engine id, :PORT, HOST:PORT or a URL): a detached run stops it "
        "(SIGTERM, SIGKILL after --grace) and starts its command again as its owner, with the "
        "environment and working directory it had (read from the kernel: root, or its owner, may), and "
        "keeps it from then on as a run named --name (default: its engine id), its log in the data "
        "dir, as `run --detach` does; says so once the new process started.",
        "enginespec run recipe.toml --detach --name qwen",
        "enginespec restart qwen",
        "enginespec restart :8001 --name qwen-8001",
    )
    restart.add_argument(
        "target",
        metavar="TARGET",
        help="a run's name (enginespec runs), pid, engine id, :PORT, HOST:PORT or URL",
    )
    restart.set_defaults(handler=_cmd_restart)
    restart.add_argument(
        "--timeout",
        type=duration,
        default=60.0,
        help="how long to wait for a run to say it restarted its engine (its own --grace included)",
    )
    restart.add_argument(
        "--name", help="for an engine no run keeps: the name of the run that keeps it from then on"
    )
    restart.add_argument(
        "--grace",
        type=grace,
        default=10.0,
        help="for an engine no run keeps: time between SIGTERM and SIGKILL; 0: at once",
    )
    restart.add_argument(
        "--ready-timeout",
        type=duration,
        default=600.0,
        help="for an engine no run keeps: how long its new run waits for it to be ready",
    )
    for sub in (runs, restart):
        sub.add_argument(
            "--data-dir", help="data directory (default: $ENGINESPEC_DATA_DIR or the user data dir)"
        )
