"""Stop and restart of an adopted engine never signal a process that took its pid: trials in a
private pid namespace where the pid is handed out again on purpose (tests/helpers/pid_reuse_trial.py).
ENGINESPEC_PID_REUSE_TRIALS sets the count (200 here; 1,000 in the opt-in run)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TRIALS = int(os.environ.get("ENGINESPEC_PID_REUSE_TRIALS", "200"))
SCRIPT = Path(__file__).parents[1] / "helpers" / "pid_reuse_trial.py"


def _can_unshare() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    done = subprocess.run(["unshare", "-p", "-f", "--mount-proc", "true"], capture_output=True, timeout=30)
    return done.returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="needs root and unshare(1) for a private pid namespace")
def test_pid_reuse_trials_signal_no_foreign_process(helper: Path) -> None:
    done = subprocess.run(
        ["unshare", "-p", "-f", "--mount-proc", sys.executable, str(SCRIPT), str(helper), str(TRIALS)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"\npid reuse: {result}")
    assert result["trials"] == TRIALS
    # every trial really handed the pid to the foreign process
    assert result["reused"] == TRIALS
    assert result["signals_sent"] == 0
    assert result["foreign_hit"] == 0
    # restart ran the adopted engine's own command (read while it ran), not the foreign one's
    assert result["restarted"] == TRIALS
