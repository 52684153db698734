"""Pid-reuse trials, run as pid 1 of a private pid namespace (``unshare -p -f --mount-proc``):
each trial adopts an engine found by a scan, lets it exit, has its pid handed to a new, foreign
process (``/proc/sys/kernel/ns_last_pid``, the namespace's own pid cursor), then calls ``stop``
and ``restart``. Prints one JSON line: trials, pids reused, signals sent (beyond the one
that stops the restarted engine), foreign processes hit, restarts.

    unshare -p -f --mount-proc python pid_reuse_trial.py IDLE_HELPER TRIALS
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import enginespec


def scanned(scanner: enginespec.Scanner, pid: int) -> enginespec.EngineProcess:
    for _attempt in range(400):
        found = [p for p in scanner.scan() if p.pid == pid]
        if found:
            return found[0]
        time.sleep(0.005)
    raise SystemExit(f"the scan does not report pid {pid}")


def main() -> None:
    helper, trials = sys.argv[1], int(sys.argv[2])
    assert os.getpid() == 1, "run me as pid 1 of a new pid namespace"
    scanner = enginespec.Scanner(listen_ports=False)
    reused = signals_sent = foreign_hit = restarted = 0
    for trial in range(trials):
        argv = ["llama-server", "-m", f"/models/m{trial}.gguf", "--port", str(20000 + trial % 1000)]
        engine_process = subprocess.Popen(argv, executable=helper, stdin=subprocess.DEVNULL)
        adopted = enginespec.adopt(scanned(scanner, engine_process.pid))
        engine_process.kill()
        engine_process.wait()
        with open("/proc/sys/kernel/ns_last_pid", "w") as cursor:
            cursor.write(str(engine_process.pid - 1))
        foreign = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL)
        try:
            reused += foreign.pid == engine_process.pid
            result = adopted.stop(grace=0.2)
            signals_sent += len(result.signals)
            # restart runs the command read while the engine ran (not the foreign process's)
            adopted.restart(grace=0.2)
            restarted += adopted.pid != foreign.pid and adopted.argv == argv
            signals_sent += len(adopted.stop(grace=0.2).signals) - 1
            time.sleep(0.001)
            foreign_hit += foreign.poll() is not None
        finally:
            foreign.kill()
            foreign.wait()
            adopted.close()
    print(
        json.dumps(
            {
                "trials": trials,
                "reused": reused,
                "signals_sent": signals_sent,
                "foreign_hit": foreign_hit,
                "restarted": restarted,
            }
        )
    )


main()
