"""RamaLama's containers (issue 41): `ramalama serve` runs `podman|docker run ... --label
ai.ramalama ... -p PORT:PORT IMAGE llama-server ...` (ramalama 0.25.0 engine.py add_labels,
transports/base.py base); the llama-server in that container is RamaLama's runner, with the
container's name, its labels and the host port its runtime publishes, as the runtime's API says
(a fake Podman API on a unix socket, vouching for the container by its first process's pid). Real
cgroups (Podman's shape), a real network namespace, real processes; hostile answers (labels and
ports of the wrong shape, huge, a container whose first process is not this one's). Both backends.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from enginespec import Config, EngineProcess, PublishedPort, Scanner
from enginespec.process.containers import api_labels, api_ports
from helpers.cli import enginespec
from helpers.fakeserver import Answer, FakeEngine
from helpers.procs import Procs, children_of, rewrites, wait_for
from scanning.test_containers import HIERARCHIES, cgroup

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or "" not in HIERARCHIES, reason="cgroups and network namespaces need root"
)

PORT, HOST_PORT = 8080, 18080
NAME = "ramalama-Ab3dE5gH7j"
#: What `ramalama serve tinyllama` runs in its container (llama_cpp_commands.py _cmd_run).
SERVER = [
    "llama-server", "--host", "::", "--port", str(PORT), "--model", "/mnt/models/tinyllama",
    "--no-warmup", "--alias", "tinyllama",
]  # fmt: skip
#: ... and `ramalama serve` with no model: llama.cpp's router over the store.
ROUTER = [
    "llama-server",
    "--host",
    "::",
    "--port",
    str(PORT),
    "--models-dir",
    "/mnt/models",
    "--models-max",
    "4",
]
#: engine.py add_labels and transports/base.py base, for `ramalama serve tinyllama` under podman.
LABELS = {
    "ai.ramalama": "",
    "ai.ramalama.model": "ollama://tinyllama",
    "ai.ramalama.engine": "podman",
    "ai.ramalama.runtime": "llama.cpp",
    "ai.ramalama.port": str(PORT),
    "ai.ramalama.command": "serve",
    "io.containers.other": "not kept",
}
#: Podman's compat API (`NetworkSettings.Ports`) for `-p 18080:8080`: an empty HostIp is every interface.
PORTS = {f"{PORT}/tcp": [{"HostIp": "", "HostPort": str(HOST_PORT)}]}


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"enginespec-rl-{os.getpid()}-{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", name], check=True, timeout=120)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True, timeout=120)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True, timeout=120)


@contextlib.contextmanager
def _podman_api(tmp_path: Path, container_id: str, document: dict[str, Any] | bytes) -> Iterator[Config]:
    body = document if isinstance(document, bytes) else json.dumps(document).encode()
    path = tmp_path / "podman.sock"
    api = FakeEngine({f"/containers/{container_id}/json": [Answer(200, body)] * 8}, unix_path=str(path))
    try:
        yield Config(data_dir=tmp_path, docker_socket=tmp_path / "none.sock", podman_socket=path)
    finally:
        api.close()


def _in_container(
    procs: Procs, helper: Path, netns: str, argv: list[str], tmp_path: Path, **document: Any
) -> tuple[list[EngineProcess], str, list[dict[str, Any]]]:
    """``argv`` started by a container's init (``--init``: catatonit) in a network namespace and
    a cgroup of Podman's shape, the API saying ``document`` of it (``Pid``: that init's, unless
    given); what a scan and ``ps --json`` say of it, and ``ps``'s table."""
    container_id = secrets.token_hex(32)
    with cgroup("", f"machine.slice/libpod-{container_id}.scope/container") as directory:
        ip = ["ip", "netns", "exec", netns, str(helper)]
        init = procs.start(
            ip, executable=Path(shutil.which("ip") or "ip"), cgroup=directory, HELPER_SPAWN=rewrites(argv)
        )
        try:
            wait_for(lambda: children_of(init.pid))
            (server,) = children_of(init.pid)
            wait_for(lambda: Path(f"/proc/{server}/cmdline").read_bytes().startswith(b"llama-server"))
            answer: dict[str, Any] | bytes = document.pop("raw", None) or {
                "Id": container_id,
                "Name": f"/{NAME}",
                "State": {"Pid": document.pop("pid", init.pid)},
                "Config": {"Labels": document.pop("labels", LABELS)},
                "NetworkSettings": {"Ports": document.pop("ports", PORTS)},
            }
            with _podman_api(tmp_path, container_id, answer) as config:
                found = [p for p in Scanner(config=config).scan() if p.pid == server]
                env = {"ENGINESPEC_PODMAN_SOCKET": str(config.podman_socket)}
                table = enginespec("ps", "--no-health", "--wide", env=env).stdout.decode()
                documents = [
                    d
                    for d in json.loads(enginespec("ps", "--no-health", "--json", env=env).stdout)
                    if d["pid"] == server
                ]
        finally:
            procs.stop(init)
    return found, table, documents


@needs_root
def test_its_containers_server_is_its_runner_on_the_published_port(
    procs: Procs, helper: Path, netns: str, tmp_path: Path
) -> None:
    (process,), table, (document,) = _in_container(procs, helper, netns, SERVER, tmp_path)
    assert (process.engine, process.role, process.supervisor) == ("llamacpp", "runner", "ramalama")
    assert process.model == "/mnt/models/tinyllama"  # its argv says it: the label does not replace it
    assert process.sources["model"] == "argv"
    assert process.container is not None
    assert (process.container.runtime, process.container.name) == ("podman", NAME)
    kept = {k: v for k, v in LABELS.items() if k.startswith("ai.ramalama")}
    assert dict(process.container.labels) == kept
    assert process.private_network
    assert process.published == (
        PublishedPort(container_port=PORT, host_address="0.0.0.0", host_port=HOST_PORT),
    )
    assert process.base_url == f"http://127.0.0.1:{HOST_PORT}"
    assert document["supervisor"] == "ramalama"
    assert document["container"]["labels"] == [list(pair) for pair in sorted(kept.items())]
    assert document["base_url"] == f"http://127.0.0.1:{HOST_PORT}"
    row = next(line for line in table.splitlines() if line.startswith(f"{process.pid} "))
    assert NAME in row
    assert "ramalama" in row
    assert f"{HOST_PORT}->{PORT}" in row


@needs_root
def test_a_router_takes_its_model_from_the_label(
    procs: Procs, helper: Path, netns: str, tmp_path: Path
) -> None:
    (process,), _table, (document,) = _in_container(procs, helper, netns, ROUTER, tmp_path)
    assert (process.role, process.supervisor, process.model) == ("runner", "ramalama", "ollama://tinyllama")
    assert process.sources["model"] == "container label"
    assert document["model"] == "ollama://tinyllama"


@needs_root
@pytest.mark.parametrize(
    "hostile",
    [
        {"labels": ["ai.ramalama", "ai.ramalama.model=x"]},
        {"labels": {"ai.ramalama": 1, "ai.ramalama.model": ["x"]}},
        {"labels": {"ai.ramalama\n": "", "ai.ramalama.model": "x"}},
        {"labels": "ai.ramalama"},
        # the whole answer beyond what is read of an API (1 MiB)
        {"raw": b'{"Id": "x", "Config": {"Labels": {"ai.ramalama": "' + b"a" * (1 << 21) + b'"}}}'},
        {"raw": b"\xff not json"},
        # another container's first process: not this one or a parent of it
        {"pid": 1},
        {"pid": True},
    ],
    ids=["list", "wrong-types", "bad-key", "string", "huge", "not-json", "another-pid", "bool-pid"],
)
def test_labels_not_given_as_labels_make_no_runner(
    hostile: dict[str, Any], procs: Procs, helper: Path, netns: str, tmp_path: Path
) -> None:
    vouched = "raw" not in hostile and "pid" not in hostile
    (process,), _table, _documents = _in_container(procs, helper, netns, ROUTER, tmp_path, **hostile)
    assert (process.role, process.supervisor, process.model) == ("server", None, None)
    # No mark kept (a label of another shape is left out, the others stay as given).
    assert process.container is None or process.container.label_value("ai.ramalama") is None
    # The ports of a container its API vouches for are its ports, whatever its labels.
    published = (PublishedPort(container_port=PORT, host_address="0.0.0.0", host_port=HOST_PORT),)
    assert process.published == (published if vouched else ())


@needs_root
def test_hostile_label_values_are_kept_literally_or_left_out(
    procs: Procs, helper: Path, netns: str, tmp_path: Path
) -> None:
    red = "\x1b[31mred\x1b[0m\n[bold]x[/bold]"
    labels = {"ai.ramalama": "", "ai.ramalama.model": red, "ai.ramalama.port": "9" * 2000}
    ports = {
        f"{PORT}/tcp": [
            {"HostIp": "evil.example", "HostPort": "1"},
            {"HostIp": "::", "HostPort": "99999"},
            "x",
        ],
        f"{PORT}/udp": [{"HostIp": "", "HostPort": "53"}],
        "nonsense": None,
    }
    (process,), table, (document,) = _in_container(
        procs, helper, netns, ROUTER, tmp_path, labels=labels, ports=ports
    )
    assert (process.role, process.supervisor, process.model) == ("runner", "ramalama", red)
    assert process.container is not None
    assert dict(process.container.labels) == {"ai.ramalama": "", "ai.ramalama.model": red}  # huge: left out
    assert process.published == ()
    assert document["model"] == red  # JSON: as given
    assert "\x1b" not in table  # the table: made visible, never a terminal's escape


def test_label_and_port_readers_take_anything() -> None:
    assert api_labels({"ai.ramalama": "", "ai.ramalamax": "y", "x": "z"}, ("ai.ramalama",)) == (
        ("ai.ramalama", ""),
    )
    assert (
        api_labels({f"ai.ramalama.{n}": "v" for n in range(100)}, ("ai.ramalama",))[-1][0] < "ai.ramalama.9"
    )
    assert len(api_labels({f"ai.ramalama.{n}": "v" for n in range(100)}, ("ai.ramalama",))) == 32
    assert api_labels({"ai.ramalama": ""}, ()) == ()
    for junk in (None, [], "x", 1, {1: 2}, {"ai.ramalama": None}):
        assert api_labels(junk, ("ai.ramalama",)) == ()
    assert api_ports({"8080/tcp": [{"HostIp": "127.0.0.1", "HostPort": "18080"}]}) == (
        PublishedPort(container_port=8080, host_address="127.0.0.1", host_port=18080),
    )
    for junk in (
        None, [], {"8080/tcp": None}, {"8080/tcp": [{"HostIp": "", "HostPort": 18080}]},
        {"0/tcp": [{"HostIp": "", "HostPort": "1"}]}, {"8080/tcp": [{"HostIp": "", "HostPort": "٣"}]},
        {"8080/tcp": [{"HostIp": "1.2.3.4/8", "HostPort": "1"}]}, {"8080": [{"HostIp": "", "HostPort": "1"}]},
    ):  # fmt: skip
        assert api_ports(junk) == ()
