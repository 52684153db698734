"""A server on a unix socket named relative to its working directory (Docker Model Runner's
llama-server runners: `--host inference-runner-<slot>.sock`, docker/model-runner 642c7211
pkg/inference/scheduling/runner.go RunnerSocketPath, bound from the daemon's working directory,
which its children inherit: pkg/sandbox/sandbox_other.go sets no `Dir`): its URL is the path
joined to `/proc/PID/cwd` as seen inside its root, and its health and served models are asked
over that socket, only when its own tree holds a listening socket bound there. Hostile: `..`,
a symlinked working directory, a deleted one, one that cannot be read, a path that is no
socket (or no longer one), a path too long to connect to, another user's process. Real
processes, real unix sockets, both backends."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from enginespec import Scanner, served_models
from enginespec.health.checks import check_health
from enginespec.process.record import EngineProcess
from enginespec.process.sockets import working_socket
from enginespec.process.urls import socket_in, unix_socket_url
from helpers.fakeserver import Answer, bound_unix_socket, models, serving
from helpers.procs import Procs, children_of, wait_for

ARG = "\x1f"
NAME = "inference-runner-0.sock"
MODEL = "/models/bundles/sha256/436b/model/model.gguf"
#: docker/model-runner 642c7211 pkg/inference/backends/llamacpp/llamacpp_config.go GetArgs
RUNNER = ["/app/llama-server", "-ngl", "999", "--metrics", "--model", MODEL, "--host", NAME, "--jinja"]
#: llama.cpp tools/server/server.cpp: /health once the model is loaded, /models (its router's list)
ROUTES = {
    "/health": [Answer(200, b'{"status":"ok"}')],
    "/models": [models(MODEL)],
    "/v1/models": [models(MODEL)],
}


def _scan(pid: int) -> EngineProcess:
    return next(p for p in Scanner(listen_ports=False).scan() if p.pid == pid)


@contextmanager
def _runner_under_dmr(procs: Procs, directory: Path, sock: socket.socket | None) -> Iterator[EngineProcess]:
    """`/app/model-runner` started in ``directory`` (holding ``sock``) and the llama-server it
    starts there, which inherits both; the runner as scanned."""
    fds = (sock.fileno(),) if sock is not None else ()
    daemon = procs.start(
        ["/app/model-runner"],
        pass_fds=fds,
        cwd=directory,
        HELPER_SPAWN=ARG.join(RUNNER),
        MODEL_RUNNER_PORT="12434",
    )
    wait_for(lambda: len(children_of(daemon.pid)) == 1, timeout=20)
    (child,) = children_of(daemon.pid)
    wait_for(lambda: Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[0] == b"/app/llama-server")
    yield _scan(child)


def test_health_and_models_of_a_dmr_runner_over_its_relative_socket(procs: Procs, tmp_path: Path) -> None:
    sock = bound_unix_socket(tmp_path, NAME)
    with serving(ROUTES, sock=sock) as server, _runner_under_dmr(procs, tmp_path, sock) as runner:
        assert (runner.engine, runner.role, runner.supervisor) == (
            "llamacpp",
            "runner",
            "docker-model-runner",
        )
        assert runner.host == NAME  # as argv gives it
        assert runner.base_url == unix_socket_url(f"{tmp_path}/{NAME}")
        assert not [p for p in runner.problems if "socket" in p or "address" in p]
        health = check_health(runner)
        assert health.state == "ready", health.reason
        # a llama-server with its model in argv serves that model alone: said from argv
        served = served_models(runner)
        assert (served.available, served.source) == (True, "argv")
        assert [m.name for m in served.models] == ["model.gguf"]
        assert [path for _method, path, _headers in server.script.seen] == ["/health"]


def test_served_models_of_a_router_over_its_relative_socket(procs: Procs, tmp_path: Path) -> None:
    # llama-server with no model (router mode) lists its models on GET /models (tools/server/
    # server-models.cpp get_router_models): asked over the socket
    listed = {
        "object": "list",
        "data": [{"id": "qwen", "object": "model", "status": {"value": "loaded", "args": []}}],
    }
    routes = {**ROUTES, "/models": [Answer(200, json.dumps(listed).encode())]}
    sock = bound_unix_socket(tmp_path, NAME)
    with serving(routes, sock=sock) as server:
        argv = ["llama-server", "--models-dir", "/m", "--host", NAME]
        record = _scan(procs.start(argv, pass_fds=(sock.fileno(),), cwd=tmp_path).pid)
        assert record.base_url == unix_socket_url(f"{tmp_path}/{NAME}")
        served = served_models(record)
        assert served.available, served.reason
        assert [(m.name, m.state) for m in served.models] == [("qwen", "loaded")]
        assert "/models" in [path for _method, path, _headers in server.script.seen]


def test_a_symlinked_working_directory_is_its_real_directory(procs: Procs, tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    sock = bound_unix_socket(real, NAME)
    with serving(ROUTES, sock=sock):
        proc = procs.start(
            ["llama-server", "-m", MODEL, "--host", NAME], pass_fds=(sock.fileno(),), cwd=tmp_path / "link"
        )
        record = _scan(proc.pid)
        # the kernel's cwd link names the directory, not the link it was reached by: a link
        # swapped later leads nowhere else
        assert record.base_url == unix_socket_url(f"{real}/{NAME}")
        (tmp_path / "link").unlink()
        (tmp_path / "link").symlink_to("/run")
        assert check_health(record).state == "ready"


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("../" + NAME, "leaves the working directory ('..')"),
        ("sub/../../" + NAME, "leaves the working directory ('..')"),
        ("a" * 200 + ".sock", "no path a client can connect to (over 107 bytes"),
        ("x\x1b[31m.sock", "no path a client can connect to"),
    ],
    ids=["dotdot", "dotdot-inside", "huge", "control"],
)
def test_paths_that_leave_or_cannot_be_reached_get_no_url(
    procs: Procs, tmp_path: Path, host: str, why: str
) -> None:
    proc = procs.start(["llama-server", "-m", MODEL, "--host", host], cwd=tmp_path)
    record = _scan(proc.pid)
    assert record.base_url is None
    assert any(why in p for p in record.problems), record.problems
    assert "\x1b" not in "".join(record.problems)
    assert check_health(record).state == "unknown"


def test_a_working_directory_too_deep_for_a_socket_address(procs: Procs, tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    proc = procs.start(["llama-server", "-m", MODEL, "--host", NAME], cwd=deep)
    record = _scan(proc.pid)
    assert record.base_url is None
    assert any("over 107 bytes" in p for p in record.problems), record.problems


def test_a_deleted_working_directory_gets_no_url(procs: Procs, tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    proc = procs.start(["llama-server", "-m", MODEL, "--host", NAME], cwd=gone)
    gone.rmdir()
    record = _scan(proc.pid)
    assert record.base_url is None
    assert any("deleted" in p for p in record.problems), record.problems


def test_a_working_directory_that_cannot_be_read(tmp_path: Path) -> None:
    # a host laid out like the real one whose process has no readable cwd link (as a scanner
    # that is not root sees another user's process)
    (tmp_path / "proc" / "42").mkdir(parents=True)
    (tmp_path / "proc" / "42" / "root").symlink_to("/")
    path, why = working_socket(42, NAME, str(tmp_path / "proc"))
    assert path is None
    assert why is not None
    assert "cannot be read" in why
    assert why.endswith("no URL")
    (tmp_path / "proc" / "42" / "cwd").symlink_to("/srv/dmr")
    assert working_socket(42, NAME, str(tmp_path / "proc")) == (f"/srv/dmr/{NAME}", None)
    assert working_socket(42, f"./a//{NAME}", str(tmp_path / "proc")) == (f"/srv/dmr/a/{NAME}", None)


def test_socket_in_is_lexical_and_refuses_dotdot() -> None:
    assert socket_in("/app", NAME) == f"/app/{NAME}"
    assert socket_in("/", NAME) == f"/{NAME}"
    assert socket_in("/app/", "./s/./x.sock") == "/app/s/x.sock"
    assert socket_in("/app", "../x.sock") is None
    assert socket_in("/app", "a/../x.sock") is None
    assert socket_in("relative", NAME) is None
    assert socket_in("/app", "./") is None


def test_a_process_holding_no_socket_there_is_not_contacted(procs: Procs, tmp_path: Path) -> None:
    # another process's socket at that name, and a plain file at another: the runner holds neither
    other = bound_unix_socket(tmp_path, NAME)
    with serving(ROUTES, sock=other) as server:
        proc = procs.start(["llama-server", "-m", MODEL, "--host", NAME], cwd=tmp_path)
        record = _scan(proc.pid)
        assert record.base_url == unix_socket_url(f"{tmp_path}/{NAME}")  # where it says it listens
        health = check_health(record)
        assert (health.state, health.reason) == (
            "starting",
            f"process is up, holds no listening socket at {tmp_path}/{NAME}: not contacted",
        )
        (tmp_path / "file.sock").write_text("not a socket")
        plain = _scan(procs.start(["llama-server", "-m", MODEL, "--host", "file.sock"], cwd=tmp_path).pid)
        assert check_health(plain).state == "starting"
    assert not server.script.seen


@pytest.mark.parametrize("user", [None, "nobody"])
def test_a_socket_replaced_by_a_link_is_not_followed(
    procs: Procs, nobody_dir: Path, nobody_idle: Path, user: str | None
) -> None:
    """The runner holds the socket it bound; then its name in its directory (another user's,
    who may change it at will) is made a link to a socket of this (root) process. Nothing is
    sent there: the file is no longer a socket."""
    directory = nobody_dir / "home"
    directory.mkdir()
    sock = bound_unix_socket(directory, NAME)
    if user is not None:
        os.chown(directory, 65534, 65534)
        os.chown(directory / NAME, 65534, 65534)
    privileged = str(nobody_dir / "privileged.sock")
    argv = ["llama-server", "-m", MODEL, "--host", NAME]
    with serving(ROUTES, sock=sock) as own, serving(ROUTES, unix_path=privileged) as root_only:
        fds = (sock.fileno(),)
        proc = procs.start(argv, pass_fds=fds, cwd=directory, executable=nobody_idle, user=user)
        record = _scan(proc.pid)
        assert record.base_url == unix_socket_url(f"{directory}/{NAME}")
        health = check_health(record)
        assert health.state == "ready", health.reason
        seen = len(own.script.seen)
        (directory / NAME).unlink()
        (directory / NAME).symlink_to(privileged)
        health = check_health(record)
        assert (health.state, health.reason) == (
            "unknown",
            f"{directory}/{NAME} is no longer a socket (a link or another file): not contacted",
        )
        assert not root_only.script.seen
        assert len(own.script.seen) == seen
