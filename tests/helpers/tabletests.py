"""Tests made from an engine's tables, the same check over each engine's own rows: its launch forms
and look-alikes read off argv, the states its health answers give, the answers its identity probe
takes. An engine's test module assigns what these return to its own test names, so pytest collects
them there (``test_health = health_test("exo", "/v1/models", [...])``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from enginespec import get_engine_spec, parse_argv
from enginespec.definition.records import HealthAnswer
from enginespec.health.checks import check_health
from helpers.facts import argv_facts
from helpers.fakeserver import Answer, serving
from helpers.procs import Procs
from helpers.simpleservers import Served

Test = Callable[..., None]


def _argv_id(value: object) -> str:
    return " ".join(value) if isinstance(value, list) else ""


def _short_argv_id(value: object) -> str:
    return " ".join(value)[:60] if isinstance(value, list) else ""


def argv_tests(
    golden: Sequence[tuple[list[str], tuple[Any, ...]]], not_servers: Sequence[list[str]]
) -> tuple[Test, Test]:
    """Two tests: each ``golden`` argv reads as its (engine, model, first served name, host, port,
    role); no ``not_servers`` argv is any engine's server."""

    @pytest.mark.parametrize(("argv", "facts"), golden, ids=_argv_id)
    def test_golden_forms(argv: list[str], facts: tuple[Any, ...]) -> None:
        assert argv_facts(argv, first_name=True) == facts

    @pytest.mark.parametrize("argv", not_servers, ids=" ".join)
    def test_look_alikes_are_not_servers(argv: list[str]) -> None:
        assert parse_argv(argv) is None

    return test_golden_forms, test_look_alikes_are_not_servers


def launch_forms_test(
    engine: str,
    forms: Sequence[tuple[list[str], tuple[Any, ...] | None]],
    fields: tuple[str, ...] = ("model", "host", "port"),
) -> Test:
    """One test: each argv of ``forms`` with facts is ``engine``'s server with those ``fields``
    (of model, host and port; a field left out is None) and no served name; each argv with None is
    no engine's server."""
    order = ("model", "host", "port")
    assert set(fields) <= set(order), fields

    @pytest.mark.parametrize(("argv", "facts"), forms, ids=_short_argv_id)
    def test_launch_forms(argv: list[str], facts: tuple[Any, ...] | None) -> None:
        found = argv_facts(argv)
        if facts is None:
            assert found is None
            return
        given = dict(zip(fields, facts, strict=True))
        model, host, port = (given.get(name) for name in order)
        assert found == (engine, model, (), host, port, "server")

    return test_launch_forms


def health_test(engine: str, path: str, cases: Sequence[tuple[Answer, str]]) -> Test:
    """One test: ``engine``'s health asked of a server answering each case's answer at ``path`` is
    the case's state, said as ``engine``'s."""

    @pytest.mark.parametrize(("answer", "state"), cases)
    def test_health(answer: Answer, state: str) -> None:
        with serving({path: [answer]}) as server:
            health = check_health(engine, server.url, timeout=10)
        assert health.state == state, health
        assert health.engine == engine

    return test_health


def hostile_health_test(
    started: Callable[[Procs, dict[str, list[Answer]]], Served],
    path: str,
    answers: Sequence[Answer],
    ids: Sequence[str],
) -> Test:
    """One test: the health of a real process ``started`` with a server answering ``path`` with
    each of ``answers`` (no answer its engine gives when well: HTML, too deep, of the wrong type,
    huge, ...) is said, unknown or unhealthy, never ready and never a crash."""

    @pytest.mark.parametrize("answer", answers, ids=ids)
    def test_hostile_health_answers_are_said(procs: Procs, answer: Answer) -> None:
        with started(procs, {path: [answer]}) as (process, _server):
            health = check_health(process)
        assert health.state in ("unknown", "unhealthy"), health

    return test_hostile_health_answers_are_said


def identity_probe_test(
    engine: str, cases: Sequence[tuple[int, bytes, bool]], path: str | None = None
) -> Test:
    """One test: ``engine``'s identity probe (asked at ``path`` where given) takes each case's
    answer (status, body) as its engine's or not, as the case says."""

    @pytest.mark.parametrize(("status", "body", "ours"), cases)
    def test_the_identity_probe(status: int, body: bytes, ours: bool) -> None:
        probe = get_engine_spec(engine).serving.identity
        assert probe is not None
        if path is not None:
            assert probe.path == path
        assert probe.matches(HealthAnswer(status, body)) is ours

    return test_the_identity_probe
