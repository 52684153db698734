"""What a config file another user wrote costs the scanner: parsing (item 17 of the hostile-facts
issue: 1 MiB of YAML that parses slowly) and reading (a thread per file, as the owner).

    python benches/bench_config.py [--reps 5] [--old-timeout 60]

For each document: the CPU time of PyYAML's ``safe_load`` (what the scanner did before; run in a
child process, given up after ``--old-timeout`` seconds) and of ``enginespec.untrusted.documents.
parse_yaml`` (what it does now, whose limits stop it), and their ratio. The documents are 1 MiB
although the reader refuses anything above ``MAX_CONFIG_BYTES`` before parsing: this measures
the parse limits alone. Then the cost of one ``read_named`` (resolve as the owner in a thread of
its own, open, check, read) and of one ``named_identity`` (the per-scan check for an edit),
against a plain ``open().read()`` and ``os.stat`` of the same file.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MIB = 1 << 20


def _documents() -> dict[str, bytes]:
    bomb = b"a: &a [x,x,x,x,x,x,x,x,x]\n" + b"".join(
        f"{b}: &{b} [{','.join(['*' + a] * 9)}]\n".encode() for a, b in zip("abcdefg", "bcdefgh", strict=True)
    )
    tabby = b"".join(f"section{i}:\n  key_{i}: value {i}\n  port: {5000 + i}\n".encode() for i in range(200))
    return {
        "tabbyapi-like 8 KiB": tabby,
        "flow list 1 MiB": (b"model: [" + b",".join([b"a"] * (MIB // 2)))[:MIB] + b"]\n",
        "block list 1 MiB": b"model:\n" + b"- a\n" * (MIB // 4),
        "mapping 1 MiB": b"".join(f"k{i}: v\n".encode() for i in range(MIB // 8))[:MIB],
        "nested flow 20 KiB": b"{" * 10_000 + b"}" * 10_000,
        "one scalar 1 MiB": b"model: " + b"a " * (MIB // 2) + b"\n",
        "alias bomb 9^8 in 1 KiB": bomb,
    }


_OLD = """
import resource, sys, time, yaml, json
data = sys.stdin.buffer.read()
start = time.process_time()
value = yaml.safe_load(data)
parsed = time.process_time() - start
size = len(json.dumps(value)) if len(data) < 4096 else -1
print(parsed, size, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def _old(data: bytes, timeout: float) -> str:
    try:
        out = subprocess.run(
            [sys.executable, "-c", _OLD], input=data, capture_output=True, timeout=timeout, check=True
        )
    except subprocess.TimeoutExpired:
        return f"> {timeout:g} s"
    except subprocess.CalledProcessError as err:
        return f"fails: {err.stderr.decode().strip().splitlines()[-1][:60]}"
    seconds, size, rss = out.stdout.split()
    extra = f", {int(size) / MIB:.0f} MiB as JSON" if int(size) >= 0 else ""
    return f"{float(seconds) * 1000:9.1f} ms ({int(rss) // 1024} MiB RSS{extra})"


def _new(data: bytes, reps: int) -> tuple[float, str]:
    from enginespec.untrusted.documents import DocumentError, parse_yaml

    times, outcome = [], "parsed"
    for _ in range(reps):
        start = time.process_time()
        try:
            parse_yaml(data)
        except DocumentError as why:
            outcome = str(why)
        times.append(time.process_time() - start)
    return statistics.median(times), outcome


def _per_call(fn: object, count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        fn()  # type: ignore[operator]
    return (time.perf_counter() - start) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--old-timeout", type=float, default=60.0)
    args = parser.parse_args()
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'document':26} {'safe_load (before)':44} {'parse_yaml (now)':>14}  ratio  outcome")
    for name, data in _documents().items():
        old = _old(data, args.old_timeout)
        new, outcome = _new(data, args.reps)
        try:
            ratio = f"{float(old.split()[0]) / 1000 / max(new, 1e-6):6.0f}x"
        except ValueError:
            ratio = "     -"
        print(f"{name:26} {old:44} {new * 1000:11.1f} ms {ratio}  {outcome[:60]}")

    from enginespec._host.namedfiles import named_identity, read_named

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "c.yaml"
        path.write_bytes(_documents()["tabbyapi-like 8 KiB"])
        count = 2000
        plain = _per_call(path.read_bytes, count)
        safe = _per_call(lambda: read_named(os.getpid(), str(path), MIB), count)
        stat = _per_call(lambda: os.stat(path), count)
        identity = _per_call(lambda: named_identity(os.getpid(), str(path)), count)
    for label, ours, theirs, other in (
        ("read_named", safe, plain, "open().read()"),
        ("named_identity", identity, stat, "os.stat"),
    ):
        ratio = ours / theirs
        print(f"{label:15} {ours * 1e6:7.1f} us  {other:14} {theirs * 1e6:6.1f} us  ratio {ratio:4.1f}x")


if __name__ == "__main__":
    main()
