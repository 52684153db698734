"""The whole scan on a fixture host: ``enginespec.Scanner(root=ROOT)`` reads every fact of a
process under ROOT (its environment, a config file through its own root and working directory,
its container, network namespace and port conflicts, a checkout, the GPUs its fds hold), on the
backend the suite runs on. What a fixture cannot express is said where it matters: the user
namespace a network namespace belongs to (an ioctl) makes no fixture's proxies trusted."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from enginespec import Config, Container, EngineProcess, InvalidInputError, Scanner
from helpers.fixturehost import FixtureHost, Stat

HOST_NETNS = "net:[4026531840]"
CONTAINER_NETNS = "net:[4026532999]"


def _config(tmp_path: Path) -> Config:
    """No runtime API answers: a container is claimed by its shim alone."""
    return Config(
        data_dir=tmp_path, docker_socket=tmp_path / "none.sock", podman_socket=tmp_path / "none.sock"
    )


@pytest.fixture
def host(tmp_path: Path) -> FixtureHost:
    host = FixtureHost(tmp_path / "host")
    host.create(1, ["/sbin/init"], Stat(ppid=0))
    host.link(1, "ns/net", HOST_NETNS)
    return host


def _scan(host: FixtureHost, tmp_path: Path) -> dict[int, EngineProcess]:
    return {p.pid: p for p in Scanner(root=host.root, config=_config(tmp_path)).scan()}


def test_an_engine_in_a_container_read_whole_from_the_fixture(host: FixtureHost, tmp_path: Path) -> None:
    container_id = secrets.token_hex(32)
    # the container's own filesystem, which the engine's root and working directory lead into
    filesystem = host.root / "containers" / container_id / "rootfs"
    (filesystem / "srv" / "app").mkdir(parents=True)
    (filesystem / "srv" / "app" / "serve.yaml").write_text(
        "model: /models/from-config\nport: 8123\nserved-model-name: from-config\n"
    )
    shim = ["containerd-shim-runc-v2", "-namespace", "moby", "-id", container_id]
    host.create(50, shim, Stat(ppid=1))
    host.set_status(50, ppid=1, uid=0)
    host.link(50, "exe", "/usr/bin/containerd-shim-runc-v2")
    host.create(100, ["vllm", "serve", "--config", "serve.yaml"], Stat(ppid=50))
    host.set_status(100, ppid=50, nspid=(1,))
    host.set_environ(100, {"PATH": "/usr/bin", "VLLM_API_KEY": "fixture-secret"})
    host.link(100, "root", filesystem)
    host.link(100, "cwd", filesystem / "srv" / "app")
    host.link(100, "ns/net", CONTAINER_NETNS)
    host.set_cgroup(100, f"0::/system.slice/docker-{container_id}.scope\n")
    # its socket on 8123, and another process's on the same address and port (SO_REUSEPORT)
    host.add_socket(100, 3, 7001)
    host.set_tcp(100, "tcp", [(7001, 8123, "0A"), (7002, 8123, "0A")])
    host.create(200, ["sidecar"], Stat(ppid=1))
    host.add_socket(200, 4, 7002)
    found = _scan(host, tmp_path)
    assert sorted(found) == [100]
    engine = found[100]
    assert (engine.model, engine.served_model_names, engine.port) == (
        "/models/from-config",
        ("from-config",),
        8123,
    )
    assert (engine.sources["model"], engine.sources["port"]) == ("config", "config")
    assert engine.container == Container(runtime="docker", id=container_id, name=None, pid_in_container=1)
    assert engine.private_network
    assert engine.listen_ports == (8123,)
    assert engine.port_conflicts == (200,)
    assert engine.secret_api_key() == "fixture-secret"
    # nothing of this host's own /proc: the same pid here is another process, or none
    assert all(p.model != "/models/from-config" for p in Scanner(config=_config(tmp_path)).scan())


def test_a_checkout_is_looked_for_inside_the_process_root(host: FixtureHost, tmp_path: Path) -> None:
    """TabbyAPI's `python3 main.py` is TabbyAPI only inside its checkout, as the process sees
    its working directory."""
    checkout = host.root / "fs" / "opt" / "tabbyAPI"
    for name in ("common/args.py", "common/tabby_config.py", "endpoints/core/router.py"):
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        (checkout / name).write_text("")
    (host.root / "fs" / "tmp").mkdir()
    for pid, cwd in ((300, checkout), (301, host.root / "fs" / "tmp")):
        host.create(pid, ["python3", "main.py"], Stat(ppid=1))
        host.link(pid, "root", host.root / "fs")
        host.link(pid, "cwd", cwd)
    found = _scan(host, tmp_path)
    assert [(p.pid, p.engine) for p in found.values()] == [(300, "tabbyapi")]


def test_a_root_that_is_no_directory_is_refused(tmp_path: Path) -> None:
    for root in (tmp_path / "absent", "relative/root"):
        with pytest.raises(InvalidInputError, match=r"root: .* is not an absolute path of a directory"):
            Scanner(root=root)
