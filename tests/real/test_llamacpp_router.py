"""llama.cpp's router mode for real (issue 40): the llama-server CI builds from the llama.cpp that
llama-cpp-python's sdist vendors (its tools/server/server-models.cpp: `--models-dir`, `GET
/models` with each model's status, `POST /models/load|unload`, `--sleep-idle-seconds`), serving
two tiny GGUFs: load one, load the other, unload, idle-sleep, each seen through `served_models`,
`enginespec models`, `watch` and the exporter, with runner pids and ports those of the router's
real children."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from lifecycle import HOST, free_port, scanned
from models import gguf_model
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

import enginespec.cli.app as cli
from enginespec import (
    Config,
    InstallOptions,
    ServedModels,
    get_engine_spec,
    load_model,
    served_models,
    unload_model,
)
from enginespec.fleet.exporter import EngineCollector, _refresh
from enginespec.health.checks import wait_ready
from enginespec.health.vitals import EngineMonitor
from enginespec.scanning.scanner import Scanner
from enginespec.scanning.watch import ModelChanged, WatchEvent


def _states(reading: ServedModels) -> dict[str, str]:
    return {model.name: model.state for model in reading.models}


def _children(pid: int) -> dict[int, list[str]]:
    """The router's children now, with their argv."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode().split("\0")[:-1]
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found[int(entry)] = argv
    return found


def _model_states(collector: EngineCollector, engine_id: str) -> dict[str, str]:
    registry = CollectorRegistry()
    registry.register(collector)
    found = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if (
                sample.name == "enginespec_model_state"
                and sample.labels["engine_id"] == engine_id
                and sample.value
            ):
                found[sample.labels["model"]] = sample.labels["state"]
    return found


def test_the_router_loads_unloads_and_sleeps_models_seen_everywhere(
    config: Config, sdist: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = get_engine_spec("llamacpp")
    spec.install(InstallOptions(source=str(sdist), timeout=5400), config)
    binary = spec.get_runtime_info(config).binary_path
    assert binary is not None
    folder = tmp_path / "router-models"
    folder.mkdir()
    gguf_model(folder / "alpha.gguf")
    gguf_model(folder / "beta.gguf")
    port = free_port()
    argv = [binary, "--models-dir", str(folder), "--host", HOST, "--port", str(port)]
    argv += ["--models-max", "2", "--ctx-size", "256", "--sleep-idle-seconds", "3"]
    events: list[WatchEvent] = []
    with open(tmp_path / "router.log", "wb") as log:
        popen = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    watch = None
    try:
        router = scanned(popen.pid)
        assert (router.role, router.model) == ("server", None)
        wait_ready(router, timeout=120)
        watch = Scanner().watch(0.5, health=True, health_interval=0.5, models=True, load=False)
        reader = threading.Thread(target=lambda: events.extend(watch or ()), daemon=True)
        reader.start()
        assert _states(served_models(router)) == {"alpha": "unloaded", "beta": "unloaded"}

        alpha = load_model(router, "alpha", timeout=300)
        assert _states(alpha)["alpha"] == "loaded"
        both = load_model(router, "beta", timeout=300)
        assert _states(both) == {"alpha": "loaded", "beta": "loaded"}
        # the runners are the router's real children, on the ports it gave them
        children = _children(popen.pid)
        runners = {m.name: m for m in served_models(router, processes=Scanner().scan()).models}
        # without a scan, the same children are found
        assert {m.name: m.runner_pid for m in served_models(router).models} == {
            n: m.runner_pid for n, m in runners.items()
        }
        for name in ("alpha", "beta"):
            model = runners[name]
            assert model.runner_pid in children, (model, children)
            child = children[model.runner_pid]  # type: ignore[index]
            assert child[child.index("--port") + 1] == str(model.port)
            assert child[child.index("--alias") + 1] == name
        # the exporter and `enginespec models`
        collector = EngineCollector()
        _refresh(Scanner(), collector, True, 5.0, 300.0, EngineMonitor(timeout=5, load=False, models=True))
        assert _model_states(collector, router.instance_id) == {"alpha": "loaded", "beta": "loaded"}
        assert cli.main(["models", str(router.pid), "-o", "json"]) == 0
        (document,) = json.loads(capsys.readouterr().out)
        assert {m["name"]: m["runner_pid"] for m in document["models"]} == {
            n: runners[n].runner_pid for n in runners
        }

        gone = unload_model(router, "alpha", timeout=120)
        assert _states(gone)["alpha"] == "unloaded"
        # idle, beta's server sleeps (--sleep-idle-seconds), and the router says so
        deadline = time.monotonic() + 60
        while _states(served_models(router)).get("beta") != "sleeping":
            assert time.monotonic() < deadline, served_models(router)
            time.sleep(0.5)
        deadline = time.monotonic() + 30
        wanted = {
            ("model_loaded", "alpha"),
            ("model_loaded", "beta"),
            ("model_unloaded", "alpha"),
            ("model_sleeping", "beta"),
        }
        while not wanted <= {
            (e.type, e.model.name)
            for e in list(events)
            if isinstance(e, ModelChanged) and e.process.pid == router.pid
        }:
            assert time.monotonic() < deadline, [e for e in events if isinstance(e, ModelChanged)]
            time.sleep(0.2)
    finally:
        if watch is not None:
            watch.close()
        if popen.poll() is None:
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait()
