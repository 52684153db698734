"""Lifecycle reads follow the root a record was scanned under: what adopt, logs and probing read
of an engine scanned on a fixture host (its output file, its command, environment, working
directory and owner, its interpreter and the dist-info its loaded modules come from) is the
fixture's, not this host's; and adopt, which would hold and signal the process, refuses a record
that is not this host's. Its pid is beyond any kernel's (``PID_MAX_LIMIT``, 2**22), so a read of
this host's ``/proc`` finds no such process. On the backend the suite runs on."""

from __future__ import annotations

from pathlib import Path

import pytest

from enginespec import Config, EngineProcess, Scanner
from enginespec._host.root import HOST_ROOT, host_root
from enginespec.definition.registry import find_engine
from enginespec.errors import InvalidInputError, RestartRefused
from enginespec.lifecycle.logsources import LogSource, find_log_source, source_lines
from enginespec.lifecycle.probing import running_info
from enginespec.lifecycle.running import adopt
from enginespec.lifecycle.starting import read_plan
from helpers.fixturehost import FixtureHost, Stat

#: no kernel hands out this pid (PID_MAX_LIMIT is 2**22)
PID = 2**22 + 100
ARGV = ["/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "org/m", "--port", "8000"]
SITE = "/usr/lib/python3/site-packages"


def _scanned(tmp_path: Path) -> tuple[FixtureHost, EngineProcess]:
    """A vLLM server of the fixture host whose output goes to a file, as scanned there."""
    host = FixtureHost(tmp_path / "host")
    (host.proc / "sys" / "kernel" / "pid_max").write_text(f"{2**23}\n")
    host.create(1, ["/sbin/init"], Stat(ppid=0))
    host.spawn(PID, ARGV)
    host.set_environ(PID, {"HOME": "/home/x", "VLLM_LOGGING_LEVEL": "INFO"})
    # its output: a file it holds open for writing
    log = tmp_path / "vllm.log"
    log.write_text("".join(f"line {n}\n" for n in range(1, 6)))
    for fd in (1, 2):
        host.link(PID, f"fd/{fd}", log)
        (host.proc / str(PID) / "fdinfo").mkdir(exist_ok=True)
        (host.proc / str(PID) / "fdinfo" / str(fd)).write_text("pos:\t0\nflags:\t0100001\nmnt_id:\t1\n")
    host.link(PID, "cwd", tmp_path)
    host.link(PID, "exe", ARGV[0])
    # its filesystem: the interpreter's site-packages, with vLLM's dist-info, which its maps name
    filesystem = tmp_path / "fs"
    (filesystem / SITE.lstrip("/") / "vllm-0.9.1.dist-info").mkdir(parents=True)
    (filesystem / SITE.lstrip("/") / "vllm-0.9.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: vllm\nVersion: 0.9.1\n\nvLLM\n"
    )
    host.link(PID, "root", filesystem)
    (host.proc / str(PID) / "maps").write_text(
        f"7f0000000000-7f0000001000 r-xp 00000000 08:01 42 {SITE}/vllm/_C.so\n"
    )
    config = Config(
        data_dir=tmp_path, docker_socket=tmp_path / "none.sock", podman_socket=tmp_path / "none.sock"
    )
    found = {p.pid: p for p in Scanner(root=host.root, config=config, gpus=False).scan()}
    assert sorted(found) == [PID]
    return host, found[PID]


def test_logs_and_a_restart_plan_are_read_from_the_root_the_record_was_scanned_under(tmp_path: Path) -> None:
    host, engine = _scanned(tmp_path)
    root = engine._root
    assert root == host_root(host.root)
    assert not root.is_host

    source = find_log_source(PID, root)
    assert source == LogSource(kind="file", path=f"{host.proc}/{PID}/fd/1")
    assert [line.text for line in source_lines(PID, source, 3, root)] == ["line 3", "line 4", "line 5"]

    plan = read_plan(PID, root)
    assert plan.argv == tuple(ARGV)
    assert (plan.executable, plan.cwd) == ("/usr/bin/python3", str(tmp_path))
    assert plan.env == {"HOME": "/home/x", "VLLM_LOGGING_LEVEL": "INFO"}
    assert (plan.user, plan.group, plan.groups) == (None, None, None)  # its owner is this test's user

    # This host's /proc has no such process: what its root would have read instead.
    assert find_log_source(PID, HOST_ROOT).kind == "none"
    with pytest.raises(RestartRefused, match=f"cannot read /proc/{PID}/cmdline"):
        read_plan(PID, HOST_ROOT)


def test_probing_reads_the_interpreter_and_its_dist_info_through_the_record_root(tmp_path: Path) -> None:
    _host, engine = _scanned(tmp_path)
    info = running_info(find_engine("vllm"), engine)
    assert (info.python_path, info.version, info.location) == ("/usr/bin/python3", "0.9.1", "running")

    elsewhere = EngineProcess.model_validate_json(engine.model_dump_json())  # this host's root
    assert elsewhere._root is HOST_ROOT
    here = running_info(find_engine("vllm"), elsewhere)
    assert (here.python_path, here.version) == (None, None)


def test_adopt_refuses_a_record_of_another_root(tmp_path: Path) -> None:
    """Adopting holds the process through a pidfd and signals it at stop: a fixture host's pid is
    not this kernel's, so the record is refused before anything of this host is looked up."""
    _host, engine = _scanned(tmp_path)
    with pytest.raises(InvalidInputError, match=r"scanned under .*not this host's /"):
        adopt(engine, log_dir=tmp_path / "logs", config=Config(data_dir=tmp_path))
