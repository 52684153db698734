"""CLI start-up benchmark: how long `enginespec --version`, `ps --no-health` and `ps --json` take
as a user runs them (a fresh interpreter each time), next to floors measured in the same run:
`python -c pass` (the interpreter alone) and `python -c "import pydantic"` (what any command that
builds models pays).

    python benches/bench_cli.py [--runs 15]

Prints the median and best wall time of each, its ratio to `python -c pass`, and the slowest
imports of `--version` (`python -X importtime`). The target: `--version` within 150 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

CASES: dict[str, list[str]] = {
    "python -c pass (floor)": [sys.executable, "-c", "pass"],
    "python -c 'import pydantic'": [sys.executable, "-c", "import pydantic"],
    "enginespec --version": [sys.executable, "-m", "enginespec.cli", "--version"],
    "enginespec ps --no-health": [sys.executable, "-m", "enginespec.cli", "ps", "--no-health"],
    "enginespec ps --json": [sys.executable, "-m", "enginespec.cli", "ps", "--json"],
}


def _times(command: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - start)
    return times


def _slowest_imports(command: list[str], count: int = 8) -> list[tuple[int, str]]:
    out = subprocess.run(
        [command[0], "-X", "importtime", *command[1:]], capture_output=True, text=True, check=False
    )
    found = []
    for line in out.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            found.append((int(parts[1]), parts[2].rstrip()))
    return sorted(found, reverse=True)[:count]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    backend = os.environ.get("ENGINESPEC_BACKEND") or "default"
    print(f"backend: {backend}; {args.runs} runs each; wall time of a fresh process")
    floor = None
    for name, command in CASES.items():
        times = _times(command, args.runs)
        median = statistics.median(times)
        floor = floor or median
        best = min(times) * 1000
        print(f"{name:<30} median {median * 1000:7.1f} ms  best {best:7.1f} ms  x{median / floor:5.1f}")
    print("\nslowest imports of `enginespec --version` (cumulative microseconds):")
    for micros, module in _slowest_imports(CASES["enginespec --version"]):
        print(f"  {micros:>8}  {module}")


if __name__ == "__main__":
    main()
