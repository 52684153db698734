"""Facts from outside argv, read from real processes: the environment (llama-server's
LLAMA_ARG_*), and config files (vLLM/SGLang --config), with where each fact came from."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from enginespec import EngineProcess, Scanner
from helpers.procs import Procs, wait_for


@pytest.fixture
def started(helper: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for proc in processes:
        proc.kill()
        proc.wait()


def _start(
    started: list[subprocess.Popen[bytes]], helper: Path, argv: list[str], cwd: Path, **kwargs: object
) -> int:
    proc = subprocess.Popen(argv, executable=helper, cwd=cwd, start_new_session=True, **kwargs)  # type: ignore[call-overload]
    started.append(proc)
    wait_for(lambda: Path(f"/proc/{proc.pid}/cmdline").read_bytes() != b"")
    return int(proc.pid)


def _find(scanner: Scanner, pid: int) -> EngineProcess:
    return next(p for p in scanner.scan() if p.pid == pid)


def test_llama_server_settings_from_its_environment(procs: Procs) -> None:
    env = {"LLAMA_ARG_MODEL": "/m/from-env.gguf", "LLAMA_ARG_PORT": "8123", "LLAMA_ARG_ALIAS": "a,b"}
    from_env = procs.start(["llama-server", "-ngl", "99"], **env)
    argv_wins = procs.start(["llama-server", "-m", "/m/argv.gguf", "--port", "9001"], **env)
    bad_port = procs.start(["llama-server"], LLAMA_ARG_MODEL="/m/x.gguf", LLAMA_ARG_PORT="80a")
    scanner = Scanner()
    first = _find(scanner, from_env.pid)
    assert (first.model, first.served_model_names, first.port, first.effective_port) == (
        "/m/from-env.gguf",
        ("a", "b"),
        8123,
        8123,
    )
    assert first.sources == {
        "model": "environment",
        "served_model_name": "environment",
        "host": "default",
        "port": "environment",
    }
    assert first.base_url == "http://127.0.0.1:8123"
    second = _find(scanner, argv_wins.pid)
    assert (second.model, second.port) == ("/m/argv.gguf", 9001)
    assert (second.sources["model"], second.sources["port"], second.sources["served_model_name"]) == (
        "argv",
        "argv",
        "environment",
    )
    third = _find(scanner, bad_port.pid)
    assert (third.effective_port, third.base_url) == (None, None)  # not the default port
    assert any("80a" in problem for problem in third.problems)


def test_vllm_config_file_relative_to_the_process_and_edits_seen(
    helper: Path, started: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text("model: org/from-config\nport: 8111\nserved-model-name: [one, two]\nhost: 127.0.0.1\n")
    pid = _start(started, helper, ["vllm", "serve", "--config", "serve.yaml", "--port", "8222"], tmp_path)
    scanner = Scanner()
    found = _find(scanner, pid)
    assert (found.model, found.served_model_names, found.host, found.port) == (
        "org/from-config",
        ("one", "two"),
        "127.0.0.1",
        8222,
    )
    assert found.sources == {
        "model": "config",
        "served_model_name": "config",
        "host": "config",
        "port": "argv",
    }
    config.write_text("model: org/edited\n")
    os.utime(config, ns=(1, 1))  # a different mtime for sure, whatever the clock's resolution
    edited = _find(scanner, pid)
    assert (edited.model, edited.served_model_names, edited.sources["host"]) == ("org/edited", (), "default")


def test_config_problems_are_data(
    helper: Path, started: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    (tmp_path / "broken.yaml").write_text("model: [unclosed\n")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    (tmp_path / "huge.yaml").write_text("model: x\n" + "#" * (1 << 21))
    cases = {
        "broken.yaml": "not valid YAML",
        "list.yaml": "not a mapping",
        "huge.yaml": "larger than",
        "missing.yaml": "cannot be read",
    }
    pids = {
        _start(started, helper, ["python3", "-m", "sglang.launch_server", "--config", name], tmp_path): why
        for name, why in cases.items()
    }
    found = {p.pid: p for p in Scanner().scan() if p.pid in pids}
    for pid, why in pids.items():
        assert found[pid].model is None
        assert any(why in problem for problem in found[pid].problems), found[pid].problems


def test_a_config_path_the_owner_cannot_read_is_not_read(
    helper: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    private = Path(tempfile.mkdtemp(prefix="enginespec-private-"))
    shared = Path(tempfile.mkdtemp(prefix="enginespec-shared-"))
    shared.chmod(0o755)
    try:
        secret = private / "root-only.yaml"
        secret.write_text("model: root-secret-model\n")
        secret.chmod(0o600)
        idle = shared / "idle"
        shutil.copy(helper, idle)
        idle.chmod(0o755)
        pid = _start(started, idle, ["vllm", "serve", "--config", str(secret)], shared, user="nobody")
        found = _find(Scanner(), pid)
        assert found.model is None
        assert any("not readable by the process's owner" in problem for problem in found.problems)
    finally:
        shutil.rmtree(private, ignore_errors=True)
        shutil.rmtree(shared, ignore_errors=True)


def test_llama_cpp_python_environment_and_config_file(
    procs: Procs, helper: Path, started: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    # uvicorn.run(host=os.getenv("HOST", ...), port=int(os.getenv("PORT", ...))): the environment
    # beats argv for host and port, argv beats MODEL (llama-cpp-python 0.3.35 __main__.py).
    env = {"HOST": "127.0.0.9", "PORT": "8555", "MODEL": "/m/env.gguf", "MODEL_ALIAS": "env-alias"}
    module = ["python3", "-m", "llama_cpp.server"]
    both = procs.start([*module, "--model", "/m/argv.gguf", "--host", "0.0.0.0", "--port", "8000"], **env)
    only_env = procs.start(module, **env)
    scanner = Scanner()
    first = _find(scanner, both.pid)
    assert (first.model, first.served_model_names, first.host, first.port) == (
        "/m/argv.gguf",
        ("env-alias",),
        "127.0.0.9",
        8555,
    )
    assert first.sources == {
        "model": "argv",
        "served_model_name": "environment",
        "host": "environment",
        "port": "environment",
    }
    second = _find(scanner, only_env.pid)
    assert (second.model, second.base_url) == ("/m/env.gguf", "http://127.0.0.9:8555")
    # With --config_file, host and port come from the file (JSON here) and argv's are ignored;
    # the models come from its `models` entries.
    (tmp_path / "c.json").write_text(
        '{"host": "127.0.0.7", "port": 8444, "models": [{"model": "/m/a.gguf", "model_alias": "a"},'
        ' {"model": "/m/b.gguf", "model_alias": "b"}]}'
    )
    pid = _start(started, helper, [*module, "--config_file", "c.json", "--port", "9"], tmp_path)
    third = _find(scanner, pid)
    assert (third.model, third.served_model_names, third.host, third.port) == (
        "/m/a.gguf",
        ("a", "b"),
        "127.0.0.7",
        8444,
    )
    assert set(third.sources.values()) == {"config"}
    # a config file without host and port: the defaults, not argv's port
    (tmp_path / "d.json").write_text('{"models": [{"model": "/m/a.gguf"}]}')
    pid = _start(started, helper, [*module, "--config_file", "d.json", "--port", "9"], tmp_path)
    fourth = _find(scanner, pid)
    assert (fourth.port, fourth.effective_port, fourth.sources["port"]) == (None, 8000, "default")
    assert fourth.base_url == "http://localhost:8000"


def test_llama_cpp_python_config_file_named_by_its_environment(procs: Procs, tmp_path: Path) -> None:
    # config_file = os.environ.get("CONFIG_FILE", args.config_file); `if config_file:` (llama-cpp-python
    # 0.3.35 __main__.py): the variable wins over the flag, and set but empty it names none, so that
    # the flag's file is not read either and argv's settings hold.
    (tmp_path / "flag.json").write_text('{"port": 8111, "models": [{"model": "/m/flag.gguf"}]}')
    (tmp_path / "env.json").write_text('{"port": 8222, "models": [{"model": "/m/env.gguf"}]}')
    module = ["python3", "-m", "llama_cpp.server", "--config_file", "flag.json", "--model", "/m/argv.gguf"]
    by_env = procs.start(module, cwd=tmp_path, CONFIG_FILE="env.json")
    empty = procs.start(module, cwd=tmp_path, CONFIG_FILE="")
    by_flag = procs.start(module, cwd=tmp_path)
    scanner = Scanner()
    found = {p.pid: p for p in scanner.scan()}
    assert (found[by_env.pid].model, found[by_env.pid].port) == ("/m/env.gguf", 8222)
    assert (found[empty.pid].model, found[empty.pid].port, found[empty.pid].sources["model"]) == (
        "/m/argv.gguf",
        None,
        "argv",
    )
    assert (found[by_flag.pid].model, found[by_flag.pid].port) == ("/m/flag.gguf", 8111)
