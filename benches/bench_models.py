"""Served-models benchmark: what asking each engine what it serves costs, and how late a model
loaded or unloaded shows in a watch.

Run from the repository root with the package installed:

    python benches/bench_models.py [--engines 20] [--rounds 5] [--flips 20]

Cost: ``--engines`` fake servers (real processes holding the socket a fake server of this process
answers on, as the tests' engines do), a third each llama.cpp routers (``GET /models``, four
models, one runner child each), Ollama servers (``/api/ps`` and ``/api/tags``) and vLLM servers
(``/v1/models`` and ``/is_sleeping``). It times, in the same run, the health checks ``ps`` makes
(``check_all``) against ``served_models_all`` on the same engines, and prints the ratio and the
milliseconds per engine.

Latency: one fake llama.cpp router whose answer says a model is loaded, then unloaded, ``--flips``
times; a watch with ``models`` (health interval 0.5 s and 2 s) tells each; prints the median and
worst time from the flip to its ``model_loaded`` / ``model_unloaded`` event (bounded by the health
interval: the router is asked once a round).
"""

from __future__ import annotations

import argparse
import json
import queue
import random
import statistics
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import enginespec
from bench_load import _pump, _timed  # a watch's events into a queue; the median of a job's rounds
from enginespec.health.checks import check_all
from enginespec.health.servedmodels import served_models_all
from helpers.fakeserver import Answer, bound_socket, free_port, serving
from helpers.procs import build_helper, running, wait_for

ARG = "\x1f"


def _json(document: object) -> Answer:
    return Answer(200, json.dumps(document).encode())


def _router_answer(ports: list[int]) -> Answer:
    data = [
        {
            "id": f"m{i}",
            "object": "model",
            "status": {"value": "loaded", "args": ["llama-server", "--port", str(p)]},
        }
        for i, p in enumerate(ports)
    ]
    return _json({"object": "list", "data": data})


def cost(engines: int, rounds: int) -> None:
    helper = build_helper(Path(tempfile.mkdtemp()))
    with ExitStack() as stack, running(helper) as procs:
        pids = []
        for index in range(engines):
            sock = bound_socket()
            port = sock.getsockname()[1]
            kind = index % 3
            if kind == 0:
                ports = [free_port() for _ in range(4)]
                routes = {"/health": [Answer(200)], "/models": [_router_answer(ports)]}
                children = "\x1e".join(
                    ARG.join(["llama-server", "-m", f"/m/m{i}.gguf", "--port", str(p)])
                    for i, p in enumerate(ports)
                )
                argv, env = (
                    ["llama-server", "--models-dir", "/m", "--port", str(port)],
                    {"HELPER_SPAWN": children},
                )
            elif kind == 1:
                ps = {
                    "models": [
                        {"name": f"m{i}:latest", "size_vram": 1 << 30, "expires_at": "2030-01-01T00:00:00Z"}
                        for i in range(4)
                    ]
                }
                tags = {"models": [{"name": f"m{i}:latest"} for i in range(8)]}
                routes = {
                    "/": [Answer(200, b"Ollama is running")],
                    "/api/ps": [_json(ps)],
                    "/api/tags": [_json(tags)],
                }
                argv, env = ["ollama", "serve"], {"OLLAMA_HOST": f"127.0.0.1:{port}"}
            else:
                listed = {"object": "list", "data": [{"id": "qwen", "object": "model"}]}
                routes = {
                    "/health": [Answer(200)],
                    "/v1/models": [_json(listed)],
                    "/is_sleeping": [_json({"is_sleeping": False})],
                }
                argv, env = (
                    ["vllm", "serve", "/models/q", "--served-model-name", "qwen", "--port", str(port)],
                    {},
                )
            stack.enter_context(serving(routes, sock=sock))
            pids.append(procs.start(argv, pass_fds=(sock.fileno(),), **env).pid)
        wait_for(lambda: {p.pid for p in enginespec.scan(listen_ports=False)} >= set(pids), timeout=60)
        scanned = enginespec.scan()
        servers = [p for p in scanned if p.pid in pids]
        health = _timed(lambda: check_all(servers), rounds)
        with_scan = _timed(lambda: served_models_all(servers, scanned=scanned), rounds)
        unscanned = _timed(lambda: served_models_all(servers), rounds)
        said = served_models_all(servers, scanned=scanned)
        assert all(r.available for r in said), [r.reason for r in said if not r.available]
    print(f"{engines} engines (llama.cpp routers with 4 runners, Ollama, vLLM), median of {rounds} rounds")
    print(f"  ps's health checks               {health * 1000:8.1f} ms")
    print(
        f"  served_models_all, with a scan   {with_scan * 1000:8.1f} ms   "
        f"x{with_scan / health:.2f} of health, {with_scan * 1000 / engines:.2f} ms per engine"
    )
    print(
        f"  served_models_all, no scan       {unscanned * 1000:8.1f} ms   "
        f"x{unscanned / health:.2f} of health, {unscanned * 1000 / engines:.2f} ms per engine "
        "(runners read from each router's children)"
    )


#: what the fake router says of its one model now
STATE = {"value": "unloaded"}


class _Router(BaseHTTPRequestHandler):
    """A llama.cpp router whose one model is loaded or not as :data:`STATE` says now."""

    def do_GET(self) -> None:
        data = [{"id": "flip", "object": "model", "status": {"value": STATE["value"], "args": []}}]
        body = json.dumps({"object": "list", "data": data}).encode() if self.path == "/models" else b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def latency(flips: int) -> None:
    helper = build_helper(Path(tempfile.mkdtemp()))
    sock = bound_socket()
    sock.listen(16)
    server = ThreadingHTTPServer(sock.getsockname(), _Router, bind_and_activate=False)
    server.socket.close()
    server.socket = sock
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with running(helper) as procs:
            router = procs.start(
                ["llama-server", "--models-dir", "/m", "--port", str(sock.getsockname()[1])],
                pass_fds=(sock.fileno(),),
            )
            wait_for(
                lambda: any(p.pid == router.pid for p in enginespec.scan(listen_ports=False)), timeout=30
            )
            for interval in (0.5, 2.0):
                STATE["value"] = "unloaded"
                watch = enginespec.Scanner().watch(
                    1.0, health=True, health_interval=interval, load=False, models=True
                )
                events: queue.Queue[enginespec.WatchEvent] = queue.Queue()
                threading.Thread(target=_pump, args=(watch, events), daemon=True).start()
                while not (
                    isinstance(e := events.get(timeout=30), enginespec.HealthChanged)
                    and e.process.pid == router.pid
                ):
                    pass
                seen = []
                for flip in range(flips):
                    wanted = "model_loaded" if flip % 2 == 0 else "model_unloaded"
                    time.sleep(random.uniform(0, interval))  # anywhere in the round
                    STATE["value"] = "loaded" if wanted == "model_loaded" else "unloaded"
                    flipped = time.monotonic()
                    while True:
                        event = events.get(timeout=interval * 4 + 10)
                        if isinstance(event, enginespec.ModelChanged) and event.type == wanted:
                            seen.append(time.monotonic() - flipped)
                            break
                watch.close()
                print(
                    f"health interval {interval:g}s: {len(seen)}/{flips} flips told, median "
                    f"{statistics.median(seen) * 1000:.0f} ms, worst {max(seen) * 1000:.0f} ms "
                    f"({statistics.median(seen) / interval:.2f} of the interval)"
                )
    finally:
        server.shutdown()
        sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--engines", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--flips", type=int, default=20)
    args = parser.parse_args()
    cost(args.engines, args.rounds)
    latency(args.flips)


if __name__ == "__main__":
    main()
