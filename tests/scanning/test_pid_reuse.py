"""Pid reuse forced for real, in a private pid namespace with its own /proc (root only): the
scanner never reports a dead process's identity for the process that got its pid."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent(
    """
    import json, subprocess, sys, time
    from pathlib import Path
    from enginespec import Scanner

    helper = sys.argv[1]

    def start(argv):
        proc = subprocess.Popen(argv, executable=helper)
        while Path(f"/proc/{proc.pid}/cmdline").read_bytes() == b"":
            time.sleep(0.01)
        return proc

    def reuse(old, argv):
        old.kill()
        old.wait()
        Path("/proc/sys/kernel/ns_last_pid").write_text(str(old.pid - 1))
        new = start(argv)
        assert new.pid == old.pid, (old.pid, new.pid)
        return new

    def engines(scanner):
        return {p.pid: [p.model, p.start_time] for p in scanner.scan()}

    scanner = Scanner(listen_ports=False)
    out = {}
    a = start(["worker", "--queue", "x"])
    out["before"] = engines(scanner)
    b = reuse(a, ["vllm", "serve", "/m/b", "--port", "9001"])
    out["non_engine_to_engine"] = [b.pid, engines(scanner)]
    out["stats_after_reuse"] = scanner.stats.model_dump()
    c = start(["llama-server", "-m", "/m/c"])
    out["engine_seen"] = [c.pid, engines(scanner)]
    d = reuse(c, ["worker", "--queue", "y"])
    out["engine_to_non_engine"] = [d.pid, engines(scanner)]
    e = start(["llama-server", "-m", "/m/e1"])
    first = engines(scanner)
    f = reuse(e, ["llama-server", "-m", "/m/e2"])
    out["engine_to_engine"] = [f.pid, first, engines(scanner)]
    out["idle"] = [engines(scanner), scanner.stats.model_dump()]
    print(json.dumps(out))
    """
)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare")
def test_pid_reuse_in_a_private_pid_namespace(helper: Path, tmp_path: Path) -> None:
    script = tmp_path / "reuse.py"
    script.write_text(SCRIPT)
    out = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(script), str(helper)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["before"] == {}

    pid, found = result["non_engine_to_engine"]
    assert found[str(pid)][0] == "/m/b"
    # The reuse was bounded by the kernel's pid cursor, not found by re-reading everything.
    assert result["stats_after_reuse"]["full_recheck"] is False

    pid, found = result["engine_seen"]
    assert found[str(pid)][0] == "/m/c"
    pid, found = result["engine_to_non_engine"]
    assert str(pid) not in found

    pid, first, second = result["engine_to_engine"]
    assert first[str(pid)][0] == "/m/e1"
    assert second[str(pid)][0] == "/m/e2"

    found, stats = result["idle"]
    b_pid = result["non_engine_to_engine"][0]
    assert found == {str(b_pid): result["non_engine_to_engine"][1][str(b_pid)], str(pid): second[str(pid)]}
    assert stats["new"] == 0
