"""``enginespec watch``: the engine servers of this host (or of agents) as they start, become
ready, change and stop: a table redrawn in place on a terminal, one line or JSON object per event
otherwise."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from enginespec.cli.args import duration
from enginespec.cli.common import MODEL_UNKNOWN, fail
from enginespec.cli.filters import Filters, add_filters, add_remote, parse_filters
from enginespec.display import literal

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions
    from rich.text import Text

    from enginespec.cli.pstable import Shown
    from enginespec.health.load import EngineLoad
    from enginespec.health.servedmodels import ServedModels
    from enginespec.scanning.watch import WatchEvent

#: the state a row shows before its health is checked.
HEALTH_PENDING = "checking"
#: How long a stopped engine's row stays, saying how it ended (``exited (SIGKILL)``), at the least:
#: long enough to be read; a longer ``--interval`` keeps it that long.
GONE_ROW_SECONDS = 2.0


def add_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Adds ``watch`` through the ``enginespec`` parser's maker of subcommands."""
    watch = command(
        "watch",
        "a live view of the engine servers on this host",
        "Shows the engines as they start, become ready, change and stop, in a table updated in "
        "place (rows that do not fit the terminal are counted); with --json, one JSON object per "
        "event (JSON Lines); piped, one line per event. Uses the kernel's process events when it "
        "may (root), else polls every --interval. Ctrl-C stops it (exit 0).",
        "enginespec watch",
        "enginespec watch vllm --filter port=8000",
        "enginespec watch --json | jq -c 'select(.type == \"stopped\")'",
    )
    add_filters(watch)
    watch.add_argument("--json", action="store_true", help="stream events as JSON Lines")
    watch.add_argument(
        "--interval", type=duration, default=1.0, help="re-check period, and polling period (1s, 500ms)"
    )
    watch.add_argument("--health", action=argparse.BooleanOptionalAction, default=True, help="check health")
    watch.add_argument("--health-interval", type=duration, default=2.0, help="health check period")
    watch.add_argument("--poll", action="store_true", help="poll even where process events are available")
    watch.add_argument(
        "--load",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="read each engine's load with its health: tells busy and stalled engines",
    )
    watch.add_argument(
        "--models",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="read what each server whose models come and go serves with its health: "
        "model_loaded, model_unloaded, model_sleeping and model_woke events",
    )
    watch.add_argument(
        "--stall-after",
        type=duration,
        default=None,
        help="seconds with requests pending and no token before 'stalled' (default: "
        "$ENGINESPEC_STALL_AFTER, else the engine's own, 60s)",
    )
    add_remote(watch)
    watch.add_argument(
        "--timeout", type=duration, default=2.0, help="with --remote: each agent's connect timeout"
    )
    watch.set_defaults(handler=_cmd_watch)


class _LiveTable:
    """What ``enginespec watch`` shows: the engines now running, fitted to the terminal's width
    and height each time it is drawn (so a resize is followed); rows that do not fit are counted
    (``+22 more``). With ``--remote``, rows carry their agent and each lost agent is said below.
    Only rows the filter shows are kept (an agent may announce any number of engines), and rich's
    refresh thread draws while the watch's thread applies events: both hold ``lock``. A stopped
    engine's row stays ``linger`` seconds more, saying how it ended."""

    def __init__(
        self,
        how: str,
        health: bool,
        filters: Filters,
        loads: Callable[[], Mapping[tuple[int, float], EngineLoad | None]] | None = None,
        linger: float = GONE_ROW_SECONDS,
        models: Callable[[], Mapping[tuple[int, float], ServedModels]] | None = None,
    ) -> None:
        self.how = how
        self.health = health
        self.filters = filters
        #: the watch's latest load readings (a local watch with load): RUN, WAIT, KV%, TOK/S
        self.loads = loads
        #: the watch's latest readings of what each server serves (MODEL shows its loaded ones)
        self.models = models
        self.engines: dict[tuple[str | None, int, float], Shown] = {}
        #: the rows of stopped engines, until when each is still shown (``time.monotonic()``)
        self.gone: dict[tuple[str | None, int, float], float] = {}
        self.linger = linger
        #: agent -> why it is not reached (``--remote``)
        self.lost: dict[str, str] = {}
        self.lock = threading.Lock()

    def apply(self, event: WatchEvent, agent: str | None = None) -> None:
        from enginespec.cli.pstable import Shown
        from enginespec.scanning.watch import HealthChanged, Stopped

        with self.lock:
            self.lost.pop(agent or "", None)
            if isinstance(event, Stopped):
                key = (agent, event.identity.pid, event.identity.start_time)
                if key in self.engines:
                    self.engines[key].state, self.engines[key].health = event.describe(), None
                    self.gone[key] = time.monotonic() + self.linger
                return
            key = (agent, event.process.pid, event.process.start_time)
            row = self.engines.get(key) or Shown(event.process, state=HEALTH_PENDING, agent=agent)
            row.process = event.process
            if isinstance(event, HealthChanged):
                row.health, row.state = event.health, event.type
            if self.filters.keeps(row):
                self.engines[key] = row
            else:  # not shown: forgotten (a later event that the filter keeps brings it back)
                self.engines.pop(key, None)

    def lose(self, agent: str, error: str) -> None:
        """An agent's stream is gone: its rows are stale until it tells them again."""
        with self.lock:
            self.engines = {key: row for key, row in self.engines.items() if key[0] != agent}
            self.gone = {key: until for key, until in self.gone.items() if key[0] != agent}
            self.lost[agent] = error

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Text]:
        with self.lock:
            drawn = self._lines(console, options)
        yield from drawn

    def _lines(self, console: Console, options: ConsoleOptions) -> list[Text]:
        from rich.text import Text

        from enginespec.cli.pstable import sort_key, table_lines

        width = options.max_width
        height = options.height or console.size.height
        now = time.monotonic()
        for key in [key for key, until in self.gone.items() if until <= now]:
            del self.gone[key]
            self.engines.pop(key, None)
        shown = sorted(self.engines.values(), key=sort_key)
        if self.loads is not None:
            readings = self.loads()
            for row in shown:
                row.load = readings.get((row.process.pid, row.process.start_time))
        if self.models is not None:
            served = self.models()
            for row in shown:
                row.models = served.get((row.process.pid, row.process.start_time))
        # the load columns only when some engine reports its load
        load = any(row.load is not None and row.load.available for row in shown)
        title = f"{len(shown)} engine server(s), {self.how}; Ctrl-C to stop"
        drawn = [Text(title if len(title) <= width else title[: max(width - 1, 0)] + "…", style="dim")]
        lost = [literal(f"{agent}: {error}") for agent, error in sorted(self.lost.items())]
        room = max(height - 3 - len(lost), 1)  # the title, the header, the lost agents, the cursor's line
        if shown:
            hidden = 0
            if len(shown) > room:
                hidden = len(shown) - (room - 1)  # one line says how many more
                shown = shown[: room - 1]
            header, *body = table_lines(shown, self.health, width, load=load, load_droppable=True)
            drawn.append(Text(header, style="bold", no_wrap=True, overflow="ellipsis"))
            drawn += [Text(line, no_wrap=True, overflow="ellipsis") for line in body]
            if hidden:
                more = f"+{hidden} more (enginespec ps lists them all)"
                drawn.append(Text(more, style="dim", no_wrap=True))
        drawn += [Text(line, style="red", no_wrap=True, overflow="ellipsis") for line in lost]
        return drawn


def _event_line(event: WatchEvent) -> str:
    """One event as a literal text line (``watch`` when stdout is not a terminal)."""
    from enginespec.scanning.watch import Changed, ModelChanged, Stopped, WorkerLost

    if isinstance(event, Stopped):
        who = event.identity
        return literal(f"stopped {who.pid} {who.engine} {who.instance_id} {event.describe()}")
    p = event.process
    detail = " ".join(event.fields) if isinstance(event, Changed) else p.base_url or "-"
    if isinstance(event, WorkerLost):
        detail = event.worker.describe()
    if isinstance(event, ModelChanged):
        where = f" runner {event.model.runner_pid}" if event.model.runner_pid is not None else ""
        return literal(
            f"{event.type} {p.pid} {p.engine} {p.instance_id} {event.model.name}"
            f" ({event.previous or 'new'} -> {event.model.state}){where}"
        )
    return literal(f"{event.type} {p.pid} {p.engine} {p.instance_id} {p.model or MODEL_UNKNOWN} {detail}")


class _EventFilter:
    """The events of the engines a watch's terms and ``--filter`` keep: judged on each event's
    process, with the health state last seen for it; an engine's ``stopped`` passes when its
    earlier events did. Only what the filter keeps is remembered (an agent may announce any
    number of engines): an engine it does not keep is judged on its next event alone."""

    def __init__(self, filters: Filters) -> None:
        self.filters = filters
        #: the rows the filter keeps now, by (agent, pid, start time)
        self.rows: dict[tuple[str | None, int, float], Shown] = {}
        #: the engines some event of which passed, until they stop
        self.kept: set[tuple[str | None, int, float]] = set()

    def keeps(self, event: WatchEvent, agent: str | None = None) -> bool:
        from enginespec.cli.pstable import Shown
        from enginespec.scanning.watch import HealthChanged, Stopped

        if isinstance(event, Stopped):
            key = (agent, event.identity.pid, event.identity.start_time)
            self.rows.pop(key, None)
            if key in self.kept:
                self.kept.discard(key)
                return True
            return False
        key = (agent, event.process.pid, event.process.start_time)
        row = self.rows.get(key) or Shown(event.process, agent=agent)
        row.process = event.process
        if isinstance(event, HealthChanged):
            row.health, row.state = event.health, event.type
        if self.filters.keeps(row):
            self.rows[key] = row
            self.kept.add(key)
            return True
        self.rows.pop(key, None)
        return False


def _cmd_watch(args: argparse.Namespace) -> int:
    from enginespec.errors import InvalidInputError
    from enginespec.scanning.scanner import Scanner
    from enginespec.scanning.watch import event_json

    try:
        chosen = _EventFilter(parse_filters(args))
    except InvalidInputError as err:
        fail("watch", err)
        return 2
    if "health" in chosen.filters.keys and not args.health:
        fail("watch", "--filter health=... needs the health checks: drop --no-health")
        return 2
    if args.remote:
        try:
            return _watch_remote(args, chosen)
        except InvalidInputError as err:
            fail("watch", err)
            return 2
    watch = Scanner().watch(
        args.interval,
        health=args.health,
        health_interval=args.health_interval,
        poll=args.poll,
        load=args.load,
        stall_after=args.stall_after,
        models=args.models and args.health,
    )
    # Said on stderr, so a JSON stream stays pure and a reader knows how late events may come.
    how = "process events" if watch.mode == "events" else f"polling every {args.interval:g}s"
    reason = f" ({watch.polling_reason})" if watch.polling_reason else ""
    try:
        if args.json or not sys.stdout.isatty():
            print(f"enginespec watch: {how}{reason}", file=sys.stderr, flush=True)
        events = (event for event in watch if chosen.keeps(event))
        if args.json or not sys.stdout.isatty():
            render = event_json if args.json else _event_line
            for event in events:
                line = _rendered(event, render)
                if line is not None:
                    print(line, flush=True)
        else:
            from rich.console import Console
            from rich.live import Live

            console = Console(markup=False, highlight=False, emoji=False)
            table = _LiveTable(
                how,
                args.health,
                chosen.filters,
                (lambda: watch.loads) if args.load else None,
                linger=max(args.interval, GONE_ROW_SECONDS),
                models=lambda: watch.models,
            )
            with Live(table, console=console, refresh_per_second=4, transient=False):
                for event in watch:
                    table.apply(event)
    except KeyboardInterrupt:  # how a watch is stopped: not an interruption
        pass
    finally:
        watch.close()
    return 0


def _rendered(event: WatchEvent, render: Callable[[WatchEvent], str]) -> str | None:
    """An event as a line, or ``None`` when it cannot be made (the error boundary: the watch
    goes on, the failure counted and logged once)."""
    from enginespec.untrusted.boundary import contained

    return contained("watch event", lambda: render(event), lambda _reason: None)


def _watch_remote(args: argparse.Namespace, chosen: _EventFilter) -> int:
    """``watch --remote``: the agents' events, merged (JSON objects carry their ``agent``; a lost
    agent is a ``host_lost`` object, a line on stderr, or a red line under the table)."""
    from enginespec.cli.filters import agents
    from enginespec.fleet.remote import HostLost, watch_remote
    from enginespec.untrusted.documents import dumps

    urls, token = agents(args)
    items = watch_remote(urls, timeout=args.timeout, token=token)
    try:
        if args.json or not sys.stdout.isatty():
            print(f"enginespec watch: events of {len(urls)} agent(s)", file=sys.stderr, flush=True)
        if args.json or not sys.stdout.isatty():
            for item in items:
                # "host" is the old name of "agent", kept for readers of the old objects
                if isinstance(item, HostLost):
                    lost = {"type": "host_lost", "agent": item.agent, "host": item.agent, "error": item.error}
                    if args.json:
                        sys.stdout.write(dumps(lost) + "\n")
                    print(
                        literal(f"enginespec watch: {item.agent}: {item.error}"), file=sys.stderr, flush=True
                    )
                elif chosen.keeps(item.event, item.agent):
                    if args.json:
                        said = item.event.model_dump(mode="json")  # as event_json writes it
                        sys.stdout.write(dumps({"agent": item.agent, "host": item.agent, **said}) + "\n")
                    else:
                        print(literal(item.agent) + " " + _event_line(item.event), flush=True)
                sys.stdout.flush()
        else:
            from rich.console import Console
            from rich.live import Live

            console = Console(markup=False, highlight=False, emoji=False)
            table = _LiveTable(f"events of {len(urls)} agent(s)", args.health, chosen.filters)
            with Live(table, console=console, refresh_per_second=4, transient=False):
                for item in items:
                    if isinstance(item, HostLost):
                        table.lose(item.agent, item.error)
                    else:
                        table.apply(item.event, item.agent)
    except KeyboardInterrupt:
        pass
    finally:
        items.close()
    return 0
