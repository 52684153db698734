"""Hostile-process benchmarks, on both backends. Run as root from the repository root with the
package installed:

    python benches/bench_hostile.py argv [--reps 5]
    python benches/bench_hostile.py churn [--processes 2000] [--seconds 20] [--lifetime 0.5]

``argv``: cold (first call) and incremental scan times with 20 engines of 100,000 arguments each,
against the same host without them, and the ratios: an unchanged engine should cost a scan the
same whatever its argv, a huge argv be paid for once.

``churn``: N extra idle processes, plus ~100 process starts/s, one in ten an engine, each living
``--lifetime`` seconds: polls at 10 Hz and prints the scan times, the CPU used and the share of the
short-lived engines that were reported at least once.

Each backend is measured in an interpreter of its own (``ENGINESPEC_BACKEND``), on the same
processes. ``--compare DIR`` measures another build of the package as well, in the same run (for
instance the previous commit, installed with ``pip install --no-deps --target DIR WHEEL``).
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _mix import Host, build_helper, reap, spawn

BACKENDS = ("native", "python")
HUGE_ENGINES = 20
#: 100,002 arguments, as tests/scanning/test_robustness.py's, within the kernel's 2 MiB for argv + env.
HUGE_ARGV = ["vllm", "serve", *(["--enforce-eager"] * 50_000), *(["x"] * 49_998), "--port"]


def _median(fn: Any, count: int) -> float:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _measure_argv(reps: int) -> dict[str, float]:
    """Medians of the facade's scans and of the backend's own (the raw tuples, no models)."""
    from enginespec import Scanner
    from enginespec._host.backend import ScannerType
    from enginespec.definition.signature import signatures_json
    from enginespec.engines import all_signatures
    from enginespec.scanning.scanner import EXEC_WRAPPERS, TREE_REFRESH_SECONDS, YOUNG_SECONDS

    args = (signatures_json(all_signatures()), list(EXEC_WRAPPERS), YOUNG_SECONDS, TREE_REFRESH_SECONDS, True)
    scanner, raw = Scanner(), ScannerType(*args)
    huge = sum(1 for p in scanner.scan() if len(p.argv) > 100_000)
    raw.scan()
    return {
        "facade cold": _median(lambda: Scanner().scan(), reps),
        "facade incremental": _median(scanner.scan, reps * 3),
        "backend cold": _median(lambda: ScannerType(*args).scan(), reps),
        "backend incremental": _median(raw.scan, reps * 3),
        "huge engines": huge,
    }


def _measure_churn(seconds: float) -> dict[str, Any]:
    from enginespec import Scanner

    scanner = Scanner()
    scanner.scan()
    period, ticks = 0.1, int(seconds * 10)
    durations: list[float] = []
    seen: set[int] = set()
    start_wall, start_cpu, start = time.time(), time.process_time(), time.monotonic()
    for tick in range(ticks):
        began = time.perf_counter()
        seen.update(p.pid for p in scanner.scan())
        durations.append(time.perf_counter() - began)
        delay = start + (tick + 1) * period - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    wall = time.monotonic() - start
    return {
        "durations": durations,
        "cpu": (time.process_time() - start_cpu) / wall,
        "window": [start_wall, start_wall + wall],
        "seen": sorted(seen),
    }


#: (label, directory put first on sys.path: another build of the package, or None)
Build = tuple[str, "str | None"]


def _worker(build: Build, backend: str, *args: str) -> dict[str, Any]:
    env = {**os.environ, "ENGINESPEC_BACKEND": backend}
    if build[1] is not None:
        env["PYTHONPATH"] = build[1]
    out = subprocess.run(
        [sys.executable, __file__, "--worker", *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def bench_argv(helper: Path, reps: int, builds: list[Build]) -> None:
    hosts = {
        "none": [],
        "small": [["vllm", "serve", "/m/small", "--port", str(9000 + i)] for i in range(HUGE_ENGINES)],
        "huge": [[*HUGE_ARGV, str(9000 + i)] for i in range(HUGE_ENGINES)],
    }
    results: dict[str, dict[tuple[str, str], dict[str, float]]] = {}
    for host, argvs in hosts.items():
        pids = [spawn(helper, argv) for argv in argvs]
        time.sleep(0.5)
        try:
            results[host] = {
                (build[0], b): _worker(build, b, "argv", "--reps", str(reps))
                for build in builds
                for b in BACKENDS
            }
        finally:
            for pid in pids:
                reap(pid)
    print(
        f"\nscan times (medians) with no extra engine, {HUGE_ENGINES} engines of 5 arguments, "
        f"{HUGE_ENGINES} of {len(HUGE_ARGV) + 1:,}"
    )
    print(f"  {'build':<8}{'backend':<8}{'scan':<22}{'none':>12}{'small':>12}{'huge':>12}{'huge/small':>12}")
    for key in results["huge"]:
        for kind in ("backend cold", "backend incremental", "facade cold", "facade incremental"):
            none, small, huge = (results[host][key][kind] for host in hosts)
            print(
                f"  {key[0]:<8}{key[1]:<8}{kind:<22}{none * 1e3:>9.2f} ms{small * 1e3:>9.2f} ms"
                f"{huge * 1e3:>9.2f} ms{huge / small:>11.2f}x"
            )
        print(f"  {key[0]:<8}{key[1]:<8}huge engines found: {results['huge'][key]['huge engines']:.0f}")


class Churn:
    """~``rate`` process starts per second, one in ten an engine, each killed after ``lifetime``."""

    def __init__(self, helper: Path, rate: float, lifetime: float) -> None:
        self.helper, self.rate, self.lifetime = helper, rate, lifetime
        #: (pid, wall time started, wall time killed) of every short-lived engine
        self.engines: list[tuple[int, float, float]] = []

    def run(self, until: float) -> None:
        """Starts processes until ``until`` (monotonic), then lets the last ones live out."""
        alive: list[tuple[float, int, int | None]] = []  # (deadline, pid, index in engines)
        started = 0
        next_start = time.monotonic()
        while time.monotonic() < until or alive:
            now = time.monotonic()
            while alive and alive[0][0] <= now:
                _deadline, pid, index = heapq.heappop(alive)
                reap(pid)
                if index is not None:
                    self.engines[index] = (pid, self.engines[index][1], time.time())
            if next_start <= now < until:
                index = None
                if started % 10 == 0:
                    argv = ["vllm", "serve", f"/m/churn-{started}", "--port", str(20000 + started % 10000)]
                    index = len(self.engines)
                else:
                    argv = ["python3", "task.py", "--job", str(started)]
                pid = spawn(self.helper, argv)
                if index is not None:
                    self.engines.append((pid, time.time(), 0.0))
                heapq.heappush(alive, (now + self.lifetime, pid, index))
                started += 1
                next_start += 1 / self.rate
            time.sleep(0.002)

    def coverage(self, window: list[float], seen: set[int]) -> tuple[int, int]:
        """(seen, started) among the engines that lived wholly within ``window``."""
        inside = [pid for pid, born, died in self.engines if window[0] <= born and 0 < died <= window[1]]
        return sum(1 for pid in inside if pid in seen), len(inside)


def bench_churn(helper: Path, processes: int, seconds: float, lifetime: float, builds: list[Build]) -> None:
    import threading

    host = Host(helper)
    try:
        host.grow_to(processes)
        time.sleep(1.0)
        rows = []
        for build, backend in ((build, backend) for build in builds for backend in BACKENDS):
            churn = Churn(helper, rate=100, lifetime=lifetime)
            thread = threading.Thread(target=churn.run, args=(time.monotonic() + seconds + 3,))
            thread.start()
            time.sleep(1.0)
            result = _worker(build, backend, "churn", "--seconds", str(seconds))
            thread.join()
            hits, total = churn.coverage(result["window"], set(result["seen"]))
            rows.append((f"{build[0]} {backend}", result, hits, total))
        print(
            f"\nchurn: {processes} extra idle processes, ~100 starts/s (one in ten an engine), each "
            f"living {lifetime} s; 10 Hz polling for {seconds} s"
        )
        print(
            f"  {'build, backend':<16}{'scans':>6}{'median':>11}{'p90':>11}{'max':>11}{'CPU':>8}"
            "   short-lived engines seen"
        )
        for label, result, hits, total in rows:
            d = sorted(result["durations"])
            p90 = d[int(len(d) * 0.9)]
            print(
                f"  {label:<16}{len(d):>6}{statistics.median(d) * 1e3:>8.2f} ms{p90 * 1e3:>8.2f} ms"
                f"{d[-1] * 1e3:>8.2f} ms{result['cpu'] * 100:>7.1f}%   {hits}/{total} "
                f"({100 * hits / max(total, 1):.0f}%)"
            )
    finally:
        host.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("part", choices=["argv", "churn"])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--processes", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--lifetime", type=float, default=0.5)
    parser.add_argument("--compare", metavar="DIR", help="another build of the package, measured too")
    args = parser.parse_args()
    if args.worker:
        result = _measure_argv(args.reps) if args.part == "argv" else _measure_churn(args.seconds)
        print(json.dumps(result))
        return
    helper = build_helper()
    builds: list[Build] = [("this", None)] + ([("compare", args.compare)] if args.compare else [])
    if args.part == "argv":
        bench_argv(helper, args.reps, builds)
    else:
        bench_churn(helper, args.processes, args.seconds, args.lifetime, builds)


if __name__ == "__main__":
    main()
