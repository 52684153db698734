"""Every hand-labelled real command line of tests/data/argv-2026-public.jsonl (issue 41's engines, the
llama.cpp router's forms, and look-alikes that are not servers), on the active backend.

A record of an engine enginespec does not know yet is an expected failure, strictly: the day its
engine is added, the record must be read exactly as labelled, or this file fails. Runners (a
supervisor's children) are told by their parent, not their argv: their records are checked here for
the engine and facts their argv gives; the engines' own tests start them under their supervisors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from enginespec.definition.forks import fork_of
from enginespec.definition.registry import engine_ids, find_engine
from helpers.facts import argv_facts

CORPUS = Path(__file__).parents[1] / "data" / "argv-2026-public.jsonl"
#: The corpus's ids of llama.cpp's forks, which enginespec reads as llama.cpp (the fork named apart).
FORKS = {"ik-llamacpp": "llamacpp"}
#: The names enginespec gives those forks (``EngineProcess.fork``).
FORK_NAMES = {"ik-llamacpp": "ik_llama.cpp"}


def _records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]


def _engine(record: dict[str, Any]) -> str | None:
    engine = record["engine"]
    return FORKS.get(engine, engine) if engine is not None else None


def _known(record: dict[str, Any]) -> bool:
    engine = _engine(record)
    return engine is None or engine in engine_ids()


def _case(record: dict[str, Any]) -> Any:
    marks = (
        ()
        if _known(record)
        else pytest.mark.xfail(strict=True, reason=f"{record['engine']}: not yet an engine")
    )
    return pytest.param(record, marks=marks, id=f"{record['engine']}:{' '.join(record['argv'])[:60]}")


def _address(record: dict[str, Any]) -> tuple[str | None, int | None]:
    """(host, port) as enginespec gives them: a server on a unix socket (the corpus's port
    ``unix:PATH``, Docker Model Runner's runners) has the socket's path for host, and no port."""
    port = record["port"]
    if isinstance(port, str) and port.startswith("unix:"):
        return port.removeprefix("unix:"), None
    return record["host"], port


def test_the_corpus_is_whole() -> None:
    records = _records()
    assert len(records) >= 41
    assert sum(r["engine"] is None for r in records) >= 8
    assert all(r["source"] for r in records)


@pytest.mark.parametrize("record", [_case(r) for r in _records()])
def test_record(record: dict[str, Any]) -> None:
    facts = argv_facts(record["argv"], first_name=True)
    if record["engine"] is None:
        assert facts is None
        return
    assert facts is not None
    # A runner's role is its parent's word, not its argv's. The corpus's `worker` (joins a cluster,
    # serves no API) is enginespec's `follower`: its `worker` is a server's retitled child. Its
    # `supervisor` (xinference-supervisor, `ramalama serve`) fronts the engine's API: a `server`.
    role = {"runner": "server", "worker": "follower", "supervisor": "server"}.get(
        record["role"], record["role"]
    )
    expected = (_engine(record), record["model"], record["served_model_name"], *_address(record), role)
    assert facts == expected
    # a fork is named as the corpus names it (its id's engine the fork's), none for the engine itself
    fork = fork_of(find_engine(expected[0]).forks, record["argv"], None)
    assert fork == FORK_NAMES.get(record["engine"])
