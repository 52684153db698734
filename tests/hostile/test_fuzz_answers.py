"""A fuzz target for what engines answer (issue 44), driving the CLI's and the agent's code paths,
not only the parsers: hypothesis draws hostile bodies (JSON nested thousands deep, numbers no
float holds, `NaN`/`Infinity` literals, 65-bit integers, bytes that are no text, Prometheus
samples of 1e308 and `+Inf`), real servers on 127.0.0.1 answer them to real engine processes'
sockets, and each round goes through health (with the served-model check), two load readings,
every engine's own body parsing, ``engine_document`` as `ps --json` and the agent's
``/v1/engines`` build it, both JSON writers, the `ps` table with its load columns, and an agent's
answer read back by `ps --remote`. Nothing may raise, and no JSON out may be non-strict.

Runs with the suite (a fixed number of examples); ``HYPOTHESIS_PROFILE=fuzz`` runs many more."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from enginespec import EngineProcess, Scanner
from enginespec.definition.registry import all_engines
from enginespec.health.checks import check_health
from enginespec.health.load import check_load, parse_metrics
from helpers.fakeserver import Answer, FakeEngine, bound_socket
from helpers.procs import Procs

EXAMPLES = 2000 if os.environ.get("HYPOTHESIS_PROFILE") == "fuzz" else 60

_numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e308, -1e308, 1.7976931348623157e308, 5e-324]),
    st.integers(min_value=-(1 << 70), max_value=1 << 70),
    st.integers(min_value=0, max_value=10**60).map(lambda n: n * 10**340),
)
_scalars = st.one_of(st.none(), st.booleans(), _numbers, st.text(max_size=20))
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(["id", "status", "data", "models", "name", "x"]), inner, max_size=4),
    ),
    max_leaves=12,
)


@st.composite
def _json_bodies(draw: st.DrawFn) -> bytes:
    """JSON as an engine might shape it (``status``, ``data``, ``models``), with hostile values,
    wrapped in a nesting of any depth; ``NaN``/``Infinity`` as Python writes them."""
    value = draw(_values)
    shape = draw(st.sampled_from(["status", "data", "models", "bare"]))
    if shape == "status":
        value = {"status": draw(st.sampled_from(["ok", "healthy", "unhealthy"])), "x": value}
    elif shape == "data":
        value = {"data": [{"id": draw(st.text(max_size=8)), "v": value}]}
    elif shape == "models":
        value = {"models": [{"name": "m", "v": value}], "result": "KoboldCpp", "protected": value}
    text = json.dumps(value, allow_nan=True).encode()
    depth = draw(st.sampled_from([0, 0, 1, 31, 33, 1000, 100_000]))
    return b"[" * depth + text + b"]" * depth


_METRIC_NAMES = [
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
]


@st.composite
def _metrics_bodies(draw: st.DrawFn) -> bytes:
    """Prometheus text with samples of any value (1e308 twice sums to infinity; `+Inf`, `NaN`)."""
    lines = []
    for name in draw(st.lists(st.sampled_from(_METRIC_NAMES), max_size=8)):
        value = draw(st.one_of(_numbers, st.sampled_from(["+Inf", "-Inf", "NaN", "1e308", "1e400", "x"])))
        shown = (
            value
            if isinstance(value, str)
            else repr(float(value))
            if isinstance(value, float)
            else str(value)
        )
        lines.append(f'{name}{{engine="{draw(st.integers(0, 3))}"}} {shown}')
    return ("\n".join(lines) + "\n").encode()


_bodies = st.one_of(_json_bodies(), st.binary(max_size=64), _metrics_bodies())


@dataclass
class _Engines:
    """Real engine processes (llama-server, vLLM, Ollama), each holding the socket of a real
    server whose answers each example sets."""

    processes: list[EngineProcess]
    servers: list[FakeEngine]

    def answer(self, routes: dict[str, bytes]) -> None:
        for server in self.servers:
            with server.script.lock:
                server.script.routes = {path: [Answer(200, body)] for path, body in routes.items()}


@pytest.fixture(scope="module")
def engines(helper: object) -> Iterator[_Engines]:
    from pathlib import Path

    from helpers.procs import running

    with running(Path(str(helper))) as procs:
        started = _start(procs)
        try:
            yield started
        finally:
            for server in started.servers:
                server.close()


def _start(procs: Procs) -> _Engines:
    servers, pids = [], []
    for argv in (["llama-server", "-m", "m"], ["vllm", "serve", "m"], ["ollama", "serve"]):
        sock = bound_socket()
        servers.append(FakeEngine({}, sock=sock))
        port = str(sock.getsockname()[1])
        env = {"OLLAMA_HOST": f"127.0.0.1:{port}"} if argv[0] == "ollama" else {}
        full = argv if argv[0] == "ollama" else [*argv, "--port", port]
        pids.append(procs.start(full, (sock.fileno(),), **env).pid)
    found = {p.pid: p for p in Scanner().scan() if p.pid in pids}
    assert set(found) == set(pids)
    return _Engines([found[pid] for pid in pids], servers)


def _strict(text: str | bytes) -> object:
    def refuse(literal: str) -> object:
        raise AssertionError(f"not strict JSON: {literal}")

    return json.loads(text, parse_constant=refuse)


def _finite_numbers(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite_numbers(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite_numbers(v) for v in value)
    return True


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
)
@given(health=_bodies, models=_bodies, metrics=_bodies, listed=_bodies)
def test_hostile_answers_through_the_cli_and_the_agent(
    engines: _Engines, health: bytes, models: bytes, metrics: bytes, listed: bytes
) -> None:
    from enginespec.cli.pstable import Shown
    from enginespec.cli.pstable import table_lines as _table_lines
    from enginespec.fleet.agent import _json
    from enginespec.fleet.remote import _engines
    from enginespec.scanning.scanner import engine_document
    from enginespec.untrusted.documents import dumps

    engines.answer(
        {"/health": health, "/": health, "/v1/models": models, "/metrics": metrics, "/api/ps": listed}
    )
    rows, documents = [], []
    for process in engines.processes:
        checked = check_health(process, timeout=5, verify_identity=True)
        first = check_load(process, timeout=5)
        load = check_load(process, previous=first, timeout=5)
        for reading in (first, load):
            assert _finite_numbers(reading.model_dump(mode="json")), reading
        document = engine_document(process, checked, load)
        assert _finite_numbers(document)
        documents.append(document)
        row = Shown(process, checked, checked.state)
        row.load = load
        rows.append(row)
    for text in (dumps(documents, indent=2), _json(documents).decode("ascii")):
        assert _strict(text) == _strict(json.dumps(documents))
    for width in (None, 80):
        assert _table_lines(rows, True, width, load=True)
    # an agent's answer read back by `ps --remote`: the same engines, whatever they answered
    remote = _engines("http://agent", _json(documents))
    assert [e.process.pid for e in remote] == [p.pid for p in engines.processes]
    # every engine's own reading of each body (health rules, loaded models)
    for body in (health, models, metrics, listed):
        for spec in all_engines():
            for status in (200, 503):
                state, reason = spec.classify_health(status, body)  # type: ignore[attr-defined]
                assert isinstance(state, str)
                assert isinstance(reason, str)
            names = spec.loaded_models(body)  # type: ignore[attr-defined]
            assert names is None or all(isinstance(n, str) for n in names)
        found = parse_metrics(body.decode("utf-8", "replace"), _METRIC_NAMES)
        assert all(math.isfinite(v) for values in found.values() for v in values)
