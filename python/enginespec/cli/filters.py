"""Which engines ``ps`` and ``watch`` show: the TERMs (an engine, an engine id, a pid or where it
listens) and ``--filter KEY=VALUE``, and the ``--remote`` flags both take."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from enginespec.cli.common import engine_ids, engine_names
from enginespec.cli.targets import address, is_target, listens_at

if TYPE_CHECKING:
    from enginespec.cli.pstable import Shown
    from enginespec.process.record import EngineProcess

FILTER_KEYS = ("engine", "id", "pid", "health", "role", "port", "model")


class Filters:
    """What ``ps`` keeps: a row passes when it matches one of the terms (if any) and every key of
    ``--filter`` (one of its values: ``engine=vllm,engine=sglang`` is either)."""

    def __init__(self) -> None:
        self.terms: list[str] = []
        self.keys: dict[str, set[str]] = {}

    def keeps(self, row: Shown, *, checked: bool = True) -> bool:
        """Whether the row passes; before its health is checked (``checked=False``) the
        ``health`` key is left for later."""
        p = row.process
        if self.terms and not any(_names(term, p) for term in self.terms):
            return False
        return all(
            any(_matches(key, value, row) for value in values)
            for key, values in self.keys.items()
            if checked or key != "health"
        )


def _names(term: str, p: EngineProcess) -> bool:
    """Whether ``term`` (an engine, an engine id, a pid, or where it listens) names process ``p``."""
    if term.isdigit():
        return int(term) == p.pid or int(term) in p.worker_pids
    where = address(term)
    if where is not None:
        return listens_at(p, where)
    return term in (p.engine, p.instance_id) or term == f"{p.instance_id}-pid{p.pid}"


def _matches(key: str, value: str, row: Shown) -> bool:
    p = row.process
    if key == "model":
        names = (p.model or "", p.model_name or "", *p.served_model_names)
        return any(value in name for name in names)
    if key == "health":
        return row.state == value
    if key == "port":
        return str(p.effective_port) == value
    if key == "role":
        return p.role == value
    return _names(value, p)  # engine, id, pid


def parse_filters(args: argparse.Namespace) -> Filters:
    """The terms and ``--filter`` of ``ps`` and ``watch``; ``InvalidInputError`` naming the bad one."""
    from enginespec.errors import InvalidInputError
    from enginespec.suggest import did_you_mean

    ids, names = engine_ids(), engine_names()
    filters = Filters()
    for term in args.terms:
        if not (term.lower() in names or is_target(term)):
            raise InvalidInputError(
                f"{term!r} is not an engine, an engine id, a pid, :PORT, HOST:PORT or a URL "
                f"(engines: {', '.join(ids)}){did_you_mean(term, names)}"
            )
        filters.terms.append(names.get(term.lower(), term))
    for text in args.filter:
        for item in text.split(","):
            key, eq, value = item.partition("=")
            if not eq or key not in FILTER_KEYS or not value:
                raise InvalidInputError(
                    f"--filter: {item!r} is not KEY=VALUE with KEY one of {', '.join(FILTER_KEYS)}"
                    + (did_you_mean(key, FILTER_KEYS) if eq else "")
                )
            if key == "engine":
                if value.lower() not in names:
                    raise InvalidInputError(
                        f"--filter: engine {value!r} is not one of {', '.join(ids)}"
                        + did_you_mean(value, names)
                    )
                value = names[value.lower()]
            filters.keys.setdefault(key, set()).add(value)
    return filters


def add_remote(command: argparse.ArgumentParser) -> None:
    """``--remote`` and ``--token-file`` of ``ps`` and ``watch`` (see :mod:`enginespec.fleet.remote`)."""
    command.add_argument(
        "--remote",
        action="append",
        default=[],
        metavar="URL[,URL...]",
        help="the engines that agents (enginespec agent) report instead of this host's, with a HOST "
        "column: http://HOST:PORT, https://HOST:PORT or unix:PATH; --timeout is each host's",
    )
    command.add_argument("--token-file", help="with --remote: the token the agents require")


def add_filters(command: argparse.ArgumentParser) -> None:
    """The terms and ``--filter`` of ``ps`` and ``watch`` (see :class:`Filters`)."""
    command.add_argument(
        "terms", nargs="*", metavar="TERM", help="an engine, an engine id, a pid, :PORT, HOST:PORT or a URL"
    )
    command.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"keep matching rows; KEY: {', '.join(FILTER_KEYS)} (model: contains); comma-separated "
        "or repeated; one key several times: any of its values",
    )


def agents(args: argparse.Namespace) -> tuple[list[str], str | None]:
    """The agents' addresses ``--remote`` names (comma-separated or repeated) and the token of
    ``--token-file`` (``InvalidInputError`` when it cannot be read)."""
    from enginespec.fleet.agent import read_token

    urls = [url for text in args.remote for url in text.split(",") if url]
    return urls, read_token(args.token_file) if args.token_file else None
