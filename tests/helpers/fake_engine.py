"""A fake llama-server for the lifecycle tests, installed as an executable named `llama-server`
(see lifecycle_helpers.install_fake). What it does is chosen by FAKE_MODE:

- serve: listens on --host/--port, answers /health 503 while "loading" (FAKE_LOAD seconds), then
  200; a port it cannot bind is llama-server's `couldn't bind HTTP server socket` and exit 1.
- replay: writes the file FAKE_LOG to stderr, then exits with FAKE_EXIT or kills itself with
  FAKE_SIGNAL.
- grandchild: serve, after forking a grandchild that calls setsid() and sleeps (its pid written
  to FAKE_PIDFILE).
- stubborn: serve, ignoring SIGTERM.
- unavailable: writes FAKE_LOG to stderr, then serves /health 503 `unavailable` for ever (a
  server that stays up after its model failed to load, as mlx_lm.server does).
- flood: writes FAKE_LINES numbered lines to stdout and stderr as fast as it can, then exits 0.
- huge: writes FAKE_HUGE lines of FAKE_HUGE_MB MiB each to stdout (no newline but the last
  byte of each), then serves.
- held: puts an fd of the file FAKE_HELD on its stdout and stderr, O_PATH (FAKE_HELD_MODE=path,
  the default) or O_WRONLY (=write), then waits (output that "goes" to a file it may not read).
- swap: serves; on SIGTERM, renames its working directory away, puts a symlink to FAKE_SWAP_TO
  in its place, and exits (a working directory swapped between a restart's stop and start).
With FAKE_TICK, every mode also prints `tick N` to stdout every FAKE_TICK seconds.
Every mode gives up after FAKE_LIFETIME seconds (default 120): no test leaves it running.
"""

import http.server
import os
import signal
import sys
import threading
import time


def arg(name, default):
    argv = sys.argv[1:]
    return argv[argv.index(name) + 1] if name in argv else default


def serve():
    host, port = arg("--host", "127.0.0.1"), int(arg("--port", "8080"))
    ready_at = time.monotonic() + float(os.environ.get("FAKE_LOAD", "0.3"))

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ready = time.monotonic() >= ready_at
            body = b'{"status":"ok"}' if ready else b'{"error":{"code":503,"message":"Loading model"}}'
            if "FAKE_UNAVAILABLE" in os.environ:
                ready, body = False, b'{"status":"unavailable"}'
            self.send_response(200 if ready else 503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    http.server.ThreadingHTTPServer.allow_reuse_address = True
    try:
        server = http.server.ThreadingHTTPServer((host, port), Handler)
    except OSError:
        print(
            f"main: couldn't bind HTTP server socket, hostname: {host}, port: {port}",
            file=sys.stderr,
            flush=True,
        )
        os._exit(1)
    print(
        f"main: server is listening on http://{host}:{port} - starting the main loop",
        file=sys.stderr,
        flush=True,
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    while True:
        time.sleep(1)


def tick(every):
    for n in range(1_000_000):
        print(f"tick {n}", flush=True)
        time.sleep(every)


def main():
    timer = threading.Timer(float(os.environ.get("FAKE_LIFETIME", "120")), lambda: os._exit(3))
    timer.daemon = True
    timer.start()
    mode = os.environ.get("FAKE_MODE", "serve")
    if "FAKE_TICK" in os.environ:
        threading.Thread(target=tick, args=(float(os.environ["FAKE_TICK"]),), daemon=True).start()
    print(f"fake llama-server pid {os.getpid()} mode {mode} argv {sys.argv[1:]}", flush=True)
    if mode == "replay":
        with open(os.environ["FAKE_LOG"], "rb") as file:
            sys.stderr.buffer.write(file.read())
        sys.stderr.flush()
        if "FAKE_SIGNAL" in os.environ:
            os.kill(os.getpid(), int(os.environ["FAKE_SIGNAL"]))
            time.sleep(5)
        os._exit(int(os.environ.get("FAKE_EXIT", "1")))
    if mode == "flood":
        count = int(os.environ.get("FAKE_LINES", "50000"))
        out, err = sys.stdout.buffer, sys.stderr.buffer
        for start in range(0, count, 100):
            block = b"".join(b"line %d\n" % n for n in range(start, min(start + 100, count)))
            (out if start % 200 == 0 else err).write(block)
        out.flush()
        err.flush()
        os._exit(0)
    if mode == "huge":
        block = b"x" * (1 << 20)
        for _ in range(int(os.environ.get("FAKE_HUGE", "3"))):
            for _ in range(int(os.environ.get("FAKE_HUGE_MB", "100")) - 1):
                sys.stdout.buffer.write(block)
            sys.stdout.buffer.write(block[:-1] + b"\n")
        sys.stdout.flush()
    if mode == "held":
        flags = os.O_PATH if os.environ.get("FAKE_HELD_MODE", "path") == "path" else os.O_WRONLY
        held = os.open(os.environ["FAKE_HELD"], flags)
        os.dup2(held, 1)
        os.dup2(held, 2)
        while True:
            time.sleep(1)
    if mode == "swap":
        here = os.getcwd()

        def swap(*_args):
            os.rename(here, here + ".away")
            os.symlink(os.environ["FAKE_SWAP_TO"], here)
            os._exit(0)

        signal.signal(signal.SIGTERM, swap)
    if mode == "grandchild":
        child = os.fork()
        if child == 0:
            os.setsid()
            grandchild = os.fork()
            if grandchild == 0:
                with open(os.environ["FAKE_PIDFILE"], "w") as file:
                    file.write(str(os.getpid()))
                time.sleep(float(os.environ.get("FAKE_LIFETIME", "120")))
                os._exit(0)
            os._exit(0)
        os.waitpid(child, 0)
    if mode == "unavailable":
        with open(os.environ["FAKE_LOG"], "rb") as file:
            sys.stderr.buffer.write(file.read())
        sys.stderr.flush()
        os.environ["FAKE_UNAVAILABLE"] = "1"
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    serve()


main()
