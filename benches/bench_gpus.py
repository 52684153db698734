"""What GPU attribution costs a scan.

Run as root from the repository root with the package installed:

    python benches/bench_gpus.py [--size 10000] [--engines 20] [--seconds 20]

1. Live host: N extra idle processes with host-like argv, 20 of them engines; two scanners poll
   at 10 Hz side by side, one reading GPUs (the default) and one not (``Scanner(gpus=False)``).
   Prints the median and mean warm rescan of each and their ratio (the mean carries the periodic
   re-reads: memory every 2 s; the trees' devices come with the sockets listed at each tree
   refresh). This host has no GPU: the engines hold none.
2. Fixture host with GPUs (tests/helpers/gpuhost.py): 20 engine trees of a server and two workers, each
   worker holding its GPU, nvidiactl, nvidia-uvm and 200 other files, NVML from the test
   library. Prints the cost of reading them cold (a new engine), of a memory refresh, of a poll
   with nothing due, and the amortized cost per scan at 10 Hz next to the warm rescan of part 1.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _mix import ROOT, Host, build_helper, reap, spawn
from enginespec import Scanner
from enginespec.gpus import reader as gpus_module
from enginespec.scanning.scanner import YOUNG_SECONDS

sys.path.insert(0, str(ROOT / "tests"))
from helpers.gpuhost import GIB, build_nvml
from helpers.gpuhost import Host as FixtureHost


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def live(size: int, engines: int, seconds: float) -> float:
    helper = build_helper()
    host = Host(helper)
    servers = []
    try:
        host.grow_to(size)
        for i in range(engines):
            servers.append(
                spawn(helper, ["llama-server", "-m", f"/m/bench-{i}.gguf", "--port", str(9300 + i)])
            )
        time.sleep(YOUNG_SECONDS + 1.0)  # none is young any more: a warm rescan reads none again
        plain, reading = Scanner(gpus=False), Scanner()
        for _ in range(2):
            plain.scan()
            reading.scan()
        times: dict[str, list[float]] = {"without": [], "with": []}
        deadline = time.monotonic() + seconds
        first = True
        while time.monotonic() < deadline:
            # each goes first in turn: the first scan after a sleep meets colder caches
            for name in ("without", "with") if first else ("with", "without"):
                times[name].append(_timed(plain.scan if name == "without" else reading.scan))
            first = not first
            time.sleep(0.1)
        print(f"live host: {size} extra processes, {engines} engines, {len(times['with'])} polls each")
        for name, values in times.items():
            print(f"  warm rescan {name:>7} GPU reading: median {statistics.median(values) * 1e3:7.2f} ms,"
                  f" mean {statistics.mean(values) * 1e3:7.2f} ms")  # fmt: skip
        median = statistics.median(times["with"]) / statistics.median(times["without"])
        mean = statistics.mean(times["with"]) / statistics.mean(times["without"])
        print(f"  ratio with/without: median {median:.3f}, mean {mean:.3f}")
        return statistics.median(times["without"])
    finally:
        for pid in servers:
            reap(pid)
        host.stop()


def fixture(engines: int, warm_rescan: float) -> None:
    directory = Path(tempfile.mkdtemp(prefix="enginespec-bench-gpus-"))
    try:
        host = FixtureHost(directory / "host")
        gpus = []
        for i in range(8):
            bus, uuid = f"0000:{0x10 + i:02x}:00.0", f"GPU-00000000-0000-0000-0000-{i:012d}"
            gpus.append(host.nvidia(bus, i, "NVIDIA H100 80GB HBM3", uuid))
            host.nvml_gpu(uuid, bus, "NVIDIA H100 80GB HBM3", 80 * GIB, 60 * GIB)
        trees = []
        files = directory / "files"
        files.mkdir()
        for e in range(engines):
            server = 1000 + e * 10
            host.process(server, "vllm", {})
            for w in (1, 2):
                fds: dict[int, Path | str] = {
                    10: host.root / "dev" / "nvidiactl",
                    11: host.root / "dev" / "nvidia-uvm",
                }
                fds[12] = gpus[(e * 2 + w) % 8]
                for fd in range(20, 220):
                    target = files / f"{server + w}-{fd}"
                    target.write_text("")
                    fds[fd] = target
                host.process(server + w, "VLLM::Worker_TP", fds)
                host.nvml_process(str((e * 2 + w) % 8), server + w, 2 * GIB)
            trees.append((server, server + 1, server + 2))
        library = build_nvml(directory, 3)
        os.environ["ENGINESPEC_NVML_LIBRARY"] = str(library)
        os.environ["ENGINESPEC_TEST_NVML_HOST"] = str(host.nvml_file())
        root = str(host.root)
        cold = statistics.median(_timed(lambda: gpus_module.GpuReader(root).read(trees)) for _ in range(5))
        reader = gpus_module.GpuReader(root)
        reader.read(trees)
        idle = statistics.median(_timed(lambda: reader.read(trees)) for _ in range(50))

        def refresh() -> None:
            reader._host_due = -1.0  # what happens every MEMORY_REFRESH_SECONDS
            reader._held = {key: (-1.0, given, held) for key, (_due, given, held) in reader._held.items()}
            reader.read(trees)

        memory = statistics.median(_timed(refresh) for _ in range(10))
        polls_per_memory = gpus_module.MEMORY_REFRESH_SECONDS * 10
        # the fixture's workers hold only NVIDIA devices and NVML answers
        polls_per_fds = gpus_module.NVML_HOLDER_FD_REFRESH_SECONDS * 10
        amortized = idle + memory / polls_per_memory + (cold - memory) / polls_per_fds
        print(f"fixture host: {engines} engine trees (server + 2 workers, 203 fds each worker), 8 GPUs, NVML")
        print(f"  cold read (new engines):          {cold * 1e3:7.2f} ms")
        print(f"  memory refresh (every 2 s):        {memory * 1e3:7.2f} ms")
        print(f"  poll with nothing due:             {idle * 1e6:7.1f} us")
        print(f"  amortized per scan at 10 Hz:       {amortized * 1e3:7.3f} ms"
              f" = {amortized / warm_rescan:.1%} of the live warm rescan")  # fmt: skip
    finally:
        shutil.rmtree(directory)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--engines", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    warm = live(args.size, args.engines, args.seconds)
    fixture(args.engines, warm)


if __name__ == "__main__":
    main()
