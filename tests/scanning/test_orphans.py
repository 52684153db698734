"""Orphaned workers: a vLLM/SGLang worker (retitled `VLLM::EngineCore`) whose server was killed
lives on holding its GPU memory; scans report it as `role="orphan"`, on the active backend."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import enginespec
from enginespec import Scanner, parse_argv
from enginespec.health.checks import NotReady, check_health, wait_ready
from helpers.procs import Procs, children_of, wait_for


def _titled(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]


@pytest.mark.parametrize(
    ("argv", "engine"),
    [
        (["VLLM::EngineCore"], "vllm"),
        (["VLLM::Worker_TP1", "", ""], "vllm"),
        (["sglang::scheduler_TP0"], "sglang"),
        (["sgl_diffusion::scheduler"], "sglang"),
    ],
)
def test_a_worker_title_names_its_engine_and_nothing_else(argv: list[str], engine: str) -> None:
    inv = parse_argv(argv)
    assert inv is not None
    assert (inv.engine, inv.role, inv.model, inv.served_model_names) == (engine, "worker", None, ())
    # A worker listens on no API port: not even the engine's default is claimed.
    assert (inv.port, inv.effective_port, inv.problems) == (None, None, ())


@pytest.mark.parametrize(
    "argv",
    [
        ["VLLM::"],
        ["/opt/VLLM::EngineCore"],
        ["vllm::EngineCore"],
        ["python3", "VLLM::EngineCore"],
        ["sglang:x"],
    ],
)
def test_look_alike_titles_are_not_workers(argv: list[str]) -> None:
    assert parse_argv(argv) is None


def test_workers_of_a_killed_server_are_reported_as_orphans(procs: Procs) -> None:
    server = procs.start(
        ["vllm", "serve", "/models/orphaned", "--served-model-name", "orph", "--port", "8321"],
        HELPER_CHILD_TITLES="VLLM::EngineCore,VLLM::Worker_TP0",
        HELPER_OUTLIVE="1",
    )
    wait_for(lambda: len(children_of(server.pid)) == 2)
    children = children_of(server.pid)
    wait_for(lambda: any(children_of(c) for c in children))
    (engine_core,) = (c for c in children if _titled(c) == b"VLLM::EngineCore")
    (worker,) = children - {engine_core}
    (grandchild,) = children_of(engine_core)
    scanner = Scanner()

    def folded() -> bool:
        mine = {p.pid: p for p in scanner.scan() if p.pid in children | {server.pid, grandchild}}
        return list(mine) == [server.pid] and set(mine[server.pid].worker_pids) == children | {grandchild}

    wait_for(folded)

    os.kill(server.pid, signal.SIGKILL)
    server.wait()

    def orphans() -> dict[int, enginespec.EngineProcess]:
        return {p.pid: p for p in scanner.scan() if p.pid in children | {grandchild}}

    found: dict[int, enginespec.EngineProcess] = {}

    def settled() -> bool:
        found.clear()
        found.update(orphans())
        return set(found) == {engine_core, worker} and found[engine_core].worker_pids == (grandchild,)

    wait_for(settled)
    core = found[engine_core]
    assert (core.engine, core.role, core.worker_pids) == ("vllm", "orphan", (grandchild,))
    assert found[worker].worker_pids == ()
    for orphan in found.values():
        # What the server served, as this scanner saw it before the kill.
        assert (orphan.model, orphan.served_model_names, orphan.server_pid) == (
            "/models/orphaned",
            ("orph",),
            server.pid,
        )
        assert orphan.sources["model"] == "server"
        assert (orphan.base_url, orphan.effective_port, orphan.argv[0]) == (
            None,
            None,
            _titled(orphan.pid).decode(),
        )
        health = check_health(orphan)
        assert (health.state, health.base_url) == ("not_serving", None)
        # why first (a table cuts a reason's end), in plain English
        assert health.reason.startswith("an orphaned worker (its server is gone)")
        with pytest.raises(NotReady, match="never ready"):
            wait_ready(orphan, timeout=30)

    # A scanner that never saw the server knows the orphans, not what they served.
    cold = {p.pid: p for p in Scanner().scan() if p.pid in found}
    assert set(cold) == set(found)
    assert {(p.role, p.model, p.server_pid) for p in cold.values()} == {("orphan", None, None)}
    assert cold[engine_core].worker_pids == (grandchild,)


def test_ps_lists_orphans(procs: Procs) -> None:
    server = procs.start(
        ["vllm", "serve", "/models/ps-orphan"], HELPER_CHILD_TITLES="VLLM::EngineCore", HELPER_OUTLIVE="1"
    )
    wait_for(lambda: len(children_of(server.pid)) == 1)
    (core,) = children_of(server.pid)
    wait_for(lambda: _titled(core) == b"VLLM::EngineCore")
    os.kill(server.pid, signal.SIGKILL)
    server.wait()
    script = Path(sys.executable).with_name("enginespec")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "enginespec.cli"]
    out = subprocess.run([*command, "ps", "--json"], capture_output=True, text=True, check=True, timeout=120)
    rows = {row["pid"]: row for row in json.loads(out.stdout)}
    assert rows[core]["role"] == "orphan"
    assert rows[core]["engine"] == "vllm"
    assert rows[core]["base_url"] is None
    table = subprocess.run(
        [*command, "ps", "--wide"], capture_output=True, text=True, check=True, timeout=120
    )
    (line,) = (line for line in table.stdout.splitlines() if str(core) in line.split())
    assert "orphan" in line
