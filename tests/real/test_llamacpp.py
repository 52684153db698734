"""llama-server built by install() from the llama.cpp tree vendored in llama-cpp-python's sdist,
end to end on a tiny random GGUF."""

from __future__ import annotations

from pathlib import Path

import pytest
from lifecycle import HOST, chat, flags_in, free_port, launched, scanned, stop, tiny_recipe, walk
from models import broken_gguf, gguf_model

from enginespec import Config, EngineExited, InstallOptions, get_engine_spec
from enginespec.health.checks import check_health, wait_ready
from enginespec.lifecycle.installing import source_stamp


def test_llama_server_install_launch_find_wait_chat_clash_stop(
    config: Config, sdist: Path, models_dir: Path, tmp_path: Path
) -> None:
    spec = get_engine_spec("llamacpp")
    options = InstallOptions(source=str(sdist), timeout=5400)
    installed = spec.install(options, config)
    # the binary says which source it was built from: build, and the sdist's stamp as its commit
    stamp = source_stamp(str(sdist), None)
    assert stamp is not None
    assert installed.version.endswith(f".g{stamp}"), installed.version
    again = spec.install(options, config)
    assert (again.already_installed, again.version) == (True, installed.version)
    info = spec.get_runtime_info(config)
    assert (info.installed, info.location, info.version) == (True, "managed", installed.version)
    model = gguf_model(models_dir / "tiny.gguf")
    recipe = tiny_recipe("llamacpp", model, max_model_len=256)
    command = spec.plan(recipe, config)
    assert flags_in(command) <= spec.get_config_help(config).flags
    with launched(recipe, config, tmp_path / "llama.log") as running:
        process = scanned(running.popen.pid)
        assert (process.engine, process.model, process.served_model_names, process.host, process.port) == (
            "llamacpp",
            str(model),
            ("tiny",),
            HOST,
            recipe.port,
        )
        walked = walk(process, running.popen, timeout=300)
        assert walked.states[-1] == "ready", (walked, running.output())
        assert set(walked.states) <= {"starting", "loading", "ready"}, walked
        process = scanned(running.popen.pid)
        assert (recipe.port in process.listen_ports, process.port_conflicts) == (True, ())
        health = check_health(process, verify_identity=True, timeout=10)
        assert (health.state, health.model_ids) == ("ready", ("tiny",)), health
        body = chat(running.url, "tiny")
        assert body["choices"], body
        # A second llama-server on the same port exits 1 at once; waiting for it through its
        # Popen reports that, never the first server's readiness.
        with launched(recipe, config, tmp_path / "llama-second.log") as second:
            with pytest.raises(EngineExited) as exited:
                wait_ready("llamacpp", running.url, timeout=120, poll=0.05, process=second.popen)
            assert exited.value.returncode == 1, second.output()
        stop(running)
    # a model that cannot be loaded: the server exits 1
    bad = recipe.model_copy(
        update={"model_path": str(broken_gguf(models_dir / "broken.gguf")), "port": free_port()}
    )
    with launched(bad, config, tmp_path / "llama-bad.log") as failing:
        with pytest.raises(EngineExited) as exited:
            wait_ready("llamacpp", failing.url, timeout=120, poll=0.1, process=failing.popen)
        assert exited.value.returncode == 1, failing.output()
    assert check_health("llamacpp", running.url).state == "down"
