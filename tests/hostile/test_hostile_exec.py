"""A probe of a running engine never runs what its argv names: the interpreter is the kernel's
/proc/PID/exe, and versions are read from files."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from enginespec import Scanner, get_engine_spec
from enginespec.lifecycle.probing import python_of_process
from helpers.procs import wait_for


def test_runtime_info_of_a_strangers_engine_runs_nothing(nobody_dir: Path, nobody_idle: Path) -> None:
    marker = nobody_dir / "ran-as-root"
    evil = nobody_dir / "evil" / "python3"
    evil.parent.mkdir()
    evil.write_text(f"#!/bin/sh\ntouch {marker}\n")
    evil.chmod(0o755)
    argv = [str(evil), "-m", "vllm.entrypoints.openai.api_server", "--model", "/m/evil"]
    stranger = subprocess.Popen(
        argv, executable=nobody_idle, user="nobody", group="nogroup", start_new_session=True
    )
    try:
        wait_for(lambda: Path(f"/proc/{stranger.pid}/cmdline").read_bytes() != b"")
        process = next(p for p in Scanner().scan() if p.pid == stranger.pid)
        info = get_engine_spec("vllm").get_runtime_info(running=process)
        time.sleep(0.2)
        assert not marker.exists()
        assert (info.location, info.python_path, info.version) == ("running", None, None)
        assert info.binary_path == str(nobody_idle)  # the kernel's exe, not argv[0]
    finally:
        stranger.kill()
        stranger.wait()


def test_the_interpreter_is_the_kernels_exe_not_argv0(nobody_dir: Path) -> None:
    liar = subprocess.Popen(
        [str(nobody_dir / "python3"), "-c", "import time; time.sleep(30)"], executable=sys.executable
    )
    try:
        wait_for(lambda: b"time.sleep" in Path(f"/proc/{liar.pid}/cmdline").read_bytes())
        assert python_of_process(liar.pid) == Path(os.path.realpath(sys.executable))
    finally:
        liar.kill()
        liar.wait()
