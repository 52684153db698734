"""KoboldCpp's served model and its admin mode (issue 40): what it serves read from its own API,
the files and configs of its admin directory it can switch to, and switching through its admin
reload, which replaces the process that serves (the wait sees the old one end first). Fake
servers answer in the shapes of koboldcpp.py at KcppVersion 1.116.1 (LostRuins/koboldcpp,
release branch `concedo` at 0c163a9b), cited at each; the engines are real processes with
KoboldCpp's exact argv. Hostile answers, and the admin password never shown. Both backends."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import enginespec.cli.app as cli
from enginespec import (
    ControlFailed,
    ControlUnsupported,
    EngineProcess,
    ServedModels,
    load_model,
    served_models,
    unload_model,
)
from enginespec.process.argv import parse_argv, redact_argv
from enginespec.scanning.scanner import Scanner
from helpers.fakeserver import Answer, FakeEngine, bound_socket, serving
from helpers.procs import Procs, children_of, wait_for

SECRET = "kobold-admin-s3cret"
MODEL = "/api/v1/model"
OPTIONS = "/api/admin/list_options"
RELOAD = "/api/admin/reload_config"

# koboldcpp.py v1.116.1 argparse (line 12240 on): --model, --port, --admin, --admindir,
# --adminpassword (env KCPP_ADMINPASSWORD), --routermode, --nomodel; the positional
# `[model_param] [port_param]`.
ADMIN = ["koboldcpp", "--model", "/m/qwen.gguf", "--port", "{port}", "--admin", "--admindir", "/m"]
PLAIN = ["koboldcpp", "--model", "/m/qwen.gguf", "--port", "{port}"]


def _json(document: object) -> Answer:
    return Answer(200, json.dumps(document).encode())


def _model(name: str) -> Answer:
    # GET /api/v1/model -> {"result": friendlymodelname} (line 6077)
    return _json({"result": name})


# GET /api/admin/list_options (line 6106): get_current_admindir_list (line 1482), the sorted
# .kcpps/.kcppt/.gguf files of --admindir, a subdirectory's as `dir/file`, then two actions
OPTIONS_ANSWER = _json(["big.kcpps", "qwen.gguf", "sub/phi-3.gguf", "initial_model", "unload_model"])
# POST /api/admin/reload_config -> {"success": true} (line 6739)
RELOADED = _json({"success": True})


@contextmanager
def _kobold(
    procs: Procs, argv: list[str], routes: dict[str, list[Answer]], **env: str
) -> Iterator[tuple[EngineProcess, FakeEngine, int]]:
    """A KoboldCpp in admin mode's shape: the process with ``argv`` (its manager) and a forked
    child with the same argv (the server it restarts; multiprocessing.Process, line 10970), both
    holding the socket the fake server answers on; (the scanned process, the server, its pid)."""
    sock = bound_socket()
    port = sock.getsockname()[1]
    with serving(routes, sock=sock, origins=True) as server:
        proc = procs.start(
            [a.format(port=port) for a in argv],
            pass_fds=(sock.fileno(),),
            HELPER_CHILD_TITLES="=",
            HELPER_REAP="1",
            **env,
        )
        wait_for(lambda: len(children_of(proc.pid)) == 1)

        def scanned() -> EngineProcess | None:
            return next((p for p in Scanner(listen_ports=False).scan() if p.pid == proc.pid), None)

        wait_for(lambda: scanned() is not None, timeout=20)
        process = scanned()
        assert process is not None
        yield process, server, proc.pid


def _ours(server: FakeEngine, path: str) -> list[dict[str, str]]:
    """The headers of this test's requests to ``path``."""
    return [headers for _method, seen, headers in server.script.ours if seen == path]


def _posted(server: FakeEngine) -> list[tuple[str, object]]:
    return [(p, json.loads(b) if b else None) for m, p, b in server.script.bodies if m == "POST"]


def _states(reading: ServedModels) -> list[tuple[str, str, str]]:
    return [(m.name, m.state, m.reason) for m in reading.models]


def test_without_admin_mode_it_serves_its_argvs_model_as_it_names_it(procs: Procs) -> None:
    with _kobold(procs, PLAIN, {}) as (process, server, _pid):
        found = served_models(process)
        assert found.available
        assert found.source == "argv"
        # the name its API gives (`koboldcpp/` and the file's stem, line 11453)
        assert _states(found) == [("koboldcpp/qwen", "loaded", "")]
        assert server.script.ours == []  # nothing asked
        with pytest.raises(
            ControlUnsupported, match="started without --admin or --routermode or --autoswapmode"
        ):
            load_model(process, "phi.gguf", timeout=5)
        assert _posted(server) == []


def test_admin_mode_lists_its_model_and_what_it_can_switch_to(procs: Procs) -> None:
    routes = {MODEL: [_model("koboldcpp/qwen")], OPTIONS: [OPTIONS_ANSWER]}
    argv = [*ADMIN, "--adminpassword", SECRET]
    with _kobold(procs, argv, routes) as (process, server, _pid):
        found = served_models(process)
        assert found.available, found.reason
        assert found.source == f"{process.base_url}{MODEL}, {process.base_url}{OPTIONS}"
        assert _states(found) == [
            ("koboldcpp/qwen", "loaded", "from qwen.gguf"),
            ("big.kcpps", "unloaded", "a config of its --admindir"),
            ("sub/phi-3.gguf", "unloaded", "a model file of its --admindir"),
        ]
        # the admin password goes to the admin route alone (no --password: none to the other)
        assert {h.get("Authorization") for h in _ours(server, OPTIONS)} == {f"Bearer {SECRET}"}
        assert all("Authorization" not in h for h in _ours(server, MODEL))


def test_the_admin_password_from_the_environment_is_sent(procs: Procs) -> None:
    routes = {MODEL: [_model("koboldcpp/qwen")], OPTIONS: [OPTIONS_ANSWER]}
    with _kobold(procs, ADMIN, routes, KCPP_ADMINPASSWORD=SECRET) as (process, server, _pid):
        assert len(served_models(process).models) == 3
        assert {h.get("Authorization") for h in _ours(server, OPTIONS)} == {f"Bearer {SECRET}"}


def test_router_mode_with_no_model_lists_only_what_it_can_load(procs: Procs) -> None:
    # router mode's proxy listens on the positional port (line 10931); `""` is the empty model
    argv = ["koboldcpp", "--host", "127.0.0.1", "", "{port}", "--nomodel", "--routermode", "--admindir", "/m"]
    routes = {MODEL: [_model("inactive")], OPTIONS: [OPTIONS_ANSWER]}
    with _kobold(procs, argv, routes) as (process, _server, _pid):
        found = served_models(process)
        assert found.available, found.reason
        assert [(m.name, m.state) for m in found.models] == [
            ("big.kcpps", "unloaded"),
            ("qwen.gguf", "unloaded"),
            ("sub/phi-3.gguf", "unloaded"),
        ]


def _switch(
    process: EngineProcess, server: FakeEngine, manager: int, action: str, name: str, after: Answer
) -> ServedModels:
    """Runs ``action`` in a thread; once its request is sent and the model list asked three times
    more while the old server runs (the call must go on waiting), ends that server as
    KoboldCpp's manager does (terminate, line 11047) and answers ``after`` from then on."""
    result: list[ServedModels | BaseException] = []

    def run() -> None:
        try:
            call = load_model if action == "load" else unload_model
            result.append(call(process, name, timeout=60))
        except BaseException as err:  # handed to the test thread
            result.append(err)

    worker = threading.Thread(target=run)
    worker.start()
    try:

        def asked_since_post() -> int:
            paths = [path for _m, path, _h in server.script.ours]
            return paths[paths.index(RELOAD) + 1 :].count(MODEL) if RELOAD in paths else 0

        wait_for(lambda: asked_since_post() >= 3 or not worker.is_alive(), timeout=30)
        assert worker.is_alive(), f"returned before the old server ended: {result}"
        with server.script.lock:
            server.script.routes[MODEL] = [after]
        (child,) = children_of(manager)
        os.kill(child, signal.SIGTERM)
    finally:
        worker.join(timeout=60)
    (outcome,) = result
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def test_load_reloads_and_waits_for_the_new_server(procs: Procs) -> None:
    routes = {MODEL: [_model("koboldcpp/qwen")], OPTIONS: [OPTIONS_ANSWER], RELOAD: [RELOADED]}
    argv = [*ADMIN, "--adminpassword", SECRET]
    with _kobold(procs, argv, routes) as (process, server, manager):
        done = _switch(process, server, manager, "load", "sub/phi-3.gguf", _model("koboldcpp/phi-3"))
        assert _states(done)[0] == ("koboldcpp/phi-3", "loaded", "from sub/phi-3.gguf")
        assert _posted(server) == [(RELOAD, {"filename": "sub/phi-3.gguf"})]
        assert {h.get("Authorization") for h in _ours(server, RELOAD)} == {f"Bearer {SECRET}"}


def test_reloading_the_model_it_serves_still_waits_for_the_restart(procs: Procs) -> None:
    # the same name before and after: only the old server's end tells the reload happened
    routes = {MODEL: [_model("koboldcpp/qwen")], OPTIONS: [OPTIONS_ANSWER], RELOAD: [RELOADED]}
    with _kobold(procs, ADMIN, routes) as (process, server, manager):
        done = _switch(process, server, manager, "load", "qwen.gguf", _model("koboldcpp/qwen"))
        assert _states(done)[0] == ("koboldcpp/qwen", "loaded", "from qwen.gguf")


def test_a_config_is_loaded_whatever_model_it_names(procs: Procs) -> None:
    routes = {MODEL: [_model("koboldcpp/qwen")], OPTIONS: [OPTIONS_ANSWER], RELOAD: [RELOADED]}
    with _kobold(procs, ADMIN, routes) as (process, server, manager):
        done = _switch(process, server, manager, "load", "big.kcpps", _model("koboldcpp/Mistral-Large"))
        assert _states(done)[0] == ("koboldcpp/Mistral-Large", "loaded", "")
        assert _posted(server) == [(RELOAD, {"filename": "big.kcpps"})]


def test_unload_restarts_with_no_model(procs: Procs) -> None:
    routes = {MODEL: [_model("koboldcpp/qwen")], OPTIONS: [OPTIONS_ANSWER], RELOAD: [RELOADED]}
    with _kobold(procs, ADMIN, routes) as (process, server, manager):
        # it unloads whatever it holds: another model's unload is already done, and nothing is sent
        untouched = unload_model(process, "koboldcpp/phi-3", timeout=10)
        assert _states(untouched)[0] == ("koboldcpp/qwen", "loaded", "from qwen.gguf")
        assert _posted(server) == []
        done = _switch(process, server, manager, "unload", "koboldcpp/qwen", _model("inactive"))
        assert [m.state for m in done.models] == ["unloaded"] * 3
        # the one action KoboldCpp has for it (line 6752)
        assert _posted(server) == [(RELOAD, {"filename": "unload_model"})]


def test_a_reload_it_refuses_is_said_and_not_waited_for(procs: Procs) -> None:
    # a name not in its admin directory, or a wrong admin password: {"success": false}
    routes = {
        MODEL: [_model("koboldcpp/qwen")],
        OPTIONS: [OPTIONS_ANSWER],
        RELOAD: [_json({"success": False})],
    }
    with (
        _kobold(procs, [*ADMIN, "--adminpassword", SECRET], routes) as (process, _server, _pid),
        pytest.raises(ControlFailed, match=r"success: false") as failed,
    ):
        load_model(process, "../etc/passwd.gguf", timeout=10)
    assert SECRET not in str(failed.value)


def test_the_admin_password_is_never_shown(procs: Procs, capsys: pytest.CaptureFixture[str]) -> None:
    routes = {MODEL: [_model("koboldcpp/qwen")], OPTIONS: [OPTIONS_ANSWER]}
    argv = [*ADMIN, "--adminpassword", SECRET, "--password", "api-s3cret"]
    with _kobold(procs, argv, routes) as (process, server, pid):
        reading = served_models(process)
        shown = [repr(process), process.model_dump_json(), repr(reading), reading.model_dump_json()]
        for command in (["models", str(pid), "-o", "json"], ["models", str(pid)], ["ps", "-o", "json"]):
            assert cli.main(command) in (0, 1)
            shown.append(capsys.readouterr().out)
        assert all(SECRET not in text and "api-s3cret" not in text for text in shown)
        assert "--adminpassword" in process.argv
        # /api/v1/model takes the API key (--password), the admin route the admin password
        assert {h.get("Authorization") for h in _ours(server, MODEL)} == {"Bearer api-s3cret"}
        assert {h.get("Authorization") for h in _ours(server, OPTIONS)} == {f"Bearer {SECRET}"}


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (Answer(200, b'{"result": "' + b"x" * (2 << 20) + b'"}'), "answer larger than 1048576 bytes"),
        (Answer(200, b"<html>502 - KoboldCpp</html>", content_type="text/html"), "unreadable answer"),
        (_json({"result": ["koboldcpp/qwen"]}), "no string 'result'"),
        # without its password it withholds the name (line 6082)
        (_model("koboldcpp/protected-model"), "withholds its model's name"),
        (Answer(200, b'{"result": "koboldcpp/qwen"}', trickle=0.2), "no answer within 1s"),
    ],
)
def test_hostile_model_answers_are_said(procs: Procs, answer: Answer, said: str) -> None:
    with _kobold(procs, ADMIN, {MODEL: [answer], OPTIONS: [OPTIONS_ANSWER]}) as (process, _server, _pid):
        found = served_models(process, timeout=1)
    assert not found.available
    assert said in found.reason


def test_hostile_names_and_option_lists(procs: Procs, capsys: pytest.CaptureFixture[str]) -> None:
    lying = "koboldcpp/\x1b[2J\x1b]0;owned\x07qwen"
    options = [
        *(f"m{i}.gguf" for i in range(1500)),
        7,
        None,
        ["nested"],
        {"a": 1},
        "x" * 5000,
        "\x1b[31mred.kcpps",
    ]
    routes = {MODEL: [_model(lying)], OPTIONS: [_json(options)]}
    with _kobold(procs, ADMIN, routes) as (process, _server, pid):
        found = served_models(process)
        code = cli.main(["models", str(pid)])
        table = capsys.readouterr().out
        assert code == 0, table
    assert found.available
    assert found.models[0].name == lying  # kept literally
    assert len(found.models) == 1024
    assert "more models left out (at most 1024)" in found.reason
    assert all(len(m.name) <= 1024 for m in found.models)
    assert "\x1b" not in table
    assert "\\x1b[2J" in table
    # an option list that is not a list, and one with nothing: said, the model still read
    for listed, why in ((_json({"files": []}), "not a list"), (_json([]), "none listed")):
        with _kobold(procs, ADMIN, {MODEL: [_model("koboldcpp/qwen")], OPTIONS: [listed]}) as (
            process,
            _s,
            _p,
        ):
            found = served_models(process)
        assert found.available
        assert why in found.reason
        assert _states(found) == [("koboldcpp/qwen", "loaded", "")]


def test_its_admin_flags_are_read_as_koboldcpp_does() -> None:
    # `--admin`, `--routermode` are store_true (line 12400 on): the positional model after one is
    # the model; `--adminpassword` (and an abbreviation argparse expands) is masked
    argv = ["koboldcpp", "--admin", "/m/qwen.gguf", "6000", "--routermode", "--adminpassword", SECRET]
    invocation = parse_argv(argv)
    assert invocation is not None
    assert (invocation.engine, invocation.model, invocation.effective_port) == (
        "koboldcpp",
        "/m/qwen.gguf",
        6000,
    )
    assert redact_argv(argv)[-1] == "***"
    assert redact_argv(["koboldcpp", "--adminpass", SECRET, "--admin", "/m/q.gguf"])[2:] == [
        "***",
        "--admin",
        "/m/q.gguf",
    ]
