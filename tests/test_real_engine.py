"""Opt-in (`pytest -m real_engine`): install a real engine from the registries through install()
and probe it. Slow and needs network access to PyPI; not part of the default run."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from enginespec import Config, InstallOptions, ProgressEvent, get_engine_spec
from enginespec.health import check_health

pytestmark = pytest.mark.real_engine

DATA_DIR = Path(os.environ.get("ENGINESPEC_REAL_ENGINE_DATA_DIR", "/tmp/enginespec-real-engine"))


def test_install_and_probe_mlx_lm_on_linux_cpu() -> None:
    config = Config(data_dir=DATA_DIR)
    mlx = get_engine_spec("mlx")
    events: list[ProgressEvent] = []
    result = mlx.install(InstallOptions(installer="pip", progress=events.append), config)
    print(f"\ninstall: {result.requirement} -> {result.version} (already: {result.already_installed})")
    assert result.version
    assert mlx.install(InstallOptions(installer="pip"), config).already_installed
    info = mlx.get_runtime_info(config)
    print(f"info: {info}")
    assert (info.installed, info.location) == (True, "managed")
    assert result.binary_path is not None
    probe = mlx.probe_binary(result.binary_path)
    print(f"probe: {probe}")
    assert probe.version == result.version
    help_ = mlx.get_config_help(config, timeout=120)
    print(f"help: {len(help_.flags)} flags, e.g. {sorted(help_.flags)[:8]}")
    assert {"--model", "--host", "--port"} <= help_.flags

    # The real server with a model that cannot load: what does /health say?
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [result.binary_path, "--model", "/nonexistent/model", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    try:
        states = []
        for _ in range(40):
            health = check_health("mlx", f"http://127.0.0.1:{port}", timeout=2)
            states.append(health.state)
            if server.poll() is not None or health.state not in ("down",):
                break
            time.sleep(0.5)
        print(f"real mlx_lm.server with a missing model: states {states}, exit {server.poll()}")
        assert states[-1] in ("unhealthy", "loading", "down")
    finally:
        server.kill()
        server.wait()


def _llama_cpp_python_sdist(directory: Path) -> Path:
    """The llama-cpp-python sdist from PyPI (it vendors llama.cpp's source tree)."""
    given = os.environ.get("ENGINESPEC_LLAMACPP_SOURCE")
    if given:
        return Path(given)
    import json
    import shutil
    import urllib.parse
    import urllib.request

    index = "https://pypi.org/pypi/llama-cpp-python/json"
    with urllib.request.urlopen(index, timeout=60) as answer:
        release = json.load(answer)
    sdist = next(u for u in release["urls"] if u["packagetype"] == "sdist")
    target = directory / sdist["filename"]
    if not target.exists():
        url = urllib.parse.urljoin(index, sdist["url"])
        with urllib.request.urlopen(url, timeout=600) as answer, open(target, "wb") as file:
            shutil.copyfileobj(answer, file)
    return target


def test_build_llama_server_from_the_vendored_source_and_probe_it(tmp_path: Path) -> None:
    from enginespec import Scanner
    from enginespec.health import EngineExited, wait_ready

    config = Config(data_dir=DATA_DIR)
    llama = get_engine_spec("llamacpp")
    source = _llama_cpp_python_sdist(DATA_DIR)
    result = llama.install(InstallOptions(source=str(source), timeout=3600), config)
    print(f"\ninstall: {result.binary_path} version {result.version} (already: {result.already_installed})")
    assert result.binary_path is not None
    probe = llama.probe_binary(result.binary_path)
    print(f"probe: {probe}")
    assert probe.installed
    help_ = llama.get_config_help(config)
    print(f"help: {len(help_.flags)} flags")
    assert {"--model", "-m", "--host", "--port", "--alias", "--ctx-size", "-ngl"} <= help_.flags

    # The real server with a model file that does not exist exits with status 1; waiting for it
    # to become ready fails fast with that status.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [result.binary_path, "-m", str(tmp_path / "missing.gguf"), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        found = [p for p in Scanner().scan() if p.pid == server.pid]
        target = found[0] if found else "llamacpp"
        with pytest.raises(EngineExited) as exited:
            wait_ready(
                target, None if found else f"http://127.0.0.1:{port}", timeout=60, poll=0.1, process=server
            )
        print(
            f"real llama-server with a missing model: {exited.value} (returncode {exited.value.returncode})"
        )
        assert exited.value.returncode == 1
    finally:
        server.kill()
        server.wait()
