"""What llama-cpp-python serves with a config file (issue 40): the models of its config, one loaded
at a time, told by the model file the server maps. Real processes: `python -m llama_cpp.server
--config_file F` (tests/data/fake_llama_cpp: the routes of llama-cpp-python 0.3.35 app.py, its
LlamaProxy's one-at-a-time loading from model.py, each model file mapped whole as llama.cpp maps
a GGUF); the config file hostile in the ways a user's file can be. Both backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import enginespec.cli.app as cli
from enginespec import EngineProcess, Scanner, served_models
from enginespec.errors import ControlUnsupported
from enginespec.lifecycle.modelcontrol import load_model
from helpers.fakeserver import free_port
from helpers.procs import stop_child, wait_for

FAKE = Path(__file__).parents[1] / "data" / "fake_llama_cpp"


@pytest.fixture
def servers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        stop_child(proc, timeout=5)


def _start(
    started: list[subprocess.Popen[bytes]], cwd: Path, args: list[str], port: int, **env: str
) -> EngineProcess:
    """`python -m llama_cpp.server ARGS` in ``cwd``, once it answers on ``port``: its scanned record."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(FAKE), **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    started.append(proc)

    def answers() -> bool:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2):
                return True
        except OSError:
            return False

    wait_for(answers, timeout=30)
    return next(p for p in Scanner().scan() if p.pid == proc.pid)


def _chat(port: int, model: str) -> None:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]}).encode()
    asked = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body, method="POST")
    with urllib.request.urlopen(asked, timeout=10) as answer:
        assert answer.status == 200


def _models(tmp_path: Path, *names: str) -> list[Path]:
    folder = tmp_path / "models"
    folder.mkdir(exist_ok=True)
    made = []
    for name in names:
        (folder / name).write_bytes(b"GGUF" + name.encode() * 4096)
        made.append(folder / name)
    return made


def _config(tmp_path: Path, port: int, entries: list[dict[str, object]], name: str = "c.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"host": "127.0.0.1", "port": port, "models": entries}))
    return path


def _states(process: EngineProcess) -> dict[str, str]:
    found = served_models(process, timeout=5)
    assert found.available, found.reason
    assert found.source == f"{process.base_url}/v1/models"
    return {m.name: m.state for m in found.models}


def test_the_model_it_maps_is_loaded_the_others_are_not(
    servers: list[subprocess.Popen[bytes]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, c = _models(tmp_path, "a.gguf", "b.gguf", "c.gguf")
    port = free_port()
    # an alias, a model without one (its alias is its path), a path relative to the server's
    # working directory, and a link to a model file (what it maps is the file linked to)
    (tmp_path / "link.gguf").symlink_to(c)
    entries: list[dict[str, object]] = [
        {"model": str(a), "model_alias": "qwen"},
        {"model": str(b)},
        {"model": "link.gguf", "model_alias": "linked"},
    ]
    _config(tmp_path, port, entries)
    process = _start(servers, tmp_path, ["--config_file", "c.json"], port)
    assert (process.engine, process.sources["model"]) == ("llamacpp-python", "config")
    assert _states(process) == {"qwen": "loaded", str(b): "unloaded", "linked": "unloaded"}
    _chat(port, str(b))
    assert _states(process) == {"qwen": "unloaded", str(b): "loaded", "linked": "unloaded"}
    _chat(port, "linked")
    assert _states(process) == {"qwen": "unloaded", str(b): "unloaded", "linked": "loaded"}
    assert cli.main(["models", str(process.pid), "-o", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(m["name"], m["state"]) for m in shown[0]["models"]] == [
        ("qwen", "unloaded"),
        (str(b), "unloaded"),
        ("linked", "loaded"),
    ]
    # it has no API that loads or unloads: a request naming a model does, which is not control
    with pytest.raises(ControlUnsupported, match="llamacpp-python has no API for it"):
        load_model(process, "qwen", timeout=5)


def test_the_config_file_named_by_its_environment_wins(
    servers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    # os.environ.get("CONFIG_FILE", args.config_file) (llama_cpp/server/__main__.py v0.3.35)
    a, b = _models(tmp_path, "a.gguf", "b.gguf")
    port, other = free_port(), free_port()
    _config(tmp_path, other, [{"model": str(a), "model_alias": "from-flag"}], "flag.json")
    named = _config(tmp_path, port, [{"model": str(b), "model_alias": "from-env"}, {"model": str(a)}])
    process = _start(servers, tmp_path, ["--config_file", "flag.json"], port, CONFIG_FILE=str(named))
    assert (process.port, process.served_model_names) == (port, ("from-env",))
    assert _states(process) == {"from-env": "loaded", str(a): "unloaded"}


def test_started_with_a_model_it_serves_that_one_fixed(
    servers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    (a,) = _models(tmp_path, "a.gguf")
    port = free_port()
    args = ["--model", str(a), "--model_alias", "tiny", "--host", "127.0.0.1", "--port", str(port)]
    process = _start(servers, tmp_path, args, port)
    found = served_models(process, timeout=5)
    assert (found.available, found.source) == (True, "argv")
    assert [(m.name, m.state) for m in found.models] == [("tiny", "loaded")]


def test_a_model_read_without_a_mapping_cannot_be_told(
    servers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    a, b = _models(tmp_path, "a.gguf", "b.gguf")
    port = free_port()
    _config(tmp_path, port, [{"model": str(a), "model_alias": "a", "use_mmap": False}, {"model": str(b)}])
    process = _start(servers, tmp_path, ["--config_file", "c.json"], port)
    found = served_models(process, timeout=5)
    assert (found.available, found.models) == (False, ())
    assert "which of its 2 models is loaded cannot be told" in found.reason
    assert "it maps no model file of its config" in found.reason


@pytest.mark.parametrize("replaced_by", ["fifo", "huge", "not json", "no models", "gone", "a directory"])
def test_a_config_file_replaced_after_start_is_said_not_followed(
    servers: list[subprocess.Popen[bytes]], tmp_path: Path, replaced_by: str
) -> None:
    (a,) = _models(tmp_path, "a.gguf")
    port = free_port()
    config = _config(tmp_path, port, [{"model": str(a), "model_alias": "a"}])
    process = _start(servers, tmp_path, ["--config_file", "c.json"], port)
    config.unlink()
    if replaced_by == "fifo":
        os.mkfifo(config)
    elif replaced_by == "huge":
        config.write_bytes(b'{"models": [' + b'{"model": "x"},' * 100_000 + b'{"model": "y"}]}')
    elif replaced_by == "not json":
        config.write_text("models:\n  - model: [unclosed")
    elif replaced_by == "no models":
        config.write_text('{"models": {"model": "x"}}')
    elif replaced_by == "a directory":
        config.mkdir()
    found = served_models(process, timeout=5)
    assert (found.available, found.models) == (False, ())
    reason = {
        "fifo": "is not a regular file (a FIFO); not read",
        "huge": "is larger than 262144 bytes",
        "not json": "not read",
        "no models": "has no list 'models'",
        "gone": "No such file or directory",
        "a directory": "is not a regular file (a directory)",
    }[replaced_by]
    assert reason in found.reason, found.reason
    assert "config file 'c.json'" in found.reason


def test_a_lying_server_and_hostile_names(servers: list[subprocess.Popen[bytes]], tmp_path: Path) -> None:
    """Names the config gives are shown masked and literally; a file the config names that is a
    FIFO, a device or missing is never opened, and is simply not the loaded one."""
    (a,) = _models(tmp_path, "a.gguf")
    os.mkfifo(tmp_path / "models" / "fifo.gguf")
    port = free_port()
    evil = "\x1b]0;owned\x07 https://u:pw@h/m.gguf?token=s3cr3t"
    entries: list[dict[str, object]] = [
        {"model": str(a), "model_alias": evil},
        {"model": str(tmp_path / "models" / "fifo.gguf"), "model_alias": "fifo"},
        {"model": "/dev/zero", "model_alias": "zero"},
        {"model": str(tmp_path / "missing.gguf"), "model_alias": "missing"},
    ]
    # the fake maps its first model only; the others are never loaded by it
    _config(tmp_path, port, entries)
    process = _start(servers, tmp_path, ["--config_file", "c.json"], port)
    found = served_models(process, timeout=5)
    assert found.available, found.reason
    states = {m.name: m.state for m in found.models}
    (shown,) = [name for name in states if name.startswith("\x1b") or "owned" in name]
    assert "s3cr3t" not in shown
    assert "pw@" not in shown
    assert states[shown] == "loaded"
    assert {states["fifo"], states["zero"], states["missing"]} == {"unloaded"}
    assert "s3cr3t" not in found.model_dump_json()
