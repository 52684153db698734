"""`enginespec exporter` scraped over HTTP and parsed with prometheus_client's own parser; the
textfile is written atomically."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers.fakeserver import free_port
from helpers.procs import Procs, start_ticks, wait_for
from scanning.test_containers import HIERARCHIES, cgroup, shim_program, under_shim
from scanning.test_ports import _free_port as free_port_on
from scanning.test_ports import _start as start_fake


@pytest.fixture
def exporter(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    port = free_port()
    textfile = tmp_path / "enginespec.prom"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "enginespec.cli",
            "exporter",
            "--port",
            str(port),
            "--interval",
            "200ms",
            "--textfile",
            str(textfile),
            "--no-health",
        ],
        stderr=subprocess.PIPE,
    )
    try:
        yield f"http://127.0.0.1:{port}/metrics", textfile
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0, proc.stderr.read() if proc.stderr else ""


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    series: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            series.setdefault(sample.name, []).append((sample.labels, sample.value))
    return series


def _scrape_until(
    url: str, predicate: object, timeout: float = 30
) -> dict[str, list[tuple[dict[str, str], float]]]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            series = _samples(httpx.get(url, timeout=2).text)
            if predicate(series):  # type: ignore[operator]
                return series
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(url)
        time.sleep(0.1)


def test_series_and_labels_for_engines_started_by_the_test(procs: Procs, exporter: tuple[str, Path]) -> None:
    url, textfile = exporter
    odd = '/models/quote"and\nnewline\\back.gguf'
    vllm = procs.start(
        ["vllm", "serve", "/models/llama", "--served-model-name", "llama-8b", "--port", "18001"]
    )
    llama = procs.start(["llama-server", "-m", odd, "--port", "18002", "--api-key", "sk-exporter-secret"])
    pids = {str(vllm.pid), str(llama.pid)}

    def ours(series: dict[str, list[tuple[dict[str, str], float]]]) -> bool:
        return pids <= {labels["pid"] for labels, _ in series.get("enginespec_engine_info", [])}

    series = _scrape_until(url, ours)
    info = {labels["pid"]: labels for labels, value in series["enginespec_engine_info"] if value == 1}
    first = info[str(vllm.pid)]
    assert (first["engine"], first["model"], first["served_model_name"], first["port"], first["role"]) == (
        "vllm",
        "/models/llama",
        "llama-8b",
        "18001",
        "server",
    )
    assert first["model_path"] == "/models/llama"
    second = info[str(llama.pid)]
    # the model as people name it (a GGUF's file name), the exact argument in model_path
    assert second["model"] == 'quote"and\nnewline\\back.gguf'
    assert second["model_path"] == odd  # escaped on the wire, whole when parsed
    assert second["served_model_name"] == odd  # no alias: vLLM-style model_name is the model
    identities = {(labels["engine_id"], labels["engine"], labels["model"]) for labels in (first, second)}
    for name in (
        "enginespec_engine_up",
        "enginespec_engine_start_time_seconds",
        "enginespec_engine_workers",
        "enginespec_engine_port_conflict",
    ):
        # the same identifying labels on every series of an engine: any two join on them
        shown = {(labels["engine_id"], labels["engine"], labels["model"]) for labels, _ in series[name]}
        assert identities <= shown, name
        assert all("pid" not in labels for labels, _ in series[name])  # pid only on _info
    assert series["enginespec_scan_duration_seconds"][0][1] >= 0
    assert "enginespec_scan_errors_total" in series
    # the textfile holds the same series (written after the refresh that /metrics already
    # serves), and is only ever seen whole
    wait_for(lambda: textfile.exists() and ours(_samples(textfile.read_text())), timeout=30)
    for _ in range(30):
        text = textfile.read_text()
        assert ours(_samples(text))
        time.sleep(0.02)
    # no temporary left over: one may stand beside it while a refresh writes, never for good
    wait_for(lambda: [p.name for p in textfile.parent.iterdir()] == [textfile.name], timeout=30)
    assert "sk-exporter-secret" not in httpx.get(url).text
    # a restart of the same engine, model and port keeps its engine_id
    procs.stop(vllm)
    again = procs.start(
        ["vllm", "serve", "/models/llama", "--served-model-name", "llama-8b", "--port", "18001"]
    )

    def restarted(series: dict[str, list[tuple[dict[str, str], float]]]) -> bool:
        shown = {labels["pid"] for labels, _ in series.get("enginespec_engine_info", [])}
        return str(again.pid) in shown and str(vllm.pid) not in shown

    series = _scrape_until(url, restarted)
    relabelled = {labels["pid"]: labels["engine_id"] for labels, _ in series["enginespec_engine_info"]}
    assert relabelled[str(again.pid)] == first["engine_id"]
    assert str(vllm.pid) not in relabelled


def test_it_binds_loopback_unless_told_otherwise() -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "enginespec.cli", "exporter", "--port", str(port)])
    try:
        deadline = time.monotonic() + 30
        while True:
            bound = [c.laddr.ip for c in psutil.Process(proc.pid).net_connections() if c.status == "LISTEN"]
            if bound or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert bound == ["127.0.0.1"]
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0  # Ctrl-C stops it cleanly
    bad = subprocess.run(
        [sys.executable, "-m", "enginespec.cli", "exporter", "--port", "99999"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2


@pytest.mark.skipif(os.geteuid() != 0 or "" not in HIERARCHIES, reason="needs root and cgroup v2")
def test_container_id_label(procs: Procs, exporter: tuple[str, Path], helper: Path, tmp_path: Path) -> None:
    url, _textfile = exporter
    container_id = secrets.token_hex(32)
    host = procs.start(["vllm", "serve", "/models/host", "--port", "18011"])
    shim = shim_program(helper, tmp_path / "shim")
    with cgroup("", f"system.slice/docker-{container_id}.scope") as directory:
        argv = ["vllm", "serve", "/models/boxed", "--port", "18012"]
        parent, (boxed,) = under_shim(procs, shim, [argv], directory)
        try:
            pids = {str(host.pid), str(boxed)}
            series = _scrape_until(
                url, lambda s: pids <= {labels["pid"] for labels, _ in s.get("enginespec_engine_info", [])}
            )
        finally:
            procs.stop(parent)
    labels = {labels["pid"]: labels["container_id"] for labels, _ in series["enginespec_engine_info"]}
    assert (labels[str(host.pid)], labels[str(boxed)]) == ("", container_id)


@pytest.fixture
def servers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()


def test_port_conflicts_are_a_gauge(
    exporter: tuple[str, Path], servers: list[subprocess.Popen[bytes]]
) -> None:
    url, _textfile = exporter
    port = free_port_on()
    pair = [start_fake(servers, port, alias, FAKE_REUSEPORT="1") for alias in ("one", "two")]
    alone = start_fake(servers, free_port_on(), "alone")
    pids = {str(p.pid) for p in (*pair, alone)}

    def ours(series: dict[str, list[tuple[dict[str, str], float]]]) -> bool:
        return pids <= {labels["pid"] for labels, _ in series.get("enginespec_engine_info", [])}

    series = _scrape_until(url, ours)
    ids = {labels["pid"]: labels["engine_id"] for labels, _ in series["enginespec_engine_info"]}
    conflicts = dict(
        (labels["engine_id"], value) for labels, value in series["enginespec_engine_port_conflict"]
    )
    # the two sharing a port would share one engine_id (same engine, model and port): the second
    # gets its pid appended, so no two series have the same labels
    # the older keeps the bare id: by start time, then pid (pids wrap, so the lower is not older)
    first, second = sorted(pair, key=lambda p: (start_ticks(p.pid) or 0, p.pid))
    assert ids[str(second.pid)] == f"{ids[str(first.pid)]}-pid{second.pid}"
    assert len(conflicts) == len(series["enginespec_engine_port_conflict"])
    assert {conflicts[ids[str(p.pid)]] for p in pair} == {1.0}
    assert conflicts[ids[str(alone.pid)]] == 0.0


def test_argv_that_is_not_utf8_is_escaped_not_fatal(procs: Procs, exporter: tuple[str, Path]) -> None:
    url, textfile = exporter
    model = os.fsdecode(b"/models/caf\xe9-\xff.gguf")  # surrogate escapes, as read from /proc
    odd = procs.start(["llama-server", "-m", model, "--port", str(free_port())])

    def shown(series: dict[str, list[tuple[dict[str, str], float]]]) -> bool:
        return str(odd.pid) in {labels["pid"] for labels, _ in series.get("enginespec_engine_info", [])}

    series = _scrape_until(url, shown)
    (labels,) = [labels for labels, _ in series["enginespec_engine_info"] if labels["pid"] == str(odd.pid)]
    assert labels["model_path"] == "/models/caf\\xe9-\\xff.gguf"
    assert labels["model"] == "caf\\xe9-\\xff.gguf"
    # the textfile writer lives on too (it writes after the refresh /metrics already serves)
    wait_for(lambda: textfile.exists() and shown(_samples(textfile.read_text())), timeout=30)


def test_model_facts_label_the_info_series_and_give_memory_series(
    procs: Procs, exporter: tuple[str, Path], tmp_path: Path
) -> None:
    gguf = pytest.importorskip("gguf")
    from modelfacts.test_modelfacts import write_gguf

    model = write_gguf(tmp_path / "m.gguf", ftype=int(gguf.LlamaFileType.MOSTLY_Q4_K_M))
    llama = procs.start(
        ["llama-server", "-m", str(model), "-c", "512", "-np", "1", "--port", str(free_port())]
    )
    url, _textfile = exporter

    def ours(series: dict[str, list[tuple[dict[str, str], float]]]) -> bool:
        return str(llama.pid) in {labels["pid"] for labels, _ in series.get("enginespec_engine_info", [])}

    series = _scrape_until(url, ours)
    (labels,) = [labels for labels, _ in series["enginespec_engine_info"] if labels["pid"] == str(llama.pid)]
    assert (labels["architecture"], labels["quantization"]) == ("llama", "Q4_K_M")
    weights = {labels["engine_id"]: value for labels, value in series["enginespec_engine_model_weight_bytes"]}
    kv = {
        labels["engine_id"]: value for labels, value in series["enginespec_engine_kv_cache_bytes_estimated"]
    }
    # 4 layers x 512 cells x (256 + 256) bytes (f16 K and V rows of 2 heads x 64)
    assert kv[labels["engine_id"]] == 4 * 512 * 512
    # 4 layers of a 256 x 256 and a 128 x 256 F32 matrix, two 100 x 256 embeddings
    assert weights[labels["engine_id"]] == 4 * (256 * 256 + 128 * 256) * 4 + 2 * 100 * 256 * 4


def test_what_is_withheld_of_one_engine_failing_spoils_only_that_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Working out what a viewer may not see of one engine is that engine's computation: when it
    raises, that engine's series are left out (never shown unfiltered), counted as contained, and
    every other engine's series are there."""
    from prometheus_client import Metric

    import enginespec.fleet.exporter as exporter
    from enginespec.fleet.disclosure import Viewer
    from enginespec.process.record import EngineProcess
    from enginespec.untrusted.boundary import failures as failures_by_stage

    def engine(pid: int, model: str) -> EngineProcess:
        return EngineProcess.model_validate(
            {
                "pid": pid, "start_time": 1.0, "ppid": 1, "engine": "vllm", "model": model,
                "served_model_names": (), "host": "127.0.0.1", "port": 8000 + pid,
                "effective_host": "127.0.0.1", "effective_port": 8000 + pid,
                "base_url": f"http://127.0.0.1:{8000 + pid}", "argv": ("vllm", "serve", model),
                "exe": None, "worker_pids": (), "supervisor": None, "listen_ports": (),
                "sources": {"model": "argv"},
            }
        )  # fmt: skip

    odd, plain = engine(11, "/secret/odd-model"), engine(12, "/models/plain")
    real = exporter._withheld_labels

    def withheld(process: EngineProcess) -> tuple[str, ...]:
        if process.pid == odd.pid:
            raise KeyError("a fact with no label")
        return real(process)

    monkeypatch.setattr(exporter, "_withheld_labels", withheld)
    before = failures_by_stage().get("metrics", 0)
    snapshot = exporter.Snapshot(processes=[odd, plain])
    viewer = Viewer(uid=12345)
    families: list[Metric] = list(exporter.EngineCollector().series(snapshot, viewer, [0, 0]))
    samples = [sample for family in families for sample in family.samples]
    assert not any("odd-model" in str(sample.labels) for sample in samples)
    assert not any(sample.labels.get("engine_id") == odd.instance_id for sample in samples)
    assert any(sample.labels.get("engine_id") == plain.instance_id for sample in samples)
    assert failures_by_stage().get("metrics", 0) == before + 1


HF_SNAPSHOT = "/srv/hf/hub/models--Qwen--Qwen3-0.6B/snapshots/0123456789abcdef0123456789abcdef01234567"


def test_every_engine_series_carries_the_same_identifying_labels(procs: Procs) -> None:
    """`engine_id`, `engine` and `model` (the name people use, the snapshot's repo id) on every
    series of an engine, its load and its stopped `up 0` included; the exact path on `_info`."""
    from enginespec.fleet.exporter import IDENTITY, EngineCollector, _refresh
    from enginespec.health.vitals import EngineMonitor
    from enginespec.scanning.scanner import Scanner
    from helpers.fakeserver import Answer, bound_socket, serving
    from helpers.loadkit import TEXT, vllm_metrics

    sock = bound_socket()
    metrics = [Answer(200, vllm_metrics(float(100 * i)), content_type=TEXT) for i in range(500)]
    with serving({"/health": [Answer(200)], "/metrics": metrics}, sock=sock):
        port = sock.getsockname()[1]
        proc = procs.start(["vllm", "serve", HF_SNAPSHOT, "--port", str(port)], pass_fds=(sock.fileno(),))
        scanner, collector, monitor = Scanner(), EngineCollector(), EngineMonitor(timeout=2)

        def rated() -> bool:
            # a rate needs two load readings of the engine: on a loaded host a round may miss its
            # deadline (or scan before the helper execs), so refresh until the engine has one
            nonlocal series
            _refresh(scanner, collector, True, 2.0, 300.0, monitor)
            series = _samples(_text(collector))
            ids = {
                labels["engine_id"]
                for labels, _ in series.get("enginespec_engine_info", [])
                if labels["pid"] == str(proc.pid)
            }
            return any(
                labels["engine_id"] in ids
                for labels, _ in series.get("enginespec_engine_tokens_per_second", [])
            )

        series: dict[str, list[tuple[dict[str, str], float]]] = {}
        wait_for(rated, timeout=60)
    (info,) = [labels for labels, _ in series["enginespec_engine_info"] if labels["pid"] == str(proc.pid)]
    assert (info["model"], info["model_path"]) == ("Qwen/Qwen3-0.6B", HF_SNAPSHOT)
    mine = {name: info[name] for name in IDENTITY}
    assert mine["engine"] == "vllm"
    families = {
        name for name in series if name.startswith("enginespec_engine_") and name != "enginespec_engine_info"
    }
    # the series this engine has (its model's files are not there: no weight or KV estimate;
    # other engines of a busy host may add those families)
    expected = {
        "enginespec_engine_up",
        "enginespec_engine_ready",
        "enginespec_engine_state",
        "enginespec_engine_start_time_seconds",
        "enginespec_engine_workers",
        "enginespec_engine_port_conflict",
        "enginespec_engine_requests_running",
        "enginespec_engine_tokens_per_second",
    }
    assert expected <= families
    for name in families:
        ours = [labels for labels, _ in series[name] if labels.get("engine_id") == mine["engine_id"]]
        if name in expected:
            assert ours, name
        # every label set of the engine's series begins with the same three values
        assert all({key: labels[key] for key in IDENTITY} == mine for labels in ours), name
    procs.stop(proc)
    wait_for(lambda: not psutil.pid_exists(proc.pid), timeout=20)
    _refresh(scanner, collector, True, 2.0, 300.0, monitor)
    gone = [(labels, value) for labels, value in _samples(_text(collector))["enginespec_engine_up"]]
    assert (mine, 0.0) in gone  # the same series the alert watched, now 0


def _text(collector: object) -> str:
    from prometheus_client import generate_latest
    from prometheus_client.registry import CollectorRegistry

    registry = CollectorRegistry()
    registry.register(collector)  # type: ignore[arg-type]
    return generate_latest(registry).decode()


def test_a_model_a_scraper_may_not_see_is_empty_on_every_series() -> None:
    """A model from its owner's environment is withheld from a scraper of another uid on the
    load, GPU and stopped series too, not only on `_info` (the load series used to carry it)."""
    import enginespec.fleet.exporter as exporter
    from enginespec.fleet.disclosure import Viewer
    from enginespec.gpus.reader import GpuUse
    from enginespec.health.load import EngineLoad
    from enginespec.process.record import EngineProcess

    secret = "/home/alice/private/models--acme--secret-7b/snapshots/abc"
    process = EngineProcess.model_validate(
        {
            "pid": 4242, "start_time": 1.0, "ppid": 1, "engine": "llamacpp", "model": secret,
            "served_model_names": (), "host": None, "port": None, "effective_host": "127.0.0.1",
            "effective_port": 8080, "base_url": "http://127.0.0.1:8080", "argv": ("llama-server",),
            "exe": None, "worker_pids": (), "supervisor": None, "listen_ports": (),
            "sources": {"model": "environment"},
            "gpus": (
                {"device": "GPU-0", "index": 0, "vendor": "nvidia", "name": None, "pci_bus_id": None,
                 "memory_bytes": 1 << 30, "pids": (4242,), "source": "nvml"},
            ),
        }
    )  # fmt: skip
    assert isinstance(process.gpus[0], GpuUse)
    load = EngineLoad(
        engine="llamacpp", source="/metrics", available=True, read_at=1.0, monotonic=1.0,
        requests_running=2, requests_waiting=0,
    )  # fmt: skip
    gone = exporter.StoppedEngine(
        since=time.time(), engine="llamacpp", model="acme/secret-7b", model_private=True
    )
    snapshot = exporter.Snapshot(processes=[process], loads=[load], stopped={"llamacpp-8080-0000": gone})
    for viewer, shown in ((Viewer(uid=12345), ""), (Viewer(uid=0), "acme/secret-7b")):
        text = "".join(
            _exposition(family) for family in exporter.EngineCollector().series(snapshot, viewer, [1000])
        )
        series = _samples(text)
        for name in (
            "enginespec_engine_requests_running",
            "enginespec_engine_gpu_memory_bytes",
            "enginespec_engine_up",
        ):
            assert series[name], name
            assert {labels["model"] for labels, _ in series[name]} == {shown}, (viewer, name)
        if not shown:
            assert "secret" not in text
            assert (
                {"engine_id": process.instance_id, "engine": "llamacpp", "model": "", "field": "model_path"},
                1.0,
            ) in series["enginespec_engine_withheld"]


def _exposition(family: object) -> str:
    from prometheus_client.registry import CollectorRegistry

    class One:
        def collect(self) -> list[object]:
            return [family]

    registry = CollectorRegistry(auto_describe=False)
    registry.register(One())  # type: ignore[arg-type]
    from prometheus_client import generate_latest

    return generate_latest(registry).decode()
