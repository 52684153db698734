"""A vLLM API server that answers ready without its `VLLM::EngineCore` is `unhealthy` for every
reader: a one-shot `ps` and `describe`, the exporter and the watch's monitor, however long they
have looked (issue 45). The rule is vLLM's data (`Serving.engine_worker`, from 0.11 on, when V0 was
gone); the version is read from the dist-info of the site directories the server mapped. Real
processes (the helper, executed from inside a site-packages directory as a Python extension would
be mapped), real HTTP servers on loopback; both backends."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import enginespec.cli.app as cli
from enginespec.definition.registry import find_engine
from enginespec.fleet.exporter import EngineCollector, _refresh
from enginespec.health.checks import check_health
from enginespec.health.vitals import EngineMonitor
from enginespec.process.record import EngineProcess
from enginespec.scanning.scanner import Scanner
from helpers.fakeserver import Answer, bound_socket, serving
from helpers.procs import Procs, wait_for
from helpers.sitepackages import vllm_site

ENGINE_CORE = "VLLM::EngineCore"


@contextmanager
def _server(procs: Procs, program: Path, **env: str) -> Iterator[EngineProcess]:
    """A vLLM API server (the helper run from ``program``) whose health endpoint answers 200."""
    sock = bound_socket()
    port = sock.getsockname()[1]
    with serving({"/health": [Answer(200)], "/v1/models": [Answer(200, b'{"data": []}')]}, sock=sock):
        proc = procs.start(
            ["vllm", "serve", "/models/m", "--port", str(port)],
            pass_fds=(sock.fileno(),),
            executable=program,
            **env,
        )
        titles = env.get("HELPER_CHILD_TITLES")

        def titled(pid: int) -> bool:
            # a forked worker is a descendant before it retitles itself (a loaded host shows it)
            try:
                return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode() in titles.split(",")
            except OSError:
                return False

        def scanned() -> EngineProcess | None:
            found = [p for p in Scanner(listen_ports=False).scan() if p.pid == proc.pid]
            if not found or (titles and not any(titled(pid) for pid in found[0].worker_pids)):
                return None
            return found[0]

        wait_for(lambda: scanned() is not None, timeout=20)
        process = scanned()
        assert process is not None
        yield process


def test_a_server_without_its_engine_core_is_unhealthy_for_every_reader(
    procs: Procs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with _server(procs, vllm_site(tmp_path, procs.helper, "0.12.0")) as process:
        health = check_health(process)
        assert health.state == "unhealthy"
        assert health.reason == (
            "no VLLM::EngineCore under the API server (vllm 0.12.0 runs its engine in it): it answers, "
            "but cannot serve a request"
        )
        # ps, as a table and as JSON
        assert cli.main(["ps", "--json"]) == 0
        (shown,) = [d for d in json.loads(capsys.readouterr().out) if d["pid"] == process.pid]
        assert (shown["health"]["state"], shown["health"]["reason"]) == ("unhealthy", health.reason)
        # describe
        assert cli.main(["describe", str(process.pid)]) == 0
        described = capsys.readouterr().out
        assert "Health:" in described
        assert "unhealthy" in described
        assert "no VLLM::EngineCore under the API server" in described
        # the exporter, with and without the monitor that remembers workers, started after the loss
        for monitor in (None, EngineMonitor(timeout=2, load=False)):
            collector = EngineCollector()
            _refresh(Scanner(), collector, True, 5.0, 300.0, monitor)
            index = [p.pid for p in collector.snapshot.processes].index(process.pid)
            assert collector.snapshot.healths is not None
            assert collector.snapshot.healths[index].state == "unhealthy"
        # the watch's monitor
        (vitals,) = EngineMonitor(timeout=2).check([process])
        assert vitals.health.state == "unhealthy"
        assert vitals.health.reason == health.reason


@pytest.mark.parametrize("title", [ENGINE_CORE, "VLLM::EngineCore_DP0", "ACME::EngineCore"])
def test_a_server_with_its_engine_core_is_ready(procs: Procs, tmp_path: Path, title: str) -> None:
    # the title's prefix is the deployment's (VLLM_PROCESS_NAME_PREFIX)
    with _server(procs, vllm_site(tmp_path, procs.helper, "0.12.0"), HELPER_CHILD_TITLES=title) as process:
        assert process.worker_pids
        assert check_health(process).state == "ready"


@pytest.mark.parametrize(
    ("version", "metadata"),
    [
        ("0.10.1", None),  # could still run V0, which has no engine core: not judged
        (None, None),  # no dist-info: the version is not known
        ("0.12.0", "Metadata-Version: 2.1\nName: vllm\nVersion: twelve\n\n"),  # no PEP 440 version
        ("0.12.0", "Metadata-Version: 2.1\nName: vllm\nVersion: " + "9" * 200 + "\n\n"),  # too long
    ],
)
def test_a_server_whose_version_does_not_say_is_not_judged(
    procs: Procs, tmp_path: Path, version: str | None, metadata: str | None
) -> None:
    with _server(procs, vllm_site(tmp_path, procs.helper, version, metadata)) as process:
        assert check_health(process).state == "ready"


def test_hostile_dist_info_is_read_as_its_owner_and_never_blocks(procs: Procs, tmp_path: Path) -> None:
    """A METADATA that is a FIFO (a read would wait for a writer forever) or a link to a file only
    root may read is not read: the check ends, and the server is not judged."""
    module = vllm_site(tmp_path, procs.helper, "0.12.0")
    metadata = module.parent.parent / "vllm-0.12.0.dist-info" / "METADATA"
    metadata.unlink()
    os.mkfifo(metadata)
    with _server(procs, module) as process:
        assert check_health(process, deadline=20).state == "ready"


def test_engines_say_their_worker_rule_in_valid_terms() -> None:
    """Each engine's `engine_worker` specifier parses (it is parsed only when a server is judged)."""
    from packaging.specifiers import SpecifierSet

    from enginespec.definition.registry import engine_ids

    rules = [find_engine(engine).serving.engine_worker for engine in engine_ids()]
    assert any(rule is not None for rule in rules)
    for rule in rules:
        if rule is not None:
            assert str(SpecifierSet(rule.versions))
