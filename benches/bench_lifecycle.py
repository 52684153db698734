"""Lifecycle benchmark: how soon a failed start is reported, and how fast output is kept.

Run from the repository root with the package installed:

    python benches/bench_lifecycle.py [--runs 20] [--lines 200000]

- exit -> LaunchFailed: a fake llama-server (tests/helpers/fake_engine.py) replays a failure log, writes
  the time just before it exits, and exits 1; the time from there to ``wait_ready`` raising the
  classified ``LaunchFailed`` is measured ``--runs`` times (median and worst), against the
  ``poll`` interval of the waiter (0.25 s), the figure a sleep-based waiter would average half of.
- output: ``--lines`` lines written as fast as the fake can, counted into the ring and the file;
  lines per second kept, against the fake's own write rate (the floor: a reader that keeps up).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from enginespec import LaunchFailed, launch
from helpers.fakeserver import free_port
from helpers.lifecycle_fakes import fake_recipe, install_fake


def exit_latency(binary: Path, folder: Path, runs: int) -> list[float]:
    log = folder / "replay.log"
    log.write_text("gguf_init_from_file: failed to open GGUF file '/models/none.gguf'\n")
    delays = []
    for _run in range(runs):
        recipe = fake_recipe(binary, free_port(), "replay", FAKE_LOG=str(log), FAKE_EXIT="1")
        engine = launch(recipe, log_dir=folder / "logs")
        try:
            engine.wait_ready(timeout=60)
        except LaunchFailed as failed:
            raised, kind = time.time(), failed.failure.kind
        else:
            raise SystemExit("the fake engine became ready")
        finally:
            engine.close()
        if kind != "model_not_found":
            raise SystemExit(f"classified {kind}, not model_not_found")
        exited = next(line.time for line in engine.logs(50) if "failed to open GGUF" in line.text)
        delays.append(raised - exited)
    return delays


def flood(binary: Path, folder: Path, lines: int) -> tuple[float, float]:
    recipe = fake_recipe(binary, free_port(), "flood", FAKE_LINES=str(lines))
    started = time.time()
    engine = launch(recipe, log_dir=folder / "logs", ring_lines=lines + 100)
    kept = sum(1 for line in engine.follow(n=10) if line.text.startswith("line "))
    elapsed = time.time() - started
    engine.wait(timeout=60)
    engine.close()
    assert kept == lines, kept
    stamps = [line.time for line in engine.logs(lines + 100) if line.text.startswith("line ")]
    return lines / elapsed, lines / max(stamps[-1] - stamps[0], 1e-6)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--lines", type=int, default=200_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        binary = install_fake(folder)
        delays = exit_latency(binary, folder, args.runs)
        median, worst = statistics.median(delays), max(delays)
        print(
            f"exit -> LaunchFailed: median {median * 1000:.0f} ms, worst {worst * 1000:.0f} ms "
            f"(line seen -> raised; poll interval 250 ms: ratio {median / 0.25:.2f})"
        )
        whole, arriving = flood(binary, folder, args.lines)
        print(
            f"output kept: {whole:,.0f} lines/s start to end (process start included), "
            f"{arriving:,.0f} lines/s while arriving; {args.lines:,} of {args.lines:,} lines kept"
        )


if __name__ == "__main__":
    main()
