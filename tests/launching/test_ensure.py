"""`ensure(recipe)` (issue 40): a running engine started with the recipe's settings is adopted,
else the recipe is launched (its fit checked first) and waited for; with `idle_stop`, an engine
with no progress is put to sleep where it can, else stopped when `ensure` launched it, and that
is said. The fake llama-server of the lifecycle tests (a real process, exact argv); both backends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from enginespec import FitRefused, get_engine_spec, scan
from enginespec.lifecycle.ensuring import ensure, serving_alike
from enginespec.models.fit import read_ledger
from helpers.fakeserver import Answer, bound_socket, free_port, serving
from helpers.lifecycle_fakes import fake_recipe, install_fake, kill_quietly, pid_alive
from helpers.loadkit import TEXT, vllm_metrics
from helpers.procs import Procs, wait_for


def test_ensure_launches_once_then_adopts_what_runs(tmp_path: Path) -> None:
    recipe = fake_recipe(install_fake(tmp_path), free_port(), "serve")
    first = ensure(recipe, timeout=60, check_fit=False)
    try:
        assert (first.launched, first.engine.adopted) == (True, False)
        again = ensure(recipe, timeout=60, check_fit=False)
        assert (again.launched, again.engine.adopted, again.engine.pid) == (False, True, first.engine.pid)
        # other settings are another engine: launched beside it (on its own port)
        other = fake_recipe(Path(recipe.binary_path or ""), free_port(), "serve")
        second = ensure(other, timeout=60, check_fit=False)
        try:
            assert second.launched
            assert second.engine.pid != first.engine.pid
        finally:
            second.engine.close()
    finally:
        first.engine.close()


def test_the_same_settings_however_they_are_written_are_alike(procs: Procs) -> None:
    """A server is the recipe's whichever launch form, flag spelling (`--x=v`, an alias, argparse's
    underscores) or order it was started with; another value, or one more flag, is another."""
    port = free_port()
    module = ["python3", "-u", "-m", "vllm.entrypoints.openai.api_server"]
    same = procs.start(
        [
            *module,
            "--model",
            "/m/q",
            "--port",
            str(port),
            "-tp",
            "2",
            "--max_model_len",
            "4096",
            "--enforce-eager",
        ]
    )
    other_value = procs.start(["vllm", "serve", "/m/q", "--port", str(port + 1), "--max-model-len", "8192"])
    more = procs.start(
        ["vllm", "serve", "/m/q", "--port", str(port + 2), "--max-model-len", "4096", "-q", "fp8"]
    )
    wanted = ["vllm", "serve", "/m/q", "--enforce-eager", "--max-model-len=4096", "--port", str(port)]
    wanted += ["--tensor-parallel-size", "2"]
    wait_for(lambda: {p.pid for p in scan()} >= {same.pid, other_value.pid, more.pid})
    running = scan()
    found = serving_alike(wanted, running)
    assert found is not None
    assert found.pid == same.pid
    for pid, argv in (
        (other_value.pid, ["vllm", "serve", "/m/q", "--port", str(port + 1), "--max-model-len", "4096"]),
        (more.pid, ["vllm", "serve", "/m/q", "--port", str(port + 2), "--max-model-len", "4096"]),
    ):
        alike = serving_alike(argv, running)
        assert alike is None or alike.pid != pid


def test_an_idle_engine_ensure_launched_is_stopped_and_said(tmp_path: Path) -> None:
    recipe = fake_recipe(install_fake(tmp_path), free_port(), "serve")
    ensured = ensure(recipe, timeout=60, check_fit=False, idle_stop=1.0)
    try:
        wait_for(lambda: ensured.idle is not None, timeout=60)
        # a llama-server started with a model cannot sleep: it is stopped, as it is ensure's own
        assert ensured.idle == "stopped"
        assert ensured.idle_reason.startswith("no progress for 1s; not put to sleep (")
        assert "llamacpp has no API for it" in ensured.idle_reason
        wait_for(lambda: not pid_alive(ensured.engine.pid), timeout=30)
    finally:
        ensured.close()
        ensured.engine.close()


def test_an_idle_engine_ensure_adopted_is_left_running(tmp_path: Path) -> None:
    recipe = fake_recipe(install_fake(tmp_path), free_port(), "serve")
    argv = get_engine_spec("llamacpp").build_command(recipe)
    popen = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "FAKE_MODE": "serve", "FAKE_LIFETIME": "60"},
        start_new_session=True,
    )
    try:
        ensured = ensure(recipe, timeout=60, check_fit=False, idle_stop=1.0)
        try:
            assert (ensured.launched, ensured.engine.pid) == (False, popen.pid)
            wait_for(lambda: "not ours to stop" in ensured.idle_reason, timeout=60)
            assert ensured.idle is None
            time.sleep(0.5)
            assert popen.poll() is None  # still serving
        finally:
            ensured.close()
    finally:
        if popen.poll() is None:
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait()


def test_a_recipe_the_gpus_cannot_hold_is_not_launched(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    from modelfacts.test_fit import big_gguf

    assert gguf
    model = big_gguf(tmp_path / "m.gguf")
    binary = install_fake(tmp_path)
    recipe = fake_recipe(binary, free_port(), "serve").model_copy(update={"model_path": str(model)})
    ledger = tmp_path / "ledger.json"
    ledger.write_text(
        json.dumps([{"device": "GPU0", "index": 0, "memory_total_bytes": 1 << 30, "memory_used_bytes": 0}])
    )
    before = {p.name for p in Path("/proc").iterdir() if p.name.isdigit()}
    with pytest.raises(FitRefused) as refused:
        ensure(recipe, timeout=30, ledger=read_ledger(str(ledger)))
    assert "GPU0" in str(refused.value)
    assert refused.value.result.fits is False  # type: ignore[attr-defined]
    started = {p.name for p in Path("/proc").iterdir() if p.name.isdigit()} - before
    for pid in started:  # nothing of the recipe was started
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes() if Path(f"/proc/{pid}").exists() else b""
        if str(binary).encode() in cmdline:
            kill_quietly(int(pid))
            raise AssertionError("the recipe was launched")


@pytest.mark.parametrize("pending", [0, 2])
def test_an_idle_engine_that_can_sleep_is_put_to_sleep(procs: Procs, pending: int) -> None:
    """An adopted vLLM in sleep mode (VLLM_SERVER_DEV_MODE=1, --enable-sleep-mode) whose load
    counters stand still: put to sleep through its own API, not stopped; not while requests are
    in flight (stalled is not idle)."""
    from enginespec import Recipe
    from enginespec.config import Config
    from enginespec.definition.registry import find_engine
    from enginespec.lifecycle.starting import plan_for

    sock = bound_socket()
    port = sock.getsockname()[1]
    recipe = Recipe(
        engine="vllm",
        model_path="/models/q",
        host="127.0.0.1",
        port=port,
        binary_path="/usr/bin/vllm",
        extra_args={"enable-sleep-mode": True},
        env_vars={"VLLM_SERVER_DEV_MODE": "1"},
    )
    plan, _key = plan_for(find_engine("vllm"), recipe, Config())
    assert "--enable-sleep-mode" in plan.argv
    routes = {
        "/health": [Answer(200)],
        # counters that never move, nothing in flight
        "/metrics": [Answer(200, vllm_metrics(5.0, running=pending, waiting=0), content_type=TEXT)],
        "/v1/models": [Answer(200, b'{"object":"list","data":[{"id":"/models/q","object":"model"}]}')],
        "/sleep?level=1": [Answer(200, b"")],
        "/is_sleeping": [Answer(200, b'{"is_sleeping":true}')],
    }
    with serving(routes, sock=sock) as server:
        proc = procs.start(list(plan.argv), pass_fds=(sock.fileno(),), VLLM_SERVER_DEV_MODE="1")
        wait_for(lambda: any(p.pid == proc.pid for p in scan(listen_ports=False)), timeout=20)
        ensured = ensure(recipe, timeout=30, check_fit=False, idle_stop=1.0)
        try:
            assert (ensured.launched, ensured.engine.pid) == (False, proc.pid)
            if pending:
                time.sleep(5)  # several idle_stops: requests in flight keep it awake
                assert (ensured.idle, [m for m, _p, _b in server.script.bodies if m == "POST"]) == (None, [])
                return
            wait_for(lambda: ensured.idle is not None, timeout=60)
            assert (ensured.idle, ensured.idle_reason) == ("slept", "no progress for 1s")
            assert ("POST", "/sleep?level=1") in [(m, p) for m, p, _ in server.script.bodies]
            assert proc.poll() is None
        finally:
            ensured.close()
