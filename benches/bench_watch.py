"""Watch benchmark: the kernel's process events (netlink proc connector) against polling.

Run as root (in the initial namespaces, or the connector is refused and both columns poll) from
the repository root with the package installed:

    python benches/bench_watch.py [--size 10000] [--seconds 20] [--runs 30] [--interval 0.1]

It starts ``--size`` idle processes with realistic argv (``benches/_mix.py``; a few engines among
them), then measures, in the same run, for a ``Scanner().watch(interval)`` driven by process
events and one forced to poll (``poll=True``):

- latency from an engine's exec to its ``started`` event (``--runs`` engine-like processes, started
  one at a time at a random phase of the polling interval);
- CPU of an idle watch (no engine starts or stops) as % of one core, in a process of its own, on
  the quiet host and with ~100 forks/s going on (a shell loop running ``true`` and ``sleep``).

It prints each figure for both and their ratio (polling / events).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import enginespec
from _mix import Host, build_helper, reap, spawn
from enginespec import Started, Stopped

MODES = ("events", "poll")


def _latencies(helper: Path, mode: str, runs: int, interval: float) -> tuple[list[float], str]:
    """Seconds from just before each engine's fork + exec to its ``started`` event."""
    watch = enginespec.Scanner().watch(interval, poll=mode == "poll")
    events: queue.Queue[enginespec.WatchEvent] = queue.Queue()
    threading.Thread(target=lambda: [events.put(e) for e in watch], daemon=True).start()
    found = []
    try:
        for run in range(runs):
            time.sleep(random.uniform(0, interval))  # a random phase of the polling interval
            port = 20000 + run
            begin = time.monotonic()
            pid = spawn(helper, ["vllm", "serve", f"/models/bench-{run}", "--port", str(port)])
            while True:
                event = events.get(timeout=30)
                if isinstance(event, Started) and event.process.pid == pid:
                    found.append(event.monotonic - begin)
                    break
            reap(pid)  # kills it
            while True:
                event = events.get(timeout=30)
                if isinstance(event, Stopped) and event.identity.pid == pid:
                    break
    finally:
        watch.close()
    return found, watch.mode


def _cpu_worker(mode: str, seconds: float, interval: float) -> None:
    """Watches for ``seconds``; prints the CPU it used (all threads) and the wall time."""
    watch = enginespec.Scanner().watch(interval, poll=mode == "poll")
    threading.Thread(target=lambda: [None for _ in watch], daemon=True).start()
    time.sleep(1.0)  # the first scan (a cold listing) is not what is measured
    cpu, wall = time.process_time(), time.monotonic()
    time.sleep(seconds)
    result = {"cpu": time.process_time() - cpu, "wall": time.monotonic() - wall, "mode": watch.mode}
    result["wakes"] = dict(watch.wakes)
    print(json.dumps(result), flush=True)
    os._exit(0)  # the watch's threads are daemons: no need to wait for their next wake


def _cpu(mode: str, seconds: float, interval: float) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--cpu-worker", mode, str(seconds), str(interval)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return 1e3 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=10000, help="idle processes started")
    parser.add_argument("--seconds", type=float, default=20.0, help="per CPU measurement")
    parser.add_argument("--runs", type=int, default=30, help="engines started for the latency")
    parser.add_argument("--interval", type=float, default=0.1, help="watch interval (polling period)")
    parser.add_argument("--cpu-worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cpu_worker:
        mode, seconds, interval = args.cpu_worker
        _cpu_worker(mode, float(seconds), float(interval))
        return
    helper = build_helper()
    host = Host(helper)
    try:
        host.grow_to(args.size)
        time.sleep(1.0)
        processes = len(os.listdir("/proc"))
        print(
            f"host: {processes} /proc entries, {args.size} idle processes started, "
            f"{os.cpu_count()} CPUs (shared with other sessions), interval {args.interval:g} s"
        )
        latency = {mode: _latencies(helper, mode, args.runs, args.interval) for mode in MODES}
        print(f"\nexec -> started event, {args.runs} engines each (ms)")
        print(f"  {'':<22}{'median':>10}{'p90':>10}{'max':>10}   mode")
        for mode in MODES:
            values, used = latency[mode]
            figures = f"{_ms(values, 0.5):>10.2f}{_ms(values, 0.9):>10.2f}{max(values) * 1e3:>10.2f}"
            print(f"  {mode:<22}{figures}   {used}")
        ratio = statistics.median(latency["poll"][0]) / statistics.median(latency["events"][0])
        print(f"  polling / events (median): {ratio:.1f}x")
        for churn in (False, True):
            loop = None
            if churn:
                loop = subprocess.Popen(["sh", "-c", "while :; do /bin/true; sleep 0.01; done"])
            try:
                cpu = {mode: _cpu(mode, args.seconds, args.interval) for mode in MODES}
            finally:
                if loop is not None:
                    loop.kill()
                    loop.wait()
            label = "~100 forks/s on the host" if churn else "no forks but the host's own"
            print(f"\nidle watch CPU, {args.seconds:g} s, {label} (% of one core)")
            percent = {mode: 100 * c["cpu"] / c["wall"] for mode, c in cpu.items()}
            for mode in MODES:
                how = f"mode {cpu[mode]['mode']}, wakes {cpu[mode]['wakes']}"
                print(f"  {mode:<22}{percent[mode]:>9.2f}%   {how}")
            if percent["events"] > 0:
                print(f"  polling / events: {percent['poll'] / percent['events']:.1f}x")
    finally:
        host.stop()


if __name__ == "__main__":
    main()
