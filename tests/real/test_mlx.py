"""mlx_lm.server (mlx-lm[cpu] from PyPI through install()) end to end on a tiny random model."""

from __future__ import annotations

import time
from pathlib import Path

from lifecycle import HOST, chat, flags_in, free_port, launched, scanned, stop, walk
from models import hf_model

from enginespec import Config, InstallOptions, Recipe, get_engine_spec
from enginespec.health.checks import check_health


def test_mlx_install_launch_find_wait_chat_clash_stop(
    config: Config, models_dir: Path, tmp_path: Path
) -> None:
    spec = get_engine_spec("mlx")
    installed = spec.install(InstallOptions(installer="pip", timeout=3600), config)
    again = spec.install(InstallOptions(installer="pip"), config)
    assert (again.already_installed, again.version) == (True, installed.version)
    info = spec.get_runtime_info(config)
    assert (info.installed, info.location, info.version) == (True, "managed", installed.version)
    model = hf_model(models_dir / "mlx-tiny")
    # mlx-lm 0.32.2 lists models by scanning the Hugging Face cache (server.py
    # handle_models_request): with no cache directory scan_cache_dir raises after the 200 status
    # went out and /v1/models has an empty body, so identity cannot be read. An empty cache here.
    hf_home = tmp_path / "hf-home"
    (hf_home / "hub").mkdir(parents=True)
    recipe = Recipe(
        engine="mlx", model_path=str(model), host=HOST, port=free_port(), env_vars={"HF_HOME": str(hf_home)}
    )
    command = spec.plan(recipe, config)
    assert flags_in(command) <= spec.get_config_help(config, timeout=300).flags
    with launched(recipe, config, tmp_path / "mlx.log") as running:
        process = scanned(running.popen.pid)
        assert (process.engine, process.model, process.host, process.port) == (
            "mlx",
            str(model),
            HOST,
            recipe.port,
        )
        walked = walk(process, running.popen, timeout=300)
        assert walked.states[-1] == "ready", (walked, running.output())
        # listening now: the scan's record has the port, and its own tree holds it
        process = scanned(running.popen.pid)
        assert recipe.port in process.listen_ports
        assert process.port_conflicts == ()
        health = check_health(process, verify_identity=True, timeout=10)
        assert health.state == "ready", health.reason
        body = chat(running.url, str(model))
        assert body["choices"], body
        # A second server on the same port: its bind fails in the server thread, the process
        # stays up listening on nothing (mlx-lm 0.32), and the first one answers its port.
        with launched(recipe, config, tmp_path / "mlx-second.log") as second:
            clashing = scanned(second.popen.pid)
            deadline = time.monotonic() + 120
            while "Address already in use" not in second.output():
                assert time.monotonic() < deadline, second.output()
                time.sleep(0.2)
            time.sleep(1)
            assert second.popen.poll() is None, second.output()
            clash = check_health(clashing, timeout=5)
            assert clash.state == "unhealthy", clash
            assert f"held by pid {running.popen.pid}, not by this server" in clash.reason, clash
        stop(running)
    assert check_health("mlx", running.url).state == "down"
    # A model that cannot load: the process stays up and /health says 503 {"status":
    # "unavailable"} (mlx-lm 0.32.2), which is unhealthy, never loading forever.
    broken = models_dir / "mlx-broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "llama", broken')
    bad = recipe.model_copy(update={"model_path": str(broken), "port": free_port()})
    with launched(bad, config, tmp_path / "mlx-bad.log") as failing:
        process = scanned(failing.popen.pid)
        deadline = time.monotonic() + 120
        while (health := check_health(process, timeout=5)).state != "unhealthy":
            assert failing.popen.poll() is None, failing.output()
            assert time.monotonic() < deadline, (health, failing.output())
            time.sleep(0.2)
        assert "failed to load" in health.reason, health
        assert failing.popen.poll() is None
