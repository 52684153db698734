"""What one `enginespec ps --json` costs (wall time and peak RSS, measured by the kernel) on a host
full of hostile fake engines, on both backends. Run as root from the repository root with the
package installed:

    python benches/bench_hostile_ps.py [--huge 60] [--hung 1024] [--floods 3] [--compare DIR]

``--huge N``: N engines of 100,002 arguments each (a cold scan pays per argument kept);
``--hung N``: N engines holding one port that accepts and never answers (no overall deadline
took 32 s at 1,024); ``--floods N``: N engines answering /health with 400 MB each. Each scenario
runs alone, against the same host without it (the ratio says what the hostile processes cost).
``--compare DIR`` runs another copy of the package (``PYTHONPATH=DIR``, e.g. a checkout's
``python/`` of the previous commit) too, on the fallback backend (its own native module is not
built).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HUGE_ARGV = ["vllm", "serve", *(["--enforce-eager"] * 50_000), *(["x"] * 49_998), "--port", "8123"]


def _helper(directory: Path) -> Path:
    binary = directory / "idle"
    subprocess.run(["gcc", "-O1", "-o", str(binary), str(ROOT / "tests" / "helpers" / "idle.c")], check=True)
    return binary


@contextmanager
def _started(helper: Path, argvs: list[list[str]], fds: tuple[int, ...] = ()) -> Iterator[None]:
    procs = [
        subprocess.Popen(
            argv, executable=helper, pass_fds=fds, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
        )
        for argv in argvs
    ]
    try:
        time.sleep(1.0)
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def _flood(sock: socket.socket, stop: threading.Event) -> None:
    chunk = b"0" * 65536
    sock.listen(64)
    sock.settimeout(0.2)
    while not stop.is_set():
        try:
            conn, _ = sock.accept()
        except OSError:
            continue
        threading.Thread(target=_answer, args=(conn, chunk), daemon=True).start()


def _answer(conn: socket.socket, chunk: bytes) -> None:
    with conn:
        try:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 400000000\r\n\r\n")
            for _ in range(400_000_000 // len(chunk)):
                conn.sendall(chunk)
        except OSError:
            pass


#: `enginespec ps --json` in an interpreter that then prints its own peak RSS (KiB) on stderr.
_PS = (
    "import resource, sys\n"
    "from enginespec.cli import main\n"
    "main(['ps', '--json'])\n"
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
)


def _ps(backend: str, path: str | None) -> tuple[float, int]:
    """Seconds and peak RSS (MiB) of one `enginespec ps --json` (health checked)."""
    env = {**os.environ, "ENGINESPEC_BACKEND": backend}
    if path:
        env["PYTHONPATH"] = path
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", _PS],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        timeout=1800,
        check=False,
    )
    seconds = time.perf_counter() - start
    words = out.stderr.split()
    return seconds, int(words[-1]) // 1024 if words and words[-1].isdigit() else -1


def _row(name: str, runs: dict[str, Callable[[], tuple[float, int]]], quiet: dict[str, float]) -> None:
    for label, run in runs.items():
        seconds, peak = run()
        ratio = seconds / quiet[label] if quiet[label] else float("nan")
        print(f"{name:<28} {label:<18} {seconds:8.2f} s  {ratio:7.1f}x quiet  peak RSS {peak} MiB")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--huge", type=int, default=60)
    parser.add_argument("--hung", type=int, default=1024)
    parser.add_argument("--floods", type=int, default=3)
    parser.add_argument("--compare", help="PYTHONPATH of another copy of the package (fallback backend)")
    args = parser.parse_args()
    runs: dict[str, Callable[[], tuple[float, int]]] = {
        "native": lambda: _ps("native", None),
        "python": lambda: _ps("python", None),
    }
    if args.compare:
        runs["compare (python)"] = lambda: _ps("python", args.compare)
    quiet = {label: run()[0] for label, run in runs.items()}
    with tempfile.TemporaryDirectory() as tmp:
        helper = _helper(Path(tmp))
        if args.huge:
            with _started(helper, [HUGE_ARGV] * args.huge):
                _row(f"{args.huge} x 100k arguments", runs, quiet)
        if args.hung:
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sock.listen(4096)
            port = str(sock.getsockname()[1])
            argvs = [["llama-server", "-m", f"m{n}", "--port", port] for n in range(args.hung)]
            with sock, _started(helper, argvs, (sock.fileno(),)):
                _row(f"{args.hung} hung engines", runs, quiet)
        if args.floods:
            stop = threading.Event()
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            port = str(sock.getsockname()[1])
            threading.Thread(target=_flood, args=(sock, stop), daemon=True).start()
            argvs = [["llama-server", "-m", f"f{n}", "--port", port] for n in range(args.floods)]
            try:
                with _started(helper, argvs, (sock.fileno(),)):
                    _row(f"{args.floods} x 400 MB answers", runs, quiet)
            finally:
                stop.set()
                sock.close()


if __name__ == "__main__":
    main()
