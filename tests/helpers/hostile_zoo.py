"""A zoo of hostile processes of user `nobody`: every attack of the "hostile facts" rounds, alive on
this host while the test suite runs (`.ci/run`'s hostile-host step). Run as root:

    python tests/helpers/hostile_zoo.py start DIR   # starts the zoo; DIR/pids lists exactly its processes
    python tests/helpers/hostile_zoo.py start DIR --without-files   # no attacks through config files
    python tests/helpers/hostile_zoo.py stop DIR    # kills exactly those (pid and start time), cleans up

Everything stays on 127.0.0.0/8 and in this process's own cgroup (the one delegated cgroup made for
the cgroup-name attack is below it and removed at `stop`). The zoo's fake engines use ports the
suite's fixed-port tests use too (8000, 8080, 30000): the suite must pass beside them.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOBODY = pwd.getpwnam("nobody")
SYSTEM_PYTHON = "/usr/bin/python3"

#: A root server (the victim: what a fake engine would like to be reported as): HTTP on 127.0.0.1
#: and on a root-only unix socket, answering every request as a ready llama-server would.
_VICTIM = r"""
import os, socket, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import socketserver
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"status":"ok","data":[{"id":"victim"}]}'
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
class U(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
tcp = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H)
unix = U(sys.argv[2], H)
os.chmod(sys.argv[2], 0o600)
threading.Thread(target=unix.serve_forever, daemon=True).start()
print("ready", flush=True)
tcp.serve_forever()
"""

#: nobody's flood: answers /health with 400 MB, streamed, on the socket it is given (argv[1]).
_FLOOD = r"""
import os, socket, sys, threading
sock = socket.socket(fileno=int(sys.argv[1]))
sock.listen(64)
chunk = b"0" * 65536
def answer(conn):
    with conn:
        try:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 400000000\r\n\r\n")
            for _ in range(400000000 // 65536):
                conn.sendall(chunk)
        except OSError:
            pass
while True:
    conn, _ = sock.accept()
    threading.Thread(target=answer, args=(conn,), daemon=True).start()
"""

#: nobody's flipper: swaps a config link between its own file and a root-only one.
_FLIPPER = r"""
import os, sys, time
link, mine, theirs = sys.argv[1:4]
while True:
    for target in (mine, theirs):
        tmp = link + ".tmp"
        try:
            os.symlink(target, tmp)
            os.rename(tmp, link)
        except OSError:
            pass
        time.sleep(0.01)
"""


#: nobody's agent clients: every agent (`enginespec agent --listen 127.x:PORT`, found by its
#: world-readable argv) gets 64 connections that never send a byte, 2 that send half a request
#: head, and 40 event streams that are never read: more than one client may hold of either, and
#: more than the old agent served everyone together (64 connections, 32 streams). The agent closes
#: what sends no head in time: they are opened again, for as long as the agent runs.
_AGENT_HOG = r"""
import os, re, socket, time
held = {}
def agents():
    found = set()
    for pid in os.listdir("/proc"):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if not {"agent", "serve"} & set(argv):
            continue
        for flag, value in zip(argv, argv[1:] + [""]):
            text = value if flag == "--listen" else flag[9:] if flag.startswith("--listen=") else ""
            match = re.fullmatch(r"(127(?:\.\d+){3}):(\d+)", text)
            if match and match[2] != "0":
                found.add((match[1], int(match[2])))
    return found
def opened(target, request):
    try:
        sock = socket.create_connection(target, timeout=2)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(request)
        return sock
    except OSError:
        return None
while True:
    targets = agents()
    for target in list(held):
        if target not in targets:
            for sock in held.pop(target):
                sock.close()
    for target in targets:
        socks = [s for s in held.get(target, []) if s.fileno() >= 0]
        alive = []
        for sock in socks:
            try:
                gone = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
            except BlockingIOError:
                gone = False
            except OSError:
                gone = True
            if gone:
                sock.close()
            else:
                alive.append(sock)
        wanted = [b""] * 64 + [b"GET /v1/engines HTTP/1.1\r\nho"] * 2
        wanted += [b"GET /v1/events HTTP/1.1\r\nhost: x\r\n\r\n"] * 40
        for request in wanted[len(alive):]:
            sock = opened(target, request)
            if sock is not None:
                alive.append(sock)
        held[target] = alive
    time.sleep(1)
"""


#: nobody's liar (issue 44): answers every request on each socket it is given (argv: FD:MODE...)
#: with a body no reader may take whole: nested 100,000 deep, 900 KB of values, numbers that are
#: not finite, or /metrics samples of 1e308 that add up to infinity.
_LIAR = r"""
import socket, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
DEEP = b"[" * 100000 + b"]" * 100000
BODIES = {
    "deep": DEEP,
    "wide": b'{"status":"ok","data":[' + b",".join([b"0"] * 400000) + b"]}",
    "infinite": b'{"status":"ok","models":[{"name":"m","size":1e400}],"data":[{"id":"m","n":NaN}]}',
}
METRICS = b"".join(
    b'vllm:%s{engine="%d"} 1e308\n' % (name, n)
    for name in (b"num_requests_running", b"num_requests_waiting", b"generation_tokens_total")
    for n in range(2)
)
def handler(mode):
    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            if mode == "metrics":
                body = METRICS if self.path == "/metrics" else b""
            else:
                body = BODIES[mode]
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        do_POST = do_GET
        def log_message(self, *a): pass
    return H
for spec in sys.argv[1:]:
    fd, mode = spec.split(":")
    sock = socket.socket(fileno=int(fd))
    server = ThreadingHTTPServer(sock.getsockname(), handler(mode), bind_and_activate=False)
    server.socket.close()
    server.socket = sock
    server.server_activate()
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
threading.Event().wait()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_nobody() -> dict[str, object]:
    return {"user": NOBODY.pw_uid, "group": NOBODY.pw_gid, "extra_groups": []}


class Zoo:
    def __init__(self, directory: Path, files: bool = True) -> None:
        self.dir = directory
        #: whether the attacks through files a process names (configs) are started too
        self.files = files
        self.pids: list[int] = []
        self.cgroups: list[Path] = []

    def _spawn(
        self, argv: list[str], executable: str | None = None, nobody: bool = True, **kw: object
    ) -> subprocess.Popen[bytes]:
        env = {"PATH": "/usr/bin:/bin", **kw.pop("env", {})}  # type: ignore[dict-item]
        proc = subprocess.Popen(
            argv,
            executable=executable or str(self.idle),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=kw.pop("stdout", subprocess.DEVNULL),  # type: ignore[arg-type]
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            cwd=kw.pop("cwd", str(self.dir)),  # type: ignore[arg-type]
            **(_as_nobody() if nobody else {}),
            **kw,  # type: ignore[arg-type]
        )
        self.pids.append(proc.pid)
        return proc

    def engine(self, *argv: str, **kw: object) -> subprocess.Popen[bytes]:
        return self._spawn(list(argv), **kw)

    def start(self) -> None:
        d = self.dir
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o755)
        own = d / "nobody"
        own.mkdir(exist_ok=True)
        shutil.chown(own, NOBODY.pw_uid, NOBODY.pw_gid)
        self.idle = d / "idle"
        subprocess.run(["gcc", "-O1", "-o", str(self.idle), str(HERE / "idle.c")], check=True, timeout=120)
        self.idle.chmod(0o755)
        # The victim (root): a ready server on 127.0.0.1 and on a root-only unix socket.
        private = d / "root-only"
        private.mkdir(mode=0o700, exist_ok=True)
        victim_port = _free_port()
        victim_sock = str(private / "victim.sock")
        victim = self._spawn(
            [sys.executable, "-c", _VICTIM, str(victim_port), victim_sock],
            executable=sys.executable,
            nobody=False,
            stdout=subprocess.PIPE,
        )
        assert victim.stdout is not None
        victim.stdout.readline()
        port = str(victim_port)

        if self.files:
            self._file_attacks(own, private)
            self._model_attacks(own)
        self._network_attacks(victim_sock, port)
        self._answer_attacks()
        time.sleep(0.5)

    def _file_attacks(self, own: Path, private: Path) -> None:
        n = str(own)
        # 1. configs that block on read
        os.mkfifo(f"{n}/fifo.yaml")
        self.engine("vllm", "serve", "--config", f"{n}/fifo.yaml")
        self.engine("vllm", "serve", "--config", "/dev/ptmx")
        self.engine("sglang", "serve", "--config", "/dev/tty")
        tabby = own / "tabby"
        for path in ("common/args.py", "common/tabby_config.py", "endpoints/core/router.py", "main.py"):
            (tabby / path).parent.mkdir(parents=True, exist_ok=True)
            (tabby / path).write_text("")
        os.mkfifo(tabby / "config.yml")
        self.engine("python3", "main.py", cwd=str(tabby))
        # 2, 4, 8, 17: configs that parse badly (deep, huge integers, surrogates, aliases, slow)
        configs = {
            "deep.yaml": "model: " + "[" * 5000 + "]" * 5000 + "\n",
            "digits.yaml": "model: m\nport: " + "9" * 5000 + "\n",
            "surrogate.yaml": 'model: "\\ud800"\n',
            "aliases.yaml": "a: &a [x,x,x,x,x,x,x,x,x,x]\n"
            + "".join(
                f"{c}: &{c} [{','.join(['*' + p] * 10)}]\n"
                for p, c in zip("abcdefgh", "bcdefghi", strict=True)
            )
            + "model: *i\n",
            "slow.yaml": "".join(f"k{i}: {{a: [1, 2, {{b: c}}]}}\n" for i in range(40_000)),
        }
        for name, text in configs.items():
            (own / name).write_text(text)
            self.engine("vllm", "serve", "--config", f"{n}/{name}")
        # 3. ports of Unicode digits, in the environment and a config
        self.engine("llama-server", "-m", "m.gguf", env={"LLAMA_ARG_PORT": "²"})
        self.engine("text-generation-launcher", "--model-id", "m", env={"PORT": "\uff12"})
        (own / "uport.yaml").write_text("model: m\nport: '²'\n")
        self.engine("vllm", "serve", "--config", f"{n}/uport.yaml")
        # 5, 6, 7: files the owner cannot read: in a root-only directory, the scanner's own cwd,
        # a link flipped between its own file and a root-only one, an absolute link
        (private / "x.yaml").write_text("model: root-secret\n")
        (private / "x.yaml").chmod(0o644)
        self.engine("vllm", "serve", "--config", str(private / "x.yaml"))
        self.engine("vllm", "serve", "--config", "/proc/self/cwd/x.yaml")
        (own / "mine.yaml").write_text("model: mine\n")
        (own / "flip.yaml").symlink_to(own / "mine.yaml")
        self.engine("vllm", "serve", "--config", f"{n}/flip.yaml")
        if os.access(SYSTEM_PYTHON, os.X_OK):
            args = [f"{n}/flip.yaml", f"{n}/mine.yaml", "/etc/shadow"]
            self._spawn([SYSTEM_PYTHON, "-c", _FLIPPER, *args], executable=SYSTEM_PYTHON)
        (own / "abs.yaml").symlink_to("/etc/shadow")
        self.engine("vllm", "serve", "--config", f"{n}/abs.yaml")

    def _model_attacks(self, own: Path) -> None:
        """Issue 44: engines naming model files whose numbers no estimate may take (a
        400-digit integer in config.json, a safetensors offset of 10**400), argv numbers that
        are not finite, and 4,096 links to one safetensors header."""
        config = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}

        def folder(name: str, config_text: str, header: bytes | None = None) -> Path:
            path = own / name
            path.mkdir(exist_ok=True)
            (path / "config.json").write_text(config_text)
            if header is not None:
                length = len(header).to_bytes(8, "little")
                (path / "model.safetensors").write_bytes(length + header + bytes(64))
            return path

        good = json.dumps(config)
        long = folder("long-int", good.replace('"hidden_size": 64', '"hidden_size": 1' + "0" * 399))
        self.engine("vllm", "serve", str(long), "--port", "8000")
        offset = b'{"w":{"dtype":"F16","shape":[2],"data_offsets":[0,1' + b"0" * 400 + b"]}}"
        self.engine("vllm", "serve", str(folder("offset", good, offset)), "--port", "8000")
        plain = folder("plain", good, b'{"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}')
        for value in ("1e400", "nan", "-inf"):
            self.engine("vllm", "serve", str(plain), "--max-model-len", value, "--port", "8000")
        self.engine("vllm", "serve", str(plain), "--gpu-memory-utilization", "inf", "--port", "8000")
        self.engine("llama-server", "-m", "m.gguf", "-c", "1" + "0" * 399, "-ts", "1e400,nan")
        links = folder("links", good)
        weight_map = {}
        for n in range(4096):
            name = f"model-{n:05d}-of-04096.safetensors"
            os.link(plain / "model.safetensors", links / name)
            weight_map[f"layer{n}"] = name
        (links / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
        self.engine("vllm", "serve", str(links), "--port", "8000")

    def _answer_attacks(self) -> None:
        """Issue 44: engines of nobody whose answers no reader may take whole (see _LIAR)."""
        if not os.access(SYSTEM_PYTHON, os.X_OK):
            return
        socks = {mode: socket.socket() for mode in ("deep", "wide", "infinite", "metrics")}
        for sock in socks.values():
            sock.bind(("127.0.0.1", 0))
            sock.set_inheritable(True)
        fds = tuple(sock.fileno() for sock in socks.values())
        specs = [f"{sock.fileno()}:{mode}" for mode, sock in socks.items()]
        self._spawn([SYSTEM_PYTHON, "-c", _LIAR, *specs], executable=SYSTEM_PYTHON, pass_fds=fds)
        for mode, sock in socks.items():
            port = str(sock.getsockname()[1])
            held = (sock.fileno(),)
            if mode == "metrics":
                self.engine("vllm", "serve", "/m/metrics", "--port", port, pass_fds=held)
                continue
            self.engine("llama-server", "-m", f"{mode}.gguf", "--port", port, pass_fds=held)
            self.engine("python3", "-m", "llama_cpp.server", "--model", mode, "--port", port, pass_fds=held)
            self.engine("ollama", "serve", env={"OLLAMA_HOST": f"127.0.0.1:{port}"}, pass_fds=held)
        for sock in socks.values():
            sock.close()

    def _network_attacks(self, victim_sock: str, port: str) -> None:
        d = self.dir
        # 9: a root-only socket named by --host and by LLAMA_ARG_HOST
        self.engine("llama-server", "-m", "m.gguf", "--host", victim_sock)
        self.engine("llama-server", "-m", "m.gguf", env={"LLAMA_ARG_HOST": victim_sock})
        # 10, 11, 12: remote hosts, names, other spellings of loopback, numbers that crash URLs
        for host in ("169.254.169.254", "10.0.0.7", "evil.example", "127.1", "127.0.1", "2130706433",
                     "0x7f000001", "::ffff:127.0.0.1", "0177.0.0.1", "256.0.0.1", "localhost"):  # fmt: skip
            self.engine("llama-server", "-m", "m.gguf", "--host", host, "--port", port)
            self.engine("vllm", "serve", "/m", "--host", host, "--port", port)
        # fake engines on the ports real ones default to, listening or not
        for listen in ("127.0.0.1:8000", "127.0.0.1:8081"):
            self.engine(
                "vllm", "serve", "/m", "--port", listen.rsplit(":", 1)[1], env={"HELPER_LISTEN": listen}
            )
        self.engine("sglang", "serve", "--model-path", "/m")
        self.engine("llama-server", "-m", "m.gguf")
        # 13: a network namespace of nobody's own, the victim's port and a container's address
        if shutil.which("unshare") and shutil.which("ip"):
            address = f"127.77.{secrets.randbelow(200) + 1}.2"
            (d / "bin").mkdir(exist_ok=True)
            vllm = d / "bin" / "vllm"
            if not vllm.exists():
                vllm.symlink_to(self.idle)
            script = f"ip link set lo up; ip addr add {address}/8 dev lo; exec {vllm} serve /m --port {port}"
            self._spawn(["unshare", "-rn", "sh", "-c", script], executable=shutil.which("unshare"))
        # 14: engines behind a server that answers 400 MB
        flood = socket.socket()
        flood.bind(("127.0.0.1", 0))
        flood.set_inheritable(True)
        flood_port = str(flood.getsockname()[1])
        if os.access(SYSTEM_PYTHON, os.X_OK):
            fd = flood.fileno()
            self._spawn([SYSTEM_PYTHON, "-c", _FLOOD, str(fd)], executable=SYSTEM_PYTHON, pass_fds=(fd,))
        for i in range(3):
            self.engine("llama-server", "-m", f"flood{i}", "--port", flood_port, pass_fds=(flood.fileno(),))
        # 15: engines behind a port that accepts and never answers
        hung = socket.socket()
        hung.bind(("127.0.0.1", 0))
        hung.listen(4096)
        hung_port = str(hung.getsockname()[1])
        for i in range(64):
            self.engine("llama-server", "-m", f"hung{i}", "--port", hung_port, pass_fds=(hung.fileno(),))
        hung.close()
        flood.close()
        # 16: engines of 100,002 arguments
        huge = ["vllm", "serve", *(["--enforce-eager"] * 50_000), *(["x"] * 49_998), "--port", "8123"]
        for _ in range(10):
            self.engine(*huge)
        # 18: a delegated cgroup named as a real container's scope
        self._cgroup_claim()
        # issue 44: idle connections and never-read event streams at every agent on loopback
        if os.access(SYSTEM_PYTHON, os.X_OK):
            self._spawn([SYSTEM_PYTHON, "-c", _AGENT_HOG], executable=SYSTEM_PYTHON)

    def _cgroup_claim(self) -> None:
        line = next(
            (x for x in Path("/proc/self/cgroup").read_text().splitlines() if x.startswith("0::")), None
        )
        mount = Path("/sys/fs/cgroup")
        if line is None or not (mount / "cgroup.controllers").exists():
            return
        base = mount / line[3:].lstrip("/")
        delegated = base / f"enginespec-zoo-{os.getpid()}"
        scope = delegated / f"docker-{secrets.token_hex(32)}.scope"
        try:
            scope.mkdir(parents=True)
        except OSError:
            return
        self.cgroups += [scope, delegated]
        for path in (delegated, scope):
            for name in ("", "cgroup.procs"):
                with_name = path / name if name else path
                if with_name.exists():
                    os.chown(with_name, NOBODY.pw_uid, NOBODY.pw_gid)
        proc = self.engine("vllm", "serve", "/m/claims-a-container", "--port", "8000")
        with contextlib.suppress(OSError):
            (scope / "cgroup.procs").write_text(str(proc.pid))

    def save(self) -> None:
        entries = []
        for pid in self.pids:
            try:
                start = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
            except (OSError, IndexError):
                continue
            entries.append({"pid": pid, "start": start})
        state = {"processes": entries, "cgroups": [str(c) for c in self.cgroups]}
        (self.dir / "zoo.json").write_text(json.dumps(state))
        (self.dir / "pids").write_text("".join(f"{e['pid']}\n" for e in entries))


def stop(directory: Path) -> None:
    """Kills exactly the zoo's processes (each checked by its start time: a pid reused since is
    left alone), and their process groups' (children each started), then removes the zoo."""
    state = json.loads((directory / "zoo.json").read_text())
    for entry in state["processes"]:
        pid = entry["pid"]
        try:
            start = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        except (OSError, IndexError):
            continue
        if start != entry["start"]:
            continue
        # Its group first (a shell's or a shim's children), then itself.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    for path in map(Path, state["cgroups"]):
        while path.exists() and time.monotonic() < deadline:
            try:
                path.rmdir()
            except OSError:
                time.sleep(0.05)
    shutil.rmtree(directory, ignore_errors=True)


def main() -> int:
    command, directory = sys.argv[1], Path(sys.argv[2])
    if command == "start":
        zoo = Zoo(directory, files="--without-files" not in sys.argv[3:])
        try:
            zoo.start()
        finally:
            zoo.save()
        print(f"hostile zoo: {len(zoo.pids)} processes of nobody (and the root victim) in {directory}")
        return 0
    if command == "stop":
        stop(directory)
        return 0
    print("usage: hostile_zoo.py start|stop DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
