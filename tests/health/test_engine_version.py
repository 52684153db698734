"""The release a running engine runs (``EngineProcess.engine_version``, ``engine_version`` in every
engine document): an engine installed as a Python package from the dist-info of the site-packages
its server mapped; a binary engine from what it says at its version route when a health check
finds it ready, asked once per process. Real processes with the engines' exact argv, real HTTP
servers on loopback answering as each engine's source does, hostile answers and files; both
backends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import enginespec.cli.app as cli
from enginespec.fleet.exporter import EngineCollector, _refresh
from enginespec.fleet.remote import fetch_remote
from enginespec.health.checks import check_health
from enginespec.process.versions import RETRY_AFTER
from enginespec.scanning.scanner import Scanner
from helpers.fakeserver import Answer, FakeEngine, serving
from helpers.procs import Procs
from helpers.simpleservers import Served, engine_process
from helpers.sitepackages import vllm_site

LOADING = b'{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}'
OK = b'{"status":"ok"}'
#: llama-server's /props answer (trimmed), as tools/server builds it.
PROPS = b'{"default_generation_settings": {}, "total_slots": 1, "build_info": "b6520-2fbd4cde"}'
#: A check's deadline no busy host reaches: a version request cut short is asked again at the next
#: check (test_a_version_request_cut_short_is_asked_again), which counting requests must not see.
CHECK_SECONDS = 30.0


def _engine(
    procs: Procs, argv: list[str], routes: dict[str, list[Answer]], program: Path | None = None
) -> Served:
    """A process of ``argv`` (``--port`` appended) holding the socket a fake server answers on,
    as scanned."""
    return engine_process(procs, argv, routes, executable=program)


def _asked(server: FakeEngine, path: str) -> int:
    return sum(1 for _method, seen, _headers in server.script.seen if seen == path)


def _document(pid: int, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert cli.main(["ps", "--json"]) == 0
    (shown,) = [d for d in json.loads(capsys.readouterr().out) if d["pid"] == pid]
    return shown  # type: ignore[no-any-return]


def test_a_python_engines_version_is_read_from_the_package_it_loaded(
    procs: Procs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    program = vllm_site(tmp_path, procs.helper, "0.11.2+cu128")
    routes = {"/health": [Answer(200)], "/v1/models": [Answer(200, b'{"data": []}')]}
    with _engine(procs, ["vllm", "serve", "/models/m"], routes, program) as (process, server):
        assert process.engine_version == "0.11.2+cu128"
        document = _document(process.pid, capsys)
        assert document["engine_version"] == "0.11.2+cu128"
        assert "/props" not in {path for _m, path, _h in server.script.seen}


@pytest.mark.parametrize(
    "metadata",
    [
        "Metadata-Version: 2.1\nName: vllm\nVersion: 0.11 <b>bold</b>\n\n",  # not a version's text
        "Metadata-Version: 2.1\nName: vllm\nVersion: " + "9" * 100 + "\n\n",  # too long to be one
        "Metadata-Version: 2.1\nName: vllm\n\n",  # none
    ],
)
def test_a_python_engines_version_that_is_not_one_is_not_shown(
    procs: Procs, tmp_path: Path, metadata: str
) -> None:
    program = vllm_site(tmp_path, procs.helper, "0.11.2", metadata)
    routes = {"/health": [Answer(200)], "/v1/models": [Answer(200, b'{"data": []}')]}
    with _engine(procs, ["vllm", "serve", "/models/m"], routes, program) as (process, _server):
        assert process.engine_version is None


def test_a_binary_engine_says_its_version_once_when_ready(
    procs: Procs, capsys: pytest.CaptureFixture[str]
) -> None:
    routes = {"/health": [Answer(503, LOADING), Answer(200, OK)], "/props": [Answer(200, PROPS)]}
    with _engine(procs, ["llama-server", "-m", "/models/m.gguf"], routes) as (process, server):
        assert process.engine_version is None  # nothing asked yet
        assert check_health(process, timeout=CHECK_SECONDS).state == "loading"
        assert (_asked(server, "/props"), process.engine_version) == (0, None)  # asked only when ready
        assert check_health(process, timeout=CHECK_SECONDS).state == "ready"
        assert (_asked(server, "/props"), process.engine_version) == (1, "b6520-2fbd4cde")
        for _ in range(3):
            assert check_health(process, timeout=CHECK_SECONDS).state == "ready"
        assert _asked(server, "/props") == 1  # a release does not change while a process runs
        # ps checks health, and its document says the version; a scan's new record knows it too
        assert _document(process.pid, capsys)["engine_version"] == "b6520-2fbd4cde"
        assert _asked(server, "/props") == 1


def test_koboldcpps_health_answer_is_its_version(procs: Procs) -> None:
    answer = b'{"result": "KoboldCpp", "version": "1.116.1", "protected": false}'
    routes = {"/api/extra/version": [Answer(200, answer)]}
    with _engine(procs, ["koboldcpp", "--model", "/models/m.gguf"], routes) as (process, server):
        assert check_health(process, timeout=CHECK_SECONDS).state == "ready"
        assert process.engine_version == "1.116.1"
        assert _asked(server, "/api/extra/version") == 1  # no second request for the version


@pytest.mark.parametrize(
    "answer",
    [
        Answer(404, b'{"error": "not found"}'),  # an older build without the route
        Answer(200, b"<html>props</html>"),  # not JSON
        Answer(200, b'["b6520"]'),  # not an object
        Answer(200, b'{"build_info": 6520}'),  # not text
        Answer(200, b'{"build_info": "b6520 \\u001b[31mred"}'),  # escapes, spaces: not a version
        Answer(200, b'{"build_info": "' + b"b" * 5000 + b'"}'),  # a page, not a version
        Answer(200, b'{"build_info": "b1", "x": "' + b"y" * (2 << 20) + b'"}'),  # past the answer's bound
        Answer(200, b"[" * 100_000),  # deep
    ],
)
def test_a_hostile_version_answer_is_not_shown_nor_asked_every_check(procs: Procs, answer: Answer) -> None:
    routes = {"/health": [Answer(200, OK)], "/props": [answer]}
    with _engine(procs, ["llama-server", "-m", "/models/m.gguf"], routes) as (process, server):
        for _ in range(3):
            assert (
                check_health(process, timeout=CHECK_SECONDS).state == "ready"
            )  # the version's answer never fails health
        assert process.engine_version is None
        assert _asked(server, "/props") == 1  # asked again only after RETRY_AFTER
        assert RETRY_AFTER >= 60


def test_another_hosts_document_keeps_the_version_it_gave(procs: Procs) -> None:
    routes = {"/health": [Answer(200, OK)], "/props": [Answer(200, PROPS)]}
    with _engine(procs, ["llama-server", "-m", "/models/m.gguf"], routes) as (process, _server):
        assert check_health(process, timeout=CHECK_SECONDS).state == "ready"
        told = process.model_dump(mode="json")
    assert told["engine_version"] == "b6520-2fbd4cde"
    hostile = {**told, "pid": told["pid"] + 1, "engine_version": "1.0\u001b]8;;http://x\u0007"}
    with serving({"/v1/engines": [Answer(200, json.dumps([told, hostile]).encode())]}) as agent:
        (report,) = fetch_remote([agent.url])
    assert report.error is None
    first, second = (engine.process for engine in report.engines)
    assert first.engine_version == "b6520-2fbd4cde"  # another host's: nothing of this one is read
    assert first.model_dump(mode="json")["engine_version"] == "b6520-2fbd4cde"
    assert second.engine_version is None


def test_a_version_request_cut_short_is_asked_again(procs: Procs) -> None:
    # the check's deadline cut the version's request short: no answer, so the next check asks
    routes = {"/health": [Answer(200, OK)], "/props": [Answer(hang=True), Answer(200, PROPS)]}
    with _engine(procs, ["llama-server", "-m", "/models/m.gguf"], routes) as (process, server):
        check_health(process, timeout=1.0)
        assert (_asked(server, "/props"), process.engine_version) == (1, None)
        assert check_health(process, timeout=CHECK_SECONDS).state == "ready"
        assert (_asked(server, "/props"), process.engine_version) == (2, "b6520-2fbd4cde")


#: LocalAI's argv: the address its socket's port goes into.
LOCALAI = ["local-ai", "run", "--address", "127.0.0.1:{port}"]


@pytest.mark.parametrize(
    ("said", "shown"),
    [
        ("v4.9.0 (f7ad3f70cc1ac2fca9f0b0f0e1b8b4c4e0d3f9a1)", "v4.9.0"),  # internal.PrintableVersion
        (" (f7ad3f70)", None),  # a source build: no release
        ("v4.9.0", None),  # not the form its source prints
        ("v4.9.0 (x) and more", None),
        ("<b>v4</b> (x)", None),  # the word is no version
        ("v4.9.0 (" + "f" * 5000 + ")", None),  # past what is read
    ],
)
def test_localai_says_its_release_as_the_first_word_of_its_version(
    procs: Procs, said: str, shown: str | None
) -> None:
    routes = {"/readyz": [Answer(200)], "/version": [Answer(200, json.dumps({"version": said}).encode())]}
    with _engine(procs, LOCALAI, routes) as (process, server):
        assert check_health(process, timeout=CHECK_SECONDS).state == "ready"
        assert process.engine_version == shown
        assert _asked(server, "/version") == 1


def test_the_first_key_of_a_list_is_the_one_sent(procs: Procs) -> None:
    # kong splits `--api-keys a,b` (LocalAI); llama.cpp's --api-key and llmman's LLMMAN_API_KEYS too
    routes = {"/readyz": [Answer(200)], "/version": [Answer(200, b'{"version": "v4.9.0 (c)"}')]}
    with _engine(procs, [*LOCALAI, "--api-keys", " first ,second"], routes) as (process, server):
        assert check_health(process, timeout=CHECK_SECONDS).state == "ready"
        (headers,) = [h for _m, path, h in server.script.seen if path == "/version"]
        assert headers["Authorization"] == "Bearer first"
        assert "second" not in str(headers)


def test_the_exporter_labels_an_engines_info_with_its_version(procs: Procs) -> None:
    routes = {"/health": [Answer(200, OK)], "/props": [Answer(200, PROPS)]}
    with _engine(procs, ["llama-server", "-m", "/models/m.gguf"], routes) as (process, _server):
        collector = EngineCollector()
        _refresh(Scanner(), collector, True, 5.0, 300.0, None)
        (info,) = [family for family in collector.collect() if family.name == "enginespec_engine_info"]
        (labels,) = [s.labels for s in info.samples if s.labels["pid"] == str(process.pid)]
        assert labels["engine_version"] == "b6520-2fbd4cde"
