"""Load benchmark: what reading load adds, and the opt-in long runs of the load checks.

Run from the repository root with the package installed:

    python benches/bench_load.py [--engines 20] [--rounds 5]
    python benches/bench_load.py --kills 100     # worker kills through a watch (root: process events)
    python benches/bench_load.py --soak 600      # a 10-minute saturation soak

Default: ``--engines`` fake vLLM servers on loopback (threads of this process) answering
``/health`` and a realistic ``/metrics`` (two engine cores, every histogram: ~60 kB). It times, in
the same run, the health checks ``ps`` makes (``check_all``) against ``ps --load`` (the same plus
two ``check_load_all`` readings, the wait between them left out) and the exporter's refresh
without load (``check_all``) against with load (``EngineMonitor.check``), and both again with
vLLM's latency figures undeclared (what reading its histograms adds), and prints the ratios and
the added milliseconds per engine.

``--kills N``: a process standing for ``vllm serve`` with N children retitled ``VLLM::Worker_TP*``;
each is killed with SIGKILL in turn, and the latency to the watch's ``worker_lost`` event is
measured, for a watch driven by the kernel's process events and for one that polls; prints
reported/killed, median and worst latency.

``--soak SECONDS``: a server whose ``/health`` misses its timeout while its tokens advance,
checked by an EngineMonitor for SECONDS; prints the verdicts by state (expected: all ``busy``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import enginespec
import enginespec.health.reaching as reaching
from enginespec.definition.records import EngineDefinition, LatencyMetrics
from enginespec.definition.registry import find_engine
from enginespec.health.checks import check_all
from enginespec.health.load import check_load_all
from enginespec.health.vitals import EngineMonitor
from helpers.fakeserver import Answer, bound_socket, serving
from helpers.loadkit import TEXT, engine_for, vllm_metrics
from helpers.procs import build_helper, running, wait_for


def _realistic(generated: float) -> bytes:
    """vLLM's answer with its histograms (what makes it large)."""
    body = vllm_metrics(generated).decode()
    for name in ("time_to_first_token_seconds", "e2e_request_latency_seconds", "request_queue_time_seconds"):
        for engine in ("0", "1"):
            for bucket in range(40):
                labels = f'engine="{engine}",le="{bucket * 0.25}",model_name="m"'
                body += f"vllm:{name}_bucket{{{labels}}} {bucket}.0\n"
    return body.encode()


def _timed(job: object, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        job()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def cost(engines: int, rounds: int) -> None:
    answers = [Answer(200, _realistic(float(100 * i)), content_type=TEXT) for i in range(rounds * 8 + 8)]
    with ExitStack() as stack:
        servers = [
            stack.enter_context(serving({"/health": [Answer(200)], "/metrics": list(answers)}))
            for _ in range(engines)
        ]
        processes = [engine_for("vllm", s.url) for s in servers]
        size = len(answers[0].body)
        health = _timed(lambda: check_all(processes), rounds)

        def ps_load() -> None:
            check_all(processes)
            first = check_load_all(processes)
            check_load_all(processes, previous=first)

        with_load = _timed(ps_load, rounds)
        monitor = EngineMonitor()
        monitor.check(processes)
        exporter_load = _timed(lambda: monitor.check(processes), rounds)
        # the same readings with vLLM's latency figures undeclared (its histograms not parsed):
        # what the latency figures add to each reading
        without = _without_latency("vllm")
        with mock.patch.object(
            reaching, "find_engine", lambda engine: without if engine == "vllm" else find_engine(engine)
        ):
            no_latency = _timed(ps_load, rounds)
            monitor = EngineMonitor()
            monitor.check(processes)
            exporter_no_latency = _timed(lambda: monitor.check(processes), rounds)
    print(f"{engines} engines, /metrics answer {size / 1000:.0f} kB, median of {rounds} rounds")
    print(f"  ps (health only)          {health * 1000:8.1f} ms")
    print(
        f"  ps --load (+2 readings)   {with_load * 1000:8.1f} ms   x{with_load / health:.2f}, "
        f"+{(with_load - health) * 1000 / engines:.2f} ms per engine"
    )
    print(
        f"  exporter refresh + load   {exporter_load * 1000:8.1f} ms   x{exporter_load / health:.2f}, "
        f"+{(exporter_load - health) * 1000 / engines:.2f} ms per engine"
    )
    print("  the same without the latency figures (vLLM's histograms not read):")
    print(
        f"  ps --load                 {no_latency * 1000:8.1f} ms   latency adds "
        f"x{with_load / no_latency:.2f}, "
        f"+{(with_load - no_latency) * 1000 / engines:.2f} ms per engine"
    )
    print(
        f"  exporter refresh + load   {exporter_no_latency * 1000:8.1f} ms   latency adds "
        f"x{exporter_load / exporter_no_latency:.2f}, "
        f"+{(exporter_load - exporter_no_latency) * 1000 / engines:.2f} ms per engine"
    )


def _without_latency(engine: str) -> EngineDefinition:
    spec = find_engine(engine)
    load = spec.load.model_copy(update={"latency": LatencyMetrics()})
    return spec.model_copy(update={"load": load})


def _pump(watch: enginespec.Watch, events: queue.Queue[enginespec.WatchEvent]) -> None:
    for event in watch:
        events.put(event)


def kills(count: int) -> None:
    helper = build_helper(Path(tempfile.mkdtemp()))
    sock = bound_socket()
    titles = [f"VLLM::Worker_TP{i}" for i in range(count)]
    routes = {"/health": [Answer(200)], "/metrics": [Answer(200, vllm_metrics(1.0), content_type=TEXT)]}
    with serving(routes, sock=sock), running(helper) as procs:
        proc = procs.start(
            ["vllm", "serve", "/models/m", "--port", str(sock.getsockname()[1])],
            pass_fds=(sock.fileno(),),
            HELPER_CHILD_TITLES=",".join(["=", *titles]),
        )
        by_title: dict[str, int] = {}

        def titled() -> bool:
            found = [p for p in enginespec.scan(listen_ports=False) if p.pid == proc.pid]
            by_title.clear()
            for pid in found[0].worker_pids if found else ():
                with contextlib.suppress(OSError):
                    by_title[Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()] = pid
            return all(t in by_title for t in titles)

        wait_for(titled, timeout=60)
        half = count // 2
        for mode, batch in (("events", titles[:half]), ("poll", titles[half:])):
            watch = enginespec.Scanner().watch(1.0, health=True, health_interval=0.5, poll=mode == "poll")
            events: queue.Queue[enginespec.WatchEvent] = queue.Queue()
            threading.Thread(target=_pump, args=(watch, events), daemon=True).start()
            while True:  # the monitor remembers the workers at the server's first ready check
                event = events.get(timeout=30)
                if isinstance(event, enginespec.HealthChanged) and event.process.pid == proc.pid:
                    break
            latencies, reported = [], 0
            for title in batch:
                pid = by_title[title]
                # at a random moment: a kill right after the event of the previous one would meet
                # the watch's 50 ms look at its workers always at the same point of its period
                time.sleep(random.uniform(0, 0.1))
                begin = time.monotonic()
                os.kill(pid, signal.SIGKILL)
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    try:
                        event = events.get(timeout=max(deadline - time.monotonic(), 0.01))
                    except queue.Empty:
                        break
                    if isinstance(event, enginespec.WorkerLost) and event.worker.pid == pid:
                        latencies.append(event.monotonic - begin)
                        reported += 1
                        break
            watch.close()
            shown = (
                f"median {statistics.median(latencies) * 1000:.0f} ms, worst {max(latencies) * 1000:.0f} ms"
                if latencies
                else ""
            )
            print(f"{mode:6} ({watch.mode}): {reported}/{len(batch)} kills reported; {shown}")


def soak(seconds: float) -> None:
    sock = bound_socket()
    advancing = [
        Answer(200, vllm_metrics(float(10 * i)), content_type=TEXT) for i in range(int(seconds * 10) + 100)
    ]
    routes = {"/health": [Answer(200, delay=3.0)], "/metrics": advancing}
    helper = build_helper(Path(tempfile.mkdtemp()))
    with serving(routes, sock=sock), running(helper) as procs:
        proc = procs.start(
            ["vllm", "serve", "/models/m", "--port", str(sock.getsockname()[1])], pass_fds=(sock.fileno(),)
        )
        process = next(p for p in enginespec.scan(listen_ports=False) if p.pid == proc.pid)
        monitor = EngineMonitor(timeout=1.0)
        counts: dict[str, int] = {}
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            state = monitor.check([process])[0].health.state
            counts[state] = counts.get(state, 0) + 1
    print(f"soak {seconds:g}s, /health slower than its 1s timeout, tokens advancing: {counts}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engines", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--kills", type=int, default=0)
    parser.add_argument("--soak", type=float, default=0.0)
    args = parser.parse_args()
    if args.kills:
        kills(args.kills)
    elif args.soak:
        soak(args.soak)
    else:
        cost(args.engines, args.rounds)


if __name__ == "__main__":
    main()
