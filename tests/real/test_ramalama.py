"""RamaLama for real (issue 41): the `ramalama` package from PyPI, pinned, installed into a venv
of the CI cache (pure Python: seconds), runs `ramalama --nocontainer serve file://TINY.gguf` with
the llama-server CI builds first on PATH. RamaLama copies the model into its store and runs
llama-server as its child (ramalama 0.25.0 ramalama/common.py exec_cmd: subprocess.run, then
sys.exit with its status); enginespec finds RamaLama as engine `ramalama` and the llama-server
as its runner, waits for it through RamaLama's port, lists its model and stops both."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

from lifecycle import chat, free_port, scanned, walk
from models import gguf_model

from enginespec import (
    Config,
    EngineProcess,
    InstallOptions,
    Recipe,
    Scanner,
    adopt,
    get_engine_spec,
    launch,
    served_models,
)
from enginespec.health.checks import check_health

#: PyPI's ramalama, pure Python (its requirements: argcomplete, jinja2, pyyaml).
RAMALAMA = "0.25.0"


def _ramalama(cache: Path) -> Path:
    """The `ramalama` console script of a venv in the cache holding ramalama==RAMALAMA."""
    venv = cache / f"ramalama-{RAMALAMA}"
    script = venv / "bin" / "ramalama"
    done = venv / "installed"
    if not done.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, timeout=600)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, f"ramalama=={RAMALAMA}"], check=True, timeout=1200)
        done.write_text(RAMALAMA)
    assert script.exists(), script
    return script


def _environment(llama_server: str, tmp_path: Path) -> dict[str, str]:
    """This environment without RAMALAMA_* settings, with an empty config file of its own (no
    ramalama.conf of the host is read: ramalama/config.py load_file_config takes RAMALAMA_CONFIG
    alone when it names a file) and the CI's llama-server first on PATH."""
    conf = tmp_path / "ramalama.conf"
    conf.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAMALAMA")}
    env["RAMALAMA_CONFIG"] = str(conf)
    env["PATH"] = f"{Path(llama_server).parent}{os.pathsep}{env['PATH']}"
    env["TMPDIR"] = str(tmp_path)
    return env


def _runner_of(pid: int) -> EngineProcess:
    """The scan's record of ``pid``'s child once it has exec'd llama-server."""
    deadline = time.monotonic() + 60
    while not (found := [p for p in Scanner().scan() if p.ppid == pid]):
        assert time.monotonic() < deadline, f"no engine process is a child of pid {pid}"
        time.sleep(0.2)
    (runner,) = found
    return runner


def test_ramalama_serves_through_its_llama_server_child(
    config: Config, sdist: Path, cache: Path, models_dir: Path, tmp_path: Path
) -> None:
    llamacpp = get_engine_spec("llamacpp")
    llamacpp.install(InstallOptions(source=str(sdist), timeout=5400), config)
    binary = llamacpp.get_runtime_info(config).binary_path
    assert binary is not None
    ramalama = _ramalama(cache)
    model = gguf_model(models_dir / "ramalama-tiny.gguf")
    port = free_port()
    # no --host: RamaLama's default (0.25.0 ramalama/config.py get_default_host: the loopback)
    argv = [str(ramalama), "--nocontainer", "--store", str(tmp_path / "store"), "serve"]
    argv += [model.as_uri(), "--port", str(port)]
    with open(tmp_path / "ramalama.log", "wb") as log:
        popen = subprocess.Popen(
            argv,
            env=_environment(binary, tmp_path),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    runner_fd = None
    try:
        top = scanned(popen.pid)
        assert (top.engine, top.role, top.supervisor, top.model, top.port) == (
            "ramalama",
            "server",
            None,
            model.as_uri(),
            port,
        )
        assert (top.host, top.effective_host, top.base_url) == (None, "127.0.0.1", f"http://127.0.0.1:{port}")
        runner = _runner_of(popen.pid)
        runner_fd = os.pidfd_open(runner.pid)
        # llama-server --host 127.0.0.1 --port N --model STORE/.../blobs/sha256-... --alias PATH ...
        # (plugins/runtimes/inference/llama_cpp.py): the model RamaLama copied into its store,
        # served under the model's path
        assert (runner.engine, runner.role, runner.supervisor) == ("llamacpp", "runner", "ramalama")
        assert (runner.host, runner.port, runner.served_model_names) == ("127.0.0.1", port, (str(model),))
        assert str(runner.model).startswith(str(tmp_path / "store")), runner.model
        assert Path(str(runner.model)).read_bytes() == model.read_bytes()

        walked = walk(top, popen, timeout=180)
        assert walked.states[-1] == "ready", (walked, (tmp_path / "ramalama.log").read_text()[-3000:])
        assert set(walked.states) <= {"starting", "loading", "ready"}, walked
        # the port is the runner's socket; RamaLama's own tree (its runner a record of its own)
        # listens on nothing; neither is in conflict
        top, runner = scanned(popen.pid), scanned(runner.pid)
        assert (port in runner.listen_ports, top.listen_ports) == (True, ()), (top, runner)
        assert (top.port_conflicts, runner.port_conflicts) == ((), ())
        assert check_health(top, timeout=10).state == "ready"
        listed = served_models(top)
        assert [m.name for m in listed.models] == [str(model)], listed
        assert chat(top.base_url or "", str(model))["choices"]

        # enginespec's stop: SIGTERM to RamaLama's group ends both (llama-server is in it)
        result = adopt(top, config=config).stop(grace=20)
        assert (result.leftover, result.port_holders, result.killed) == ((), (), ()), result
        assert popen.wait(timeout=30) is not None
        # a pidfd reads ready once its process has ended
        assert select.select([runner_fd], [], [], 10)[0] == [runner_fd], "llama-server outlived the stop"
        assert not {popen.pid, runner.pid} & {p.pid for p in Scanner().scan()}
    finally:
        if runner_fd is not None:
            with suppress(ProcessLookupError):
                signal.pidfd_send_signal(runner_fd, signal.SIGKILL)
            os.close(runner_fd)
        if popen.poll() is None:
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait(timeout=60)


def test_enginespec_launches_ramalama_on_the_host_and_stops_it(
    config: Config, sdist: Path, cache: Path, models_dir: Path, tmp_path: Path
) -> None:
    """A recipe with the model's path: enginespec's command names it `file://` (RamaLama would
    fetch `/path/m.gguf` from Hugging Face), RAMALAMA_IN_CONTAINER=false keeps it on the host
    (ramalama/config.py load_env_config), RAMALAMA_STORE its store; launch, wait_ready through
    RamaLama's process tree, stop."""
    llamacpp = get_engine_spec("llamacpp")
    llamacpp.install(InstallOptions(source=str(sdist), timeout=5400), config)
    binary = llamacpp.get_runtime_info(config).binary_path
    assert binary is not None
    ramalama = _ramalama(cache)
    model = gguf_model(models_dir / "ramalama-launched.gguf")
    env = _environment(binary, tmp_path)
    env["PATH"] = f"{ramalama.parent}{os.pathsep}{env['PATH']}"
    variables = {name: env[name] for name in ("PATH", "RAMALAMA_CONFIG", "TMPDIR")}
    variables |= {"RAMALAMA_IN_CONTAINER": "false", "RAMALAMA_STORE": str(tmp_path / "store")}
    recipe = Recipe(
        engine="ramalama",
        model_path=str(model),
        port=free_port(),
        python_path=str(ramalama.parent / "python"),
        env_vars=variables,
    )
    engine = launch(recipe, config, log_dir=tmp_path / "logs")
    try:
        assert engine.argv[:3] == [str(ramalama), "serve", model.as_uri()], engine.argv
        assert engine.wait_ready(timeout=180).state == "ready"
        top = scanned(engine.pid)
        assert (top.engine, top.model, top.port) == ("ramalama", model.as_uri(), recipe.port)
        assert [m.name for m in served_models(top).models] == [str(model)]
        result = engine.stop(grace=20)
        assert (result.leftover, result.port_holders, result.killed) == ((), (), ()), result
    finally:
        engine.close()
