"""Scan benchmark: enginespec's scanner against psutil, `ps` parsing, sysinfo and raw /proc floors.

Run as root from the repository root with the package installed:

    python benches/bench_scan.py [--sizes 1000,5000,10000] [--poll-seconds 30]

For each host size N it starts N extra idle processes with realistic argv (a few engines among
them) and prints, measured in the same run: the cold scan (first call), the incremental scan when
nothing changed, per-process microseconds, and ratios to the alternatives. Then the CPU used
polling at 10 Hz on the largest host, as % of one core. The Rust floor programs are in
`benches/proc_floor.rs`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from collections.abc import Callable

import psutil

from _mix import DATA, ENGINES_BEFORE_2026, ROOT, Host, build_helper, signatures_before_2026
from enginespec import Scanner
from enginespec._host.backend import ScannerType
from enginespec.definition.signature import signatures_json
from enginespec.engines import all_signatures
from enginespec.scanning.scanner import EXEC_WRAPPERS, TREE_REFRESH_SECONDS, YOUNG_SECONDS


def _median(fn: Callable[[], object], reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _rust_run(mode: str, reps: int) -> dict[str, list[float]]:
    out = subprocess.run(
        ["cargo", "bench", "--quiet", "--bench", "proc_floor", "--", mode, str(reps)],
        cwd=ROOT,
        env={**os.environ, "ENGINESPEC_BENCH_DATA": str(DATA)},
        capture_output=True,
        text=True,
        check=True,
    )
    line = next(line for line in out.stdout.splitlines() if line.startswith("{"))
    result: dict[str, list[float]] = json.loads(line)
    return result


def _rust(mode: str, reps: int) -> float:
    return statistics.median(_rust_run(mode, reps)["seconds"])


def _ps_parse() -> int:
    out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, check=True).stdout
    rows = [line.strip().split(None, 1) for line in out.splitlines()]
    return len(rows)


def _psutil_cold() -> int:
    psutil.process_iter.cache_clear()
    return sum(1 for _ in psutil.process_iter(["pid", "cmdline"]))


def _psutil_warm() -> int:
    return sum(1 for _ in psutil.process_iter(["pid", "cmdline"]))


def _poll(seconds: float, size: int, churn: bool) -> None:
    scanner = Scanner()
    scanner.scan()
    period, ticks = 0.1, int(seconds * 10)
    cpu_start, wall_start = time.process_time(), time.monotonic()
    for tick in range(ticks):
        scanner.scan()
        delay = wall_start + (tick + 1) * period - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    cpu = time.process_time() - cpu_start
    wall = time.monotonic() - wall_start
    label = "with ~100 forks/s on the host" if churn else "idle host (no forks between most scans)"
    print(
        f"\npolling at 10 Hz for {wall:.1f} s on N = {size}, {label}: {100 * cpu / wall:.1f}% of one core "
        f"(goal <= 20%); {ticks} scans, {cpu / ticks * 1e3:.2f} ms CPU each"
    )


def _row(name: str, seconds: float, processes: int, ours: float) -> str:
    per = seconds / processes * 1e6
    return f"  {name:<44}{seconds * 1e3:>10.2f} ms{per:>9.2f} us/proc{seconds / ours:>9.2f}x ours"


#: how long a new process is watched as young (rust/scan.rs ScanOptions::young)
YOUNG_WINDOW = 5.0


def _cold_parts(reps: int) -> tuple[float, float, float, float, float]:
    """Medians of a new Scanner's construction plus first scan, of the construction, of the first
    scan, of the first scan of the extension's scanner alone (made untimed; no Python models of
    the engines, no stages), and of the same with only the engines known before the 2026 servers,
    measured in turn in each repetition so all see the same host."""
    json = signatures_json(all_signatures())
    before_json = signatures_before_2026()
    totals, constructions, scans, natives, befores = [], [], [], [], []
    for _ in range(reps):
        start = time.perf_counter()
        scanner = Scanner()
        built = time.perf_counter()
        scanner.scan()
        done = time.perf_counter()
        native = ScannerType(json, list(EXEC_WRAPPERS), YOUNG_SECONDS, TREE_REFRESH_SECONDS, True)
        native_start = time.perf_counter()
        native.scan()
        natives.append(time.perf_counter() - native_start)
        before = ScannerType(before_json, list(EXEC_WRAPPERS), YOUNG_SECONDS, TREE_REFRESH_SECONDS, True)
        before_start = time.perf_counter()
        before.scan()
        befores.append(time.perf_counter() - before_start)
        totals.append(done - start)
        constructions.append(built - start)
        scans.append(done - built)
    median = statistics.median
    return median(totals), median(constructions), median(scans), median(natives), median(befores)


def _cold(label: str, processes: int, reps: int) -> None:
    """Prints the cold scan (a new Scanner's first call) beside the floors, and what it is made
    of: the Scanner's construction (the signatures are serialised and compiled once per process:
    the first construction pays for them, not these), the extension's scan, and the facade's
    models of the engines found (a cost per engine, which the floors do not have)."""
    cold, construct, first_scan, native, before = _cold_parts(reps)
    engines = len(Scanner().scan())
    floor_cmdline = _rust("cmdline", reps)
    print(f" cold scan (first call), {label}")
    print(_row("enginespec native Scanner().scan()", cold, processes, cold))
    print(_row("  of which Scanner() (construction)", construct, processes, cold))
    print(_row("  of which the extension's first scan", native, processes, cold))
    print(
        _row(f"  the same, {len(ENGINES_BEFORE_2026)} engines (before 2026)", before, processes, cold)
        + f" (all {len(all_signatures())} signatures: {native / before:.2f}x)"
    )
    models = first_scan - native
    print(
        _row(f"  of which the facade: models of {engines} engines", models, processes, cold)
        + f" ({models / max(engines, 1) * 1e6:.0f} us each)"
    )
    print(
        _row("enginespec scanner from Rust (no Python)", _rust("native-cold", reps), processes, cold)
        + " (compiles the signatures from JSON each time)"
    )
    print(_row("raw floor: list /proc + read every cmdline", floor_cmdline, processes, cold))
    print(_row("psutil process_iter(pid, cmdline), cold", _median(_psutil_cold, reps), processes, cold))
    print(_row("ps -eo pid=,args= + parsing", _median(_ps_parse, reps), processes, cold))
    print(_row("sysinfo refresh (cmd only), new System", _rust("sysinfo-cold", reps), processes, cold))
    pair = _rust_run("cold-pair", reps * 2)
    paired = statistics.median(pair["seconds"]) / statistics.median(pair["floor"])
    scan_only = [total - built for total, built in zip(pair["seconds"], pair["construct"], strict=True)]
    print(
        f"  (alternated: the scanner from Rust {statistics.median(pair['seconds']) * 1e3:.2f} ms, of which "
        f"{statistics.median(pair['construct']) * 1e3:.2f} ms compiling the signatures from JSON; "
        f"{statistics.median(scan_only) / statistics.median(pair['floor']):.2f}x the floor without it)"
    )
    print(
        f"  -> native / raw floor = {cold / floor_cmdline:.2f} (Scanner().scan(), models included; separate "
        f"runs); {native / floor_cmdline:.2f} the extension's first scan alone; {paired:.2f} the "
        "scanner from Rust alternated in one process with the floor (goal <= 1.15)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,5000,10000")
    parser.add_argument("--poll-seconds", type=float, default=30.0)
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    helper = build_helper()
    (DATA / "signatures.json").write_text(signatures_json(all_signatures()))
    subprocess.run(["cargo", "bench", "--quiet", "--bench", "proc_floor", "--no-run"], cwd=ROOT, check=True)

    host = Host(helper)
    sizes = [int(s) for s in args.sizes.split(",")]
    try:
        for size in sizes:
            host.grow_to(size)
            grown = time.monotonic()
            time.sleep(0.5)
            processes = len(psutil.pids())
            reps = args.reps
            warm_scanner = Scanner()
            engines = len(warm_scanner.scan())
            print(f"\nN = {size} extra processes ({processes} on the host, {engines} engines found)")
            # A process younger than the scanner's young window (5 s) has its cmdline kept and read
            # again until it settles; a settled host (every process older) is the common case.
            _cold(
                f"fresh host: the newest extra process {time.monotonic() - grown:.1f} s old", processes, reps
            )
            time.sleep(max(0.0, grown + YOUNG_WINDOW + 1 - time.monotonic()))
            _cold(
                f"settled host: the newest extra process {time.monotonic() - grown:.1f} s old",
                processes,
                reps,
            )
            warm = _median(warm_scanner.scan, reps * 3)
            floor_list = _rust("list", reps * 3)
            print(" incremental scan, nothing changed")
            print(_row("enginespec native scanner.scan()", warm, processes, warm))
            print(
                _row(
                    "enginespec scanner from Rust (no Python)",
                    _rust("native-warm", reps * 3),
                    processes,
                    warm,
                )
            )
            print(_row("floor: list /proc only", floor_list, processes, warm))
            psutil_warm = _median(_psutil_warm, reps)
            print(_row("psutil process_iter(pid, cmdline), warm", psutil_warm, processes, warm))
            print(_row("sysinfo refresh (cmd only), warm", _rust("sysinfo-warm", reps * 3), processes, warm))
            print(
                f"  -> native / list floor = {warm / floor_list:.2f} (goal <= 2); psutil / native = "
                f"{psutil_warm / warm:.1f}x (goal >= 10)"
            )
        if args.poll_seconds > 0:
            _poll(args.poll_seconds, sizes[-1], churn=False)
            # A busy host forks all the time: every scan then lists /proc (no quiet path).
            churn = subprocess.Popen(["sh", "-c", "while :; do /bin/true; sleep 0.01; done"])
            try:
                _poll(args.poll_seconds, sizes[-1], churn=True)
            finally:
                churn.kill()
                churn.wait()
    finally:
        host.stop()


if __name__ == "__main__":
    main()
