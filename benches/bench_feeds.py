"""Feed benchmark: how soon `enginespec feed --watch` lists an engine that serves and removes one
that exits, against the alternatives a fleet would otherwise use.

Run as root (in the initial namespaces: process events) from the repository root with the package
installed:

    python benches/bench_feeds.py [--cycles 500] [--slow-cycles 40]

Each churn cycle starts a fake engine (a real process holding the listening socket of a scripted
server on loopback that answers ``ready`` and names its model, so ``verify_identity`` passes),
waits until the file_sd file lists it, kills it, and waits until the file no longer does; the
file is read every 0.5 ms. It prints, for each way of keeping the file, the median, p99 and max
of ready -> listed and exit -> removed, and their ratio to ours:

- ``events``: ``feed --watch`` driven by the kernel's process events (ours; health interval 1 s:
  a new engine is checked as soon as it is seen);
- ``polling``: the same, forced to poll (``ENGINESPEC_WATCH_POLL=1``, interval 100 ms);
- ``cron``: a one-shot ``feed`` run every second (how a feed is kept without a watch).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from tempfile import TemporaryDirectory

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from helpers.fakeserver import Answer, bound_socket, models, serving  # noqa: E402
from helpers.procs import build_helper, running, stop_child  # noqa: E402

READY = {"/health": [Answer(200)], "/v1/models": [models("/models/bench")], "/metrics": [Answer(200, b"")]}


def _ports(out: Path) -> set[int]:
    try:
        return {int(t.rsplit(":", 1)[1]) for g in json.loads(out.read_bytes()) for t in g["targets"]}
    except (OSError, ValueError):
        return set()


def _wait(predicate: Callable[[], bool], timeout: float = 30.0) -> float:
    started = time.perf_counter()
    while not predicate():
        if time.perf_counter() - started > timeout:
            raise SystemExit("the feed never followed the engine")
        time.sleep(0.0005)
    return time.perf_counter() - started


def _feeder(mode: str, out: Path) -> Callable[[], None]:
    """Starts the way of keeping ``out``; returns how to stop it."""
    command = [
        sys.executable,
        "-m",
        "enginespec.cli",
        "feed",
        "--format",
        "file-sd",
        "--out",
        str(out),
    ]
    if mode == "cron":
        stop = False

        def loop() -> None:
            while not stop:
                subprocess.run(command, capture_output=True, timeout=60, check=False)
                time.sleep(1.0)

        import threading

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()

        def end_cron() -> None:
            nonlocal stop
            stop = True
            thread.join(timeout=60)

        return end_cron
    env = {**os.environ, **({"ENGINESPEC_WATCH_POLL": "1"} if mode == "polling" else {})}
    proc = subprocess.Popen(
        [*command, "--watch", "--interval", "100ms", "--health-interval", "1s"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    return lambda: stop_child(proc)


def measure(mode: str, cycles: int, helper: Path) -> tuple[list[float], list[float]]:
    listed, removed = [], []
    with TemporaryDirectory() as directory, running(helper) as procs:
        out = Path(directory) / "engines.json"
        end = _feeder(mode, out)
        try:
            _wait(out.exists)
            for _ in range(cycles):
                sock = bound_socket()
                port = sock.getsockname()[1]
                try:
                    with serving(READY, sock=sock):
                        argv = ["vllm", "serve", "/models/bench", "--host", "127.0.0.1", "--port", str(port)]
                        proc = procs.start(argv, (sock.fileno(),))
                        listed.append(_wait(lambda port=port: port in _ports(out)))
                        proc.kill()
                        started = time.perf_counter()
                        proc.wait()
                        _wait(lambda port=port: port not in _ports(out))
                        removed.append(time.perf_counter() - started)
                finally:
                    sock.close()
        finally:
            end()
    return listed, removed


def _summary(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered), p99, ordered[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=500)
    parser.add_argument("--slow-cycles", type=int, default=40, help="cycles of polling and cron")
    args = parser.parse_args()
    with TemporaryDirectory() as directory:
        helper = build_helper(Path(directory))
        results = {
            mode: measure(mode, args.cycles if mode == "events" else args.slow_cycles, helper)
            for mode in ("events", "polling", "cron")
        }
    ours = {
        what: _summary(values) for what, values in zip(("listed", "removed"), results["events"], strict=True)
    }
    header = ("feed kept by", "what", "cycles", "median", "p99", "max", "p99 / ours")
    print("{:<10} {:<8} {:>6} {:>9} {:>9} {:>9} {:>10}".format(*header))
    for mode, (listed, removed) in results.items():
        for what, values in (("listed", listed), ("removed", removed)):
            median, p99, worst = _summary(values)
            ratio = p99 / ours[what][1] if ours[what][1] else float("nan")
            print(
                f"{mode:<10} {what:<8} {len(values):>6} {median * 1000:>7.1f}ms {p99 * 1000:>7.1f}ms "
                f"{worst * 1000:>7.1f}ms {ratio:>9.1f}x"
            )


if __name__ == "__main__":
    main()
