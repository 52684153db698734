"""TabbyAPI's models and their control through its own API (issue 40): a real process with
TabbyAPI's exact argv (`python3 main.py --port N`) in a directory holding its checkout's files and
its `api_tokens.yml`, holding the socket a fake TabbyAPI answers on (tests/helpers/faketabby.py:
the shapes and key checks of its source). The keys come from that file, read as the server's
owner; they are never shown. Hostile key files and answers. Both backends."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import enginespec.cli.app as cli
from enginespec import ControlFailed, EngineProcess, load_model, served_models, unload_model
from enginespec.scanning.scanner import Scanner
from helpers.fakeserver import bound_socket
from helpers.faketabby import NONE_LOADED, TabbyState, fake_tabby, tabby_checkout, tokens_of
from helpers.procs import Procs, wait_for


@contextmanager
def _tabby(
    procs: Procs,
    checkout: Path,
    state: TabbyState,
    *,
    executable: Path | None = None,
    user: str | None = None,
) -> Iterator[EngineProcess]:
    """The fake TabbyAPI serving ``state``, held by `python3 main.py --port N` run in ``checkout``."""
    sock: socket.socket = bound_socket()
    port = sock.getsockname()[1]
    with fake_tabby(sock, state):
        proc = procs.start(
            ["python3", "main.py", "--port", str(port)],
            pass_fds=(sock.fileno(),),
            cwd=checkout,
            executable=executable,
            user=user,
        )

        def scanned() -> EngineProcess | None:
            return next((p for p in Scanner(listen_ports=False).scan() if p.pid == proc.pid), None)

        wait_for(lambda: scanned() is not None, timeout=20)
        process = scanned()
        assert process is not None
        assert (process.engine, process.port) == ("tabbyapi", port)
        yield process


def _keys_sent(state: TabbyState, path: str) -> list[str | None]:
    return [headers.get("authorization") for _, p, headers, _ in state.requests if p == path]


def _shown(found: object) -> str:
    return repr(found) + (found.model_dump_json() if hasattr(found, "model_dump_json") else "")


def test_no_model_loaded_and_the_folders_it_could_load(procs: Procs, tmp_path: Path) -> None:
    state = TabbyState()
    checkout = tabby_checkout(tmp_path / "tabbyAPI", tokens_of(state))
    with _tabby(procs, checkout, state) as process:
        found = served_models(process)
    assert found.available, found.reason
    assert found.reason == ""
    assert found.source == f"{process.base_url}/v1/model, {process.base_url}/v1/models"
    assert [(m.name, m.state) for m in found.models] == [
        ("Qwen3-8B-exl3", "unloaded"),
        ("Llama-3.1-8B-exl3", "unloaded"),
    ]
    # the api key where it is enough, the admin key where only it lists model_dir
    assert _keys_sent(state, "/v1/model") == [f"Bearer {state.api_key}"]
    assert _keys_sent(state, "/v1/models") == [f"Bearer {state.admin_key}"]
    assert state.api_key not in _shown(found)
    assert state.admin_key not in _shown(found)


def test_load_then_unload_through_its_api(procs: Procs, tmp_path: Path) -> None:
    state = TabbyState()
    checkout = tabby_checkout(tmp_path / "tabbyAPI", tokens_of(state))
    with _tabby(procs, checkout, state) as process:
        loaded = load_model(process, "Qwen3-8B-exl3", timeout=30)
        assert [(m.name, m.state) for m in loaded.models] == [
            ("Qwen3-8B-exl3", "loaded"),
            ("Llama-3.1-8B-exl3", "unloaded"),
        ]
        # a model not loaded: nothing to unload, and nothing sent (the request names none)
        other = unload_model(process, "Llama-3.1-8B-exl3", timeout=30)
        assert ("Qwen3-8B-exl3", "loaded") in [(m.name, m.state) for m in other.models]
        unloaded = unload_model(process, "Qwen3-8B-exl3", timeout=30)
        assert [(m.name, m.state) for m in unloaded.models] == [
            ("Qwen3-8B-exl3", "unloaded"),
            ("Llama-3.1-8B-exl3", "unloaded"),
        ]
        # a name below a folder is served under its last component
        nested = load_model(process, "Llama-3.1-8B-exl3/4.0bpw", timeout=30)
        assert ("4.0bpw", "loaded") in [(m.name, m.state) for m in nested.models]
    posts = [(path, body, headers) for method, path, headers, body in state.requests if method == "POST"]
    assert [(path, json.loads(body) if body else None) for path, body, _ in posts] == [
        ("/v1/model/load", {"model_name": "Qwen3-8B-exl3"}),
        ("/v1/model/unload", None),
        ("/v1/model/load", {"model_name": "Llama-3.1-8B-exl3/4.0bpw"}),
    ]
    assert {headers["authorization"] for _, _, headers in posts} == {f"Bearer {state.admin_key}"}


def test_auth_disabled_needs_no_key_file(procs: Procs, tmp_path: Path) -> None:
    # `network.disable_auth`: TabbyAPI writes no api_tokens.yml and takes requests without a key
    state = TabbyState(disable_auth=True, loaded="Qwen3-8B-exl3")
    checkout = tabby_checkout(tmp_path / "tabbyAPI")
    with _tabby(procs, checkout, state) as process:
        found = served_models(process)
    assert found.available, found.reason
    assert found.reason == ""
    assert [(m.name, m.state) for m in found.models] == [
        ("Qwen3-8B-exl3", "loaded"),
        ("Llama-3.1-8B-exl3", "unloaded"),
    ]
    assert _keys_sent(state, "/v1/model") == [None]


def test_a_list_of_api_keys_and_only_an_api_key(procs: Procs, tmp_path: Path) -> None:
    # `api_key` may be a list (AuthKeys); without an admin key /v1/models lists only what is
    # loaded, and loading is refused with TabbyAPI's own words
    state = TabbyState(loaded="Qwen3-8B-exl3")
    tokens = f"api_key:\n  - {state.api_key}\n  - other-key\n"
    checkout = tabby_checkout(tmp_path / "tabbyAPI", tokens)
    with _tabby(procs, checkout, state) as process:
        found = served_models(process)
        with pytest.raises(ControlFailed) as failed:
            load_model(process, "Llama-3.1-8B-exl3", timeout=10)
    assert found.available, found.reason
    assert [(m.name, m.state) for m in found.models] == [("Qwen3-8B-exl3", "loaded")]
    assert "HTTP 401: Please provide an admin key" in str(failed.value)
    assert "has no admin_key" in str(failed.value)
    assert state.api_key not in str(failed.value)


def test_a_wrong_key_is_said_without_the_key(procs: Procs, tmp_path: Path) -> None:
    state = TabbyState()
    stale = "stale-key-0000000000000"
    checkout = tabby_checkout(tmp_path / "tabbyAPI", f"api_key: {stale}\nadmin_key: {stale}\n")
    with _tabby(procs, checkout, state) as process:
        found = served_models(process)
    assert not found.available
    assert "/v1/model: HTTP 401 (Invalid API key)" in found.reason
    assert stale not in _shown(found)


def test_load_errors_are_said_literally(procs: Procs, tmp_path: Path) -> None:
    state = TabbyState(load_mode="error", load_error="load failed: \x1b[31mred\x1b[0m out of memory")
    checkout = tabby_checkout(tmp_path / "tabbyAPI", tokens_of(state))
    with _tabby(procs, checkout, state) as process:
        with pytest.raises(ControlFailed) as failed:
            load_model(process, "Qwen3-8B-exl3", timeout=30)
        said = str(failed.value)
        assert said.endswith("load failed: \\x1b[31mred\\x1b[0m out of memory")
        assert "\x1b" not in said
        # a name with no folder: 400 {"detail": ...} (router.py load_model)
        with pytest.raises(ControlFailed, match=r"HTTP 400: Could not find the model path for load"):
            load_model(process, "nope", timeout=30)


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("endless", "no answer within 3s"),
        ("huge", f"answer larger than {8 << 20} bytes"),
        ("long_line", "a line of its answer is longer than 65536 bytes"),
    ],
)
def test_a_load_stream_is_bounded(procs: Procs, tmp_path: Path, mode: str, said: str) -> None:
    state = TabbyState(load_mode=mode)
    checkout = tabby_checkout(tmp_path / "tabbyAPI", tokens_of(state))
    with _tabby(procs, checkout, state) as process, pytest.raises(ControlFailed) as failed:
        load_model(process, "Qwen3-8B-exl3", timeout=3)
    assert said in str(failed.value)


def test_names_with_escapes_are_shown_literally(
    procs: Procs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    evil = "\x1b]0;owned\x07\x1b[2Jm https://u:pw@h/x?token=s3cr3t"
    state = TabbyState(folders=[evil, "plain"], loaded=evil)
    checkout = tabby_checkout(tmp_path / "tabbyAPI", tokens_of(state))
    with _tabby(procs, checkout, state) as process:
        found = served_models(process)
        assert cli.main(["models", str(process.pid)]) == 0
        table = capsys.readouterr().out
    assert [m.state for m in found.models] == ["loaded", "unloaded"]
    assert found.models[0].name.endswith("https://u:***@h/x?token=***")
    assert "\x1b" not in table
    assert "\x07" not in table
    assert "s3cr3t" not in table


def test_a_key_never_shows(procs: Procs, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A server echoing the keys back (as a model's name, in an error) does not make them shown:
    not in the records, their JSON, nor the CLI's table or JSON."""
    state = TabbyState(loaded="Qwen3-8B-exl3")
    state.folders = ["Qwen3-8B-exl3", f"echo-{state.admin_key}", state.api_key]
    state.load_mode, state.load_error = "error", f"bad key {state.admin_key} and {state.api_key}"
    checkout = tabby_checkout(tmp_path / "tabbyAPI", tokens_of(state))
    with _tabby(procs, checkout, state) as process:
        found = served_models(process)
        assert cli.main(["models", str(process.pid), "-o", "json"]) == 0
        assert cli.main(["models", str(process.pid), "-o", "wide"]) == 0
        assert cli.main(["describe", str(process.pid)]) in (0, 1)
        out = capsys.readouterr()
        with pytest.raises(ControlFailed) as failed:
            load_model(process, "Qwen3-8B-exl3", timeout=30)
        assert cli.main(["models", "load", str(process.pid), "Qwen3-8B-exl3"]) == 1
        loaded = capsys.readouterr()
    assert [m.name for m in found.models] == ["Qwen3-8B-exl3", "echo-***", "***"]
    for text in (_shown(found), out.out, out.err, str(failed.value), loaded.out, loaded.err):
        assert state.admin_key not in text
        assert state.api_key not in text
    assert "bad key *** and ***" in str(failed.value)


def _hostile(tmp_path: Path, kind: str) -> Path:
    checkout = tabby_checkout(tmp_path / "tabbyAPI")
    tokens = checkout / "api_tokens.yml"
    if kind == "fifo":
        os.mkfifo(tokens)
    elif kind == "huge":
        tokens.write_bytes(b"api_key: " + b"k" * (10 << 20) + b"\n")
    elif kind == "not_yaml":
        tokens.write_bytes(b"api_key: [unclosed\n\x00\xff SECRET-CONTENT {{{")
    elif kind == "control":
        tokens.write_text('api_key: "ab\\ncd\\x1bSECRET"\nadmin_key: "x\\ty"\n')
    elif kind == "symlink_other":
        # a file the owner may read, which is not a key file: read as the server would read it,
        # and nothing of it shown
        other = tmp_path / "id_rsa"
        other.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nSECRET-CONTENT\n")
        tokens.symlink_to(other)
    elif kind == "symlink_proc":
        tokens.symlink_to("/proc/self/environ")
    elif kind == "directory":
        tokens.mkdir()
    return checkout


@pytest.mark.parametrize(
    ("kind", "problem"),
    [
        ("missing", "key file 'api_tokens.yml' cannot be read: No such file or directory"),
        ("fifo", "key file 'api_tokens.yml' is not a regular file (a FIFO); not read"),
        ("huge", "key file 'api_tokens.yml' is larger than 65536 bytes; not read"),
        ("not_yaml", "key file 'api_tokens.yml' is not YAML enginespec reads; not read"),
        ("control", "its api_key has characters a header cannot carry; not sent"),
        ("symlink_other", "key file 'api_tokens.yml' is not a mapping of keys; not read"),
        ("symlink_proc", "key file 'api_tokens.yml' is on a kernel filesystem (proc), not a file; not read"),
        ("directory", "key file 'api_tokens.yml' is not a regular file (a directory); not read"),
    ],
)
def test_a_hostile_key_file_is_not_used_and_says_why(
    procs: Procs, tmp_path: Path, kind: str, problem: str
) -> None:
    state = TabbyState(loaded="Qwen3-8B-exl3")
    with _tabby(procs, _hostile(tmp_path, kind), state) as process:
        found = served_models(process)
        with pytest.raises(ControlFailed) as failed:
            load_model(process, "Qwen3-8B-exl3", timeout=10)
    assert not found.available
    assert "/v1/model: HTTP 401 (Please provide an API key)" in found.reason
    assert problem in found.reason
    assert "HTTP 401: Please provide an admin key" in str(failed.value)
    assert problem in str(failed.value)
    assert _keys_sent(state, "/v1/model") == [None]
    for text in (_shown(found), str(failed.value)):
        assert "SECRET" not in text


def test_a_key_file_its_owner_cannot_read_is_not_read_as_root(
    procs: Procs, nobody_dir: Path, nobody_idle: Path
) -> None:
    """The engine runs as `nobody`; its key file links to a root-only file of keys: enginespec
    (root) reads it as `nobody` would, and so does not."""
    state = TabbyState(loaded="Qwen3-8B-exl3")
    checkout = tabby_checkout(nobody_dir / "tabbyAPI")
    for directory in (checkout, *checkout.rglob("*")):
        directory.chmod(0o755 if directory.is_dir() else 0o644)
    secret = nobody_dir / "root-only.yml"
    secret.write_text(tokens_of(state))
    secret.chmod(0o600)
    (checkout / "api_tokens.yml").symlink_to(secret)
    with _tabby(procs, checkout, state, executable=nobody_idle, user="nobody") as process:
        found = served_models(process)
    assert not found.available
    assert "key file 'api_tokens.yml' is not readable by the process's owner; not read" in found.reason
    assert _keys_sent(state, "/v1/model") == [None]


def test_none_loaded_is_not_an_error(procs: Procs, tmp_path: Path) -> None:
    # and unloading then sends nothing (TabbyAPI's unload acts on whatever is loaded)
    state = TabbyState(folders=[])
    checkout = tabby_checkout(tmp_path / "tabbyAPI", tokens_of(state))
    with _tabby(procs, checkout, state) as process:
        found = served_models(process)
        unload_model(process, "Qwen3-8B-exl3", timeout=10)
    assert (found.available, found.models, found.reason) == (True, (), "")
    assert [path for method, path, _, _ in state.requests if method == "POST"] == []
    assert NONE_LOADED == "No models are currently loaded."
