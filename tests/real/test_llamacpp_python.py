"""llama-cpp-python's own server (llama-cpp-python[server], CPU build from its sdist through
install()) end to end on a tiny random GGUF, and with a config file of two, one loaded at a time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from lifecycle import (
    HOST,
    LLAMA_CPP_PYTHON,
    chat,
    flags_in,
    free_port,
    launched,
    scanned,
    stop,
    tiny_recipe,
    walk,
)
from models import broken_gguf, gguf_model

from enginespec import Config, EngineExited, InstallOptions, get_engine_spec, served_models
from enginespec.health.checks import check_health, wait_ready


def test_llama_cpp_python_install_launch_find_wait_chat_clash_stop(
    config: Config, sdist: Path, models_dir: Path, tmp_path: Path
) -> None:
    spec = get_engine_spec("llamacpp-python")
    # pip builds the sdist (llama.cpp inside) on this CPU: CMAKE_ARGS left to llama.cpp's defaults
    options = InstallOptions(
        version=LLAMA_CPP_PYTHON, installer="pip", find_links=(str(sdist.parent),), timeout=5400
    )
    installed = spec.install(options, config)
    assert installed.version == LLAMA_CPP_PYTHON
    again = spec.install(options, config)
    assert (again.already_installed, again.version) == (True, LLAMA_CPP_PYTHON)
    info = spec.get_runtime_info(config)
    assert (info.installed, info.location, info.version) == (True, "managed", LLAMA_CPP_PYTHON)
    model = gguf_model(models_dir / "lcp-tiny.gguf")
    recipe = tiny_recipe("llamacpp-python", model, max_model_len=256)
    command = spec.plan(recipe, config)
    assert command.launcher == "module"
    assert flags_in(command) <= spec.get_config_help(config, timeout=120).flags
    with launched(recipe, config, tmp_path / "lcp.log") as running:
        process = scanned(running.popen.pid)
        assert (process.engine, process.model, process.served_model_names, process.host, process.port) == (
            "llamacpp-python",
            str(model),
            ("tiny",),
            HOST,
            recipe.port,
        )
        # the model loads before uvicorn listens: refused (starting) until it is ready
        walked = walk(process, running.popen, timeout=300)
        assert walked.states[-1] == "ready", (walked, running.output())
        assert set(walked.states) <= {"starting", "ready"}, walked
        runtime = spec.get_runtime_info(config, running=process)
        assert runtime.version == LLAMA_CPP_PYTHON
        process = scanned(running.popen.pid)
        assert (recipe.port in process.listen_ports, process.port_conflicts) == (True, ())
        health = check_health(process, verify_identity=True, timeout=10)
        assert (health.state, health.model_ids) == ("ready", ("tiny",)), health
        body = chat(running.url, "tiny")
        assert body["choices"], body
        # A second server on the same port loads its model, then uvicorn cannot bind and exits
        # with its STARTUP_FAILURE status 3 (uvicorn 0.54 main.py run); the first one answers the
        # port meanwhile, never taken for the second's readiness.
        with launched(recipe, config, tmp_path / "lcp-second.log") as second:
            with pytest.raises(EngineExited) as exited:
                wait_ready("llamacpp-python", running.url, timeout=300, poll=0.1, process=second.popen)
            assert exited.value.returncode == 3, second.output()
            assert "address already in use" in second.output()
        stop(running)
    bad = recipe.model_copy(
        update={"model_path": str(broken_gguf(models_dir / "lcp-broken.gguf")), "port": free_port()}
    )
    with launched(bad, config, tmp_path / "lcp-bad.log") as failing:
        with pytest.raises(EngineExited) as exited:
            wait_ready("llamacpp-python", failing.url, timeout=300, poll=0.1, process=failing.popen)
        assert exited.value.returncode != 0, failing.output()
    assert check_health("llamacpp-python", running.url).state == "down"


def test_llama_cpp_python_serves_one_model_of_its_config_at_a_time(
    config: Config, sdist: Path, models_dir: Path, tmp_path: Path
) -> None:
    """Its LlamaProxy loads the config's first model, another when a request names it (the one
    before closed): `served_models` tells which from the model file the real server maps."""
    spec = get_engine_spec("llamacpp-python")
    options = InstallOptions(
        version=LLAMA_CPP_PYTHON, installer="pip", find_links=(str(sdist.parent),), timeout=5400
    )
    spec.install(options, config)
    first = gguf_model(models_dir / "lcp-first.gguf", seed=1)
    second = gguf_model(models_dir / "lcp-second.gguf", seed=2)
    port = free_port()
    entries = [
        {"model": str(first), "model_alias": "first", "n_ctx": 256},
        {"model": str(second), "n_ctx": 256},
    ]
    (tmp_path / "models.json").write_text(json.dumps({"host": HOST, "port": port, "models": entries}))
    command = spec.plan(tiny_recipe("llamacpp-python", first, max_model_len=256), config)
    module = list(command.argv[: 1 + len(spec.launch.module_args)])
    with open(tmp_path / "lcp-config.log", "wb") as log:
        popen = subprocess.Popen(
            [*module, "--config_file", "models.json"],
            cwd=tmp_path,
            env={**os.environ, **command.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        process = scanned(popen.pid)
        assert (process.model, process.port, process.sources["model"]) == (str(first), port, "config")
        walked = walk(process, popen, timeout=300)
        assert walked.states[-1] == "ready", (tmp_path / "lcp-config.log").read_text()
        url = f"http://{HOST}:{port}"

        def states() -> dict[str, str]:
            found = served_models(process, timeout=30)
            assert found.available, found.reason
            return {m.name: m.state for m in found.models}

        assert states() == {"first": "loaded", str(second): "unloaded"}
        assert chat(url, str(second))["choices"]
        assert states() == {"first": "unloaded", str(second): "loaded"}
        assert chat(url, "first")["choices"]
        assert states() == {"first": "loaded", str(second): "unloaded"}
    finally:
        if popen.poll() is None:
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait()
