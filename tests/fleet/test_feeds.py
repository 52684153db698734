"""`enginespec export`: the serving engines as the files Prometheus (file_sd) and LLM routers read.
Fake engines are real processes holding the listening socket a scripted server answers on (so
the ownership check sees their own socket); the CLI runs as users run it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

import enginespec.cli.fleet as cli
import enginespec.fleet.feeds as feeds
from enginespec import EngineProcess
from helpers.cli import enginespec_in_background
from helpers.fakeserver import Answer, bound_socket, free_port, models, serving
from helpers.procs import Procs, stop_child
from helpers.prometheus import needs_prometheus, query, running_prometheus, until

METRICS = Answer(
    200,
    b'# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} 3\n',
    content_type="text/plain",
)
SECRET = "sk-feed-secret-1234"


def _export(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "enginespec.cli", "feed", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def _socket_on_a_new_port(taken: set[int]) -> socket.socket:
    """A bound socket whose port is not in ``taken`` (then added to it): the kernel hands a closed
    port out again, and a test that remembers ports must not take a new engine for an old one."""
    rejected = []
    try:
        while (sock := bound_socket()).getsockname()[1] in taken:
            rejected.append(sock)  # held open so the next bind gets another port
    finally:
        for old in rejected:
            old.close()
    taken.add(sock.getsockname()[1])
    return sock


@contextmanager
def fake_engine(
    procs: Procs,
    argv: Sequence[str],
    routes: dict[str, list[Answer]],
    taken: set[int] | None = None,
    **started: Any,
) -> Iterator[int]:
    """A process with ``argv`` (its ``{port}`` filled in) holding the socket ``routes`` answer on:
    its port, one not in ``taken`` when given; ``started``: more of ``Procs.start``'s arguments
    (``user="nobody"`` with the ``executable`` nobody can run)."""
    sock = bound_socket() if taken is None else _socket_on_a_new_port(taken)
    port = sock.getsockname()[1]
    try:
        with serving(routes, sock=sock):
            proc = procs.start([a.format(port=port) for a in argv], (sock.fileno(),), **started)
            try:
                yield port
            finally:
                procs.stop(proc)
    finally:
        sock.close()


def _groups_at(document: list[dict[str, object]], ports: set[int]) -> dict[int, dict[str, object]]:
    """The target groups of our engines (the host may run others), by port."""
    found = {}
    for group in document:
        (target,) = group["targets"]  # type: ignore[misc]
        port = int(str(target).rsplit(":", 1)[1])
        if port in ports:
            found[port] = group
    return found


def test_file_sd_lists_ready_verified_engines_at_their_own_metrics(procs: Procs, tmp_path: Path) -> None:
    ready = {"/health": [Answer(200)], "/v1/models": [models("/models/a")], "/metrics": [METRICS]}
    out = tmp_path / "engines.json"
    with ExitStack() as stack:
        own_port = stack.enter_context(
            fake_engine(
                procs,
                [
                    "vllm",
                    "serve",
                    "/models/a",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "{port}",
                    "--api-key",
                    SECRET,
                ],
                ready,
            )
        )
        wildcard = stack.enter_context(
            fake_engine(procs, ["vllm", "serve", "/models/a", "--host", "0.0.0.0", "--port", "{port}"], ready)
        )
        impostor = stack.enter_context(  # answers, but serves another model than its argv names
            fake_engine(
                procs,
                ["vllm", "serve", "/models/a", "--port", "{port}"],
                {"/health": [Answer(200)], "/v1/models": [models("other")], "/metrics": [METRICS]},
            )
        )
        sick = stack.enter_context(
            fake_engine(procs, ["vllm", "serve", "/models/a", "--port", "{port}"], {"/health": [Answer(503)]})
        )
        llama = {"/health": [Answer(200, b'{"status":"ok"}')], "/v1/models": [models("m.gguf")]}
        no_metrics = stack.enter_context(
            fake_engine(procs, ["llama-server", "-m", "/models/m.gguf", "--port", "{port}"], llama)
        )
        with_metrics = stack.enter_context(
            fake_engine(
                procs, ["llama-server", "-m", "/models/m.gguf", "--port", "{port}", "--metrics"], llama
            )
        )
        done = _export("--format", "file-sd", "--out", str(out), "--advertise", "gpu-host-7")
        assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert SECRET not in text
    assert SECRET not in done.stderr
    ports = {own_port, wildcard, impostor, sick, no_metrics, with_metrics}
    groups = _groups_at(json.loads(text), ports)
    assert set(groups) == {own_port, wildcard, with_metrics}
    assert groups[own_port]["targets"] == [f"127.0.0.1:{own_port}"]
    assert groups[wildcard]["targets"] == [f"gpu-host-7:{wildcard}"]
    # vLLM listens on every address unless --host says otherwise (as llama-server does not)
    assert groups[with_metrics]["targets"] == [f"127.0.0.1:{with_metrics}"]
    labels = groups[own_port]["labels"]
    assert isinstance(labels, dict)
    assert labels["engine"] == "vllm"
    assert labels["model"] == labels["served_model_name"] == "/models/a"
    assert labels["engine_id"].startswith(f"vllm-{own_port}-")
    assert "__metrics_path__" not in labels  # /metrics is Prometheus's default
    assert labels["model_path"] == "/models/a"
    gguf = groups[with_metrics]["labels"]
    assert isinstance(gguf, dict)
    assert gguf["engine"] == "llamacpp"
    # the model as people (and the exporter's `model` label) name it; the exact argument apart
    assert (gguf["model"], gguf["model_path"]) == ("m.gguf", "/models/m.gguf")


def test_errors_name_the_flag_and_the_value(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "engines.json"
    done = _export("--format", "file-sd", "--out", str(missing))
    assert done.returncode == 1
    assert f"--out {missing}: cannot write in {missing.parent}" in done.stderr
    done = _export("--format", "file-sd", "--out", str(tmp_path / "x.json"), "--advertise", "0.0.0.0")
    assert done.returncode == 1
    assert "advertise: '0.0.0.0' is not an IP address or hostname others can reach" in done.stderr
    assert not (tmp_path / "x.json").exists()
    done = _export("--format", "csv", "--out", "-")
    assert done.returncode == 2
    assert "invalid choice: 'csv'" in done.stderr


def test_the_cli_offers_every_feed_format() -> None:
    assert cli._feed_formats() == feeds.FEED_FORMATS


@pytest.mark.parametrize("host", ["::", "0.0.0.0", ""])
def test_an_unusable_advertised_host_is_refused(host: str) -> None:
    with pytest.raises(feeds.InvalidInputError, match="advertise"):
        feeds.advertised_host(host)


def _kernels_source_address() -> str | None:
    """The source address iproute2 says the kernel picks beyond this host's networks (``ip route
    get``), independent of enginespec's own way of asking; ``None`` without such a route."""
    done = subprocess.run(
        ["ip", "-4", "route", "get", "198.51.100.1"], capture_output=True, text=True, timeout=10, check=False
    )
    words = done.stdout.split()
    return words[words.index("src") + 1] if done.returncode == 0 and "src" in words else None


@pytest.mark.skipif(not shutil.which("ip"), reason="needs ip (iproute2)")
def test_the_default_advertised_address_is_the_default_routes() -> None:
    expected = _kernels_source_address()
    if expected is None:
        assert feeds.advertised() == (socket.gethostname(), "this host's name: it has no default route")
    else:
        assert feeds.advertised() == (expected, "the address of this host's default route")
    assert feeds.advertised("gpu7") == ("gpu7", "given by --advertise")


@pytest.mark.skipif(not shutil.which("unshare") or not shutil.which("ip"), reason="needs unshare and ip")
@pytest.mark.parametrize("routed", [True, False])
def test_in_a_network_namespace_of_its_own_the_default_route_decides(routed: bool) -> None:
    """In a network namespace of its own (unshare -rn: a user namespace too, so no privilege is
    needed): with a veth pair and a default route through it, that address; with only loopback,
    the host's name, and why."""
    setup = "ip link set lo up"
    if routed:
        setup += (
            " && ip link add v0 type veth peer name v1 && ip addr add 10.9.8.7/24 dev v0"
            " && ip link set v0 up && ip link set v1 up && ip route add default via 10.9.8.1 dev v0"
        )
    ask = "import enginespec.fleet.feeds as f, json; print(json.dumps(f.advertised()))"
    done = subprocess.run(
        ["unshare", "-rn", "sh", "-c", f'{setup} && exec "$0" -c "$1"', sys.executable, ask],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0 and "Operation not permitted" in done.stderr:
        pytest.skip(f"no user and network namespaces here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    if routed:
        assert json.loads(done.stdout) == ["10.9.8.7", "the address of this host's default route"]
    else:
        assert json.loads(done.stdout) == [socket.gethostname(), "this host's name: it has no default route"]


def _watching(out: Path, feed: str = "file-sd") -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "enginespec.cli", "feed", "--format", feed, "--out", str(out)),
            *("--watch", "--interval", "100ms", "--health-interval", "100ms", "--timeout", "1"),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _ports_in(out: Path) -> set[int]:
    return {int(str(t).rsplit(":", 1)[1]) for group in json.loads(out.read_bytes()) for t in group["targets"]}


def _wait_for(what: str, predicate: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_watch_keeps_the_file_whole_and_lists_only_ready_engines(procs: Procs, tmp_path: Path) -> None:
    """Three engines that serve, and churn at 10 starts a second (one in three never ready),
    while a reader parses the file 10,000 times: no read is torn or invalid, no engine that never
    was ready is ever listed, and every engine is listed while it serves and gone once stopped."""
    out = tmp_path / "engines.json"
    ready = {"/health": [Answer(200)], "/v1/models": [models("/models/a")], "/metrics": [METRICS]}
    sick = {"/health": [Answer(503)], "/v1/models": [models("/models/a")], "/metrics": [METRICS]}
    argv = ["vllm", "serve", "/models/a", "--host", "127.0.0.1", "--port", "{port}"]
    watcher = _watching(out)
    reads = {"parsed": 0, "invalid": 0}
    seen: set[int] = set()
    finished = threading.Event()

    def read() -> None:
        while reads["parsed"] < 10_000 or not finished.is_set():
            try:
                seen.update(_ports_in(out))
                reads["parsed"] += 1
            except FileNotFoundError:
                pass
            except (ValueError, KeyError, IndexError):
                reads["invalid"] += 1
            time.sleep(0.0002)

    reader = threading.Thread(target=read, daemon=True)
    never_ready: set[int] = set()
    taken: set[int] = set()  # every engine on its own port: `seen` remembers ports, not engines
    try:
        _wait_for("the watch writes its file", out.exists)
        reader.start()
        with ExitStack() as stack:
            steady = [stack.enter_context(fake_engine(procs, argv, ready, taken)) for _ in range(3)]
            _wait_for("the three serving engines are listed", lambda: set(steady) <= _ports_in(out))
            for cycle in range(30):  # 10 starts a second, each engine living 0.5 s
                with ExitStack() as churn:
                    port = churn.enter_context(
                        fake_engine(procs, argv, sick if cycle % 3 == 0 else ready, taken)
                    )
                    if cycle % 3 == 0:
                        never_ready.add(port)
                    time.sleep(0.1)
            stack.close()
            _wait_for("stopped engines are removed", lambda: not set(steady) & _ports_in(out))
        finished.set()
        reader.join(timeout=120)
        assert not reader.is_alive()
    finally:
        finished.set()
        stop_child(watcher)
    assert reads["parsed"] >= 10_000
    assert reads["invalid"] == 0
    assert not never_ready & seen
    assert set(steady) <= seen


FILE_SD_CONFIG = """\
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: engines
    file_sd_configs:
      - files: [engines.json]
        refresh_interval: 1s
  - job_name: enginespec
    static_configs:
      - targets: ['127.0.0.1:{exporter}']
"""


@needs_prometheus
def test_a_real_prometheus_scrapes_the_engines_the_feed_lists(procs: Procs, tmp_path: Path) -> None:
    """Prometheus reads the file_sd feed that `export --watch` keeps, and the exporter: its API shows
    the fake engine's own series, labelled with the feed's labels, and enginespec's."""
    out = tmp_path / "engines.json"
    ready = {"/health": [Answer(200)], "/v1/models": [models("/models/a")], "/metrics": [METRICS]}
    argv = ["vllm", "serve", "/models/a", "--host", "127.0.0.1", "--port", "{port}"]
    exporter_port = free_port()
    exporter = enginespec_in_background("exporter", "--port", str(exporter_port), "--interval", "500ms")
    watcher = _watching(out)
    try:
        with (
            fake_engine(procs, argv, ready) as port,
            running_prometheus(tmp_path, FILE_SD_CONFIG.format(exporter=exporter_port)) as api,
        ):
            _wait_for("the engine is listed", lambda: out.exists() and port in _ports_in(out))
            (group,) = _groups_at(json.loads(out.read_bytes()), {port}).values()
            engine_id = group["labels"]["engine_id"]  # type: ignore[index]
            own = f'vllm:num_requests_running{{job="engines",engine_id="{engine_id}",model="/models/a"}}'
            until("prometheus scrapes the engine's own metrics", lambda: query(api, own))
            (sample,) = query(api, own)
            assert sample["value"][1] == "3"  # type: ignore[index]
            assert sample["metric"]["instance"] == f"127.0.0.1:{port}"  # type: ignore[index]
            ours = f'enginespec_engine_up{{job="enginespec",engine_id="{engine_id}"}} == 1'
            until("prometheus scrapes the exporter's series of the engine", lambda: query(api, ours))
            # the join docs/prometheus.md documents: the feed's labels and the exporter's identify
            # an engine the same way, so its own series and enginespec's match one to one
            joined = (
                'vllm:num_requests_running{job="engines"} * on(engine_id, engine, model) group_left() '
                'enginespec_engine_up{job="enginespec"}'
            )
            until("the two jobs' series join", lambda: query(api, joined))
            matched = [s for s in query(api, joined) if s["metric"]["engine_id"] == engine_id]  # type: ignore[index]
            assert [s["value"][1] for s in matched] == ["3"]  # type: ignore[index]
    finally:
        stop_child(watcher)
        stop_child(exporter)


def endpoints_of(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """llm-d's endpoints a feed wrote: port -> address."""
    return {e["port"]: e["address"] for e in json.loads(done.stdout)["endpoints"]}


def test_router_feeds_list_each_name_clients_send(procs: Procs) -> None:
    """llm-d's endpoints file (IPv4 literal, port as a string, model as a label) and
    production-stack's index-aligned lists (a backend once per served name); what a format
    cannot carry (a hostname for llm-d, a single-label one for the router) is left out, said."""
    ready = {"/health": [Answer(200)], "/v1/models": [models("a", "b")], "/metrics": [METRICS]}
    argv = ["vllm", "serve", "/models/x", "--served-model-name", "a", "b", "--port", "{port}"]
    with (
        fake_engine(procs, [*argv, "--host", "127.0.0.1"], ready) as local,
        fake_engine(procs, [*argv, "--host", "0.0.0.0"], ready) as wildcard,
    ):
        by_ip = {
            f: _export("--format", f, "--out", "-", "--advertise", "10.1.2.3")
            for f in ("llm-d", "production-stack")
        }
        by_name = {
            f: _export("--format", f, "--out", "-", "--advertise", "gpu7")
            for f in ("llm-d", "production-stack")
        }
        by_default = _export("--format", "llm-d", "--out", "-")
    for done in [*by_ip.values(), *by_name.values(), by_default]:
        assert done.returncode == 0, done.stderr
    endpoints = {e["port"]: e for e in json.loads(by_ip["llm-d"].stdout)["endpoints"]}
    assert endpoints[str(local)]["address"] == "127.0.0.1"
    assert endpoints[str(wildcard)]["address"] == "10.1.2.3"
    entry = endpoints[str(local)]
    assert set(entry) == {"name", "namespace", "address", "port", "labels"}
    assert entry["namespace"] == "default"
    assert entry["name"].startswith(f"vllm-{local}-")
    assert entry["labels"]["served_model_name"] == "a"
    assert str(wildcard) not in {e["port"] for e in json.loads(by_name["llm-d"].stdout)["endpoints"]}
    assert (
        f"llm-d takes only IPv4 addresses, not gpu7:{wildcard} (it listens on every address: "
        "--advertise an IPv4 address lists it)" in by_name["llm-d"].stderr
    )
    config = json.loads(by_ip["production-stack"].stdout)
    assert config["service_discovery"] == "static"
    pairs = list(zip(config["static_backends"].split(","), config["static_models"].split(","), strict=True))
    for port, host in ((local, "127.0.0.1"), (wildcard, "10.1.2.3")):
        assert [m for u, m in pairs if u == f"http://{host}:{port}"] == ["a", "b"]
    # without --advertise: the address of the default route, said once on stderr (llm-d takes
    # only an IPv4 address: a host name listed nothing)
    routed = _kernels_source_address()
    if routed is not None:
        assert endpoints_of(by_default) == {str(local): "127.0.0.1", str(wildcard): routed}
        said = f"given as {routed} (the address of this host's default route; --advertise sets it)"
        assert by_default.stderr.count(said) == 1, by_default.stderr
    else:
        assert endpoints_of(by_default) == {str(local): "127.0.0.1"}
        assert "(this host's name: it has no default route; --advertise sets it)" in by_default.stderr
    named = json.loads(by_name["production-stack"].stdout)["static_backends"]
    assert f"http://gpu7:{wildcard}" not in named
    assert (
        f"the router refuses the URL http://gpu7:{wildcard} (it listens on every address: --advertise an IPv4"
        " address or a dotted host name lists it)"
    ) in by_name["production-stack"].stderr


def test_the_llm_d_file_stays_under_its_size_cap() -> None:
    engines = [made_engine(port) for port in range(20000, 26000)]
    document, notes = feeds.llm_d(engines, "10.0.0.1")
    assert len(feeds._encode(document)) <= feeds.LLM_D_MAX_BYTES
    assert len(feeds._encode(document)) > feeds.LLM_D_MAX_BYTES - 1000  # as many as fit (an entry: ~400 B)
    assert len(document["endpoints"]) + len(notes) == 6000
    assert notes
    assert all("llm-d reads at most 1048576 bytes" in note for note in notes)


def made_engine(port: int) -> EngineProcess:
    """An engine as a scan of another host reports it (no process of this host behind it)."""
    return EngineProcess(
        pid=port,
        start_time=0.0,
        ppid=1,
        engine="vllm",
        model="/models/" + "m" * 100,
        served_model_names=("m",),
        host="127.0.0.1",
        port=port,
        effective_host="127.0.0.1",
        effective_port=port,
        role="server",
        base_url=f"http://127.0.0.1:{port}",
        argv=("vllm", "serve"),
        exe=None,
        worker_pids=(),
        supervisor=None,
        listen_ports=(port,),
    )


@pytest.mark.parametrize(
    ("engine", "argv", "path"),
    [
        ("vllm", ("vllm", "serve", "m"), "/metrics"),
        ("sglang", ("python", "-m", "sglang.launch_server", "--model-path", "m"), None),
        (
            "sglang",
            ("python", "-m", "sglang.launch_server", "--model-path", "m", "--enable-metrics"),
            "/metrics",
        ),
        ("llamacpp", ("llama-server", "-m", "m.gguf"), None),
        ("llamacpp", ("llama-server", "-m", "m.gguf", "--metrics"), "/metrics"),
        ("tgi", ("text-generation-launcher", "--model-id", "m"), "/metrics"),
        ("lmdeploy", ("lmdeploy", "serve", "api_server", "m"), "/metrics"),
        ("lmdeploy", ("lmdeploy", "serve", "api_server", "m", "--disable-metrics"), None),
        ("ollama", ("ollama", "serve"), None),
    ],
)
def test_each_engines_own_metrics_endpoint_follows_its_argv(
    engine: str, argv: tuple[str, ...], path: str | None
) -> None:
    process = made_engine(8000).model_copy(update={"engine": engine, "argv": argv})
    assert feeds.metrics_path(process) == path


def test_a_host_name_an_engine_names_is_never_advertised(procs: Procs, tmp_path: Path) -> None:
    """The answering socket is checked to be the engine's own, not that a name leads to it: an
    engine whose argv says `--host attacker.example` is left out, said, in every format."""
    ready = {"/health": [Answer(200)], "/v1/models": [models("/models/a")], "/metrics": [METRICS]}
    argv = ["vllm", "serve", "/models/a", "--host", "attacker.example", "--port", "{port}"]
    with fake_engine(procs, argv, ready) as port:
        outputs = {
            f: _export("--format", f, "--out", "-", "--advertise", "10.1.2.3") for f in feeds.FEED_FORMATS
        }
    for feed, done in outputs.items():
        assert done.returncode == 0, done.stderr
        assert "attacker.example" not in done.stdout, feed
        assert str(port) not in done.stdout, feed
        assert "no address other hosts can use" in done.stderr, feed


def _listed_ports(feed: str, text: str) -> set[int]:
    """The ports a feed's file lists."""
    document = json.loads(text)
    if feed == "file-sd":
        return {int(target.rsplit(":", 1)[1]) for group in document for target in group["targets"]}
    if feed == "llm-d":
        return {int(entry["port"]) for entry in document["endpoints"]}
    return {int(url.rsplit(":", 1)[1]) for url in document["static_backends"].split(",") if url}


@pytest.mark.skipif(os.geteuid() != 0, reason="starts an engine as nobody: needs root")
def test_an_engine_of_another_user_claiming_a_served_name_is_left_out(
    procs: Procs, nobody_idle: Path
) -> None:
    """An impostor of `nobody` serves the production model's name, ready and verified (the socket
    is its own, it serves the name its argv gives): no feed lists it unless --allow-owner says
    so, and both engines claiming the name are said on stderr."""
    ready = {"/health": [Answer(200)], "/v1/models": [models("prod")], "/metrics": [METRICS]}
    argv = [
        "vllm",
        "serve",
        "/models/x",
        "--served-model-name",
        "prod",
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
    ]
    with (
        fake_engine(procs, argv, ready) as own,
        fake_engine(procs, argv, ready, user="nobody", executable=nobody_idle) as impostor,
    ):
        done = {feed: _export("--format", feed, "--out", "-") for feed in feeds.FEED_FORMATS}
        allowed = _export("--format", "production-stack", "--out", "-", "--allow-owner", "nobody")
        impostor_pid = next(p.pid for p in procs.started if p.args[-1] == str(impostor).encode())  # type: ignore[index]
    for feed, out in done.items():
        assert out.returncode == 0, out.stderr
        listed = _listed_ports(feed, out.stdout)
        assert own in listed, feed
        assert impostor not in listed, feed
        said = out.stderr
        assert f"(pid {impostor_pid}): its owner nobody is not an allowed owner (--allow-owner nobody" in said
        claimed = next(line for line in said.splitlines() if "served name 'prod' is claimed by" in line)
        assert f"vllm-{own}-" in claimed
        assert f"vllm-{impostor}-" in claimed
        assert f"(pid {impostor_pid}, nobody, left out)" in claimed
    assert allowed.returncode == 0, allowed.stderr
    assert {own, impostor} <= _listed_ports("production-stack", allowed.stdout)
    assert "served name 'prod' is claimed by engines of different owners" in allowed.stderr


def test_an_unknown_allowed_owner_is_refused() -> None:
    done = _export("--format", "file-sd", "--out", "-", "--allow-owner", "no-such-user-xyz")
    assert done.returncode == 1
    assert "--allow-owner: 'no-such-user-xyz' is not a user of this host" in done.stderr
