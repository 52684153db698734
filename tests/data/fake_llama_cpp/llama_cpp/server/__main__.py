"""`python -m llama_cpp.server --host H --port P [--model_alias A]`, as the real one is launched,
answering /v1/models as llama-cpp-python 0.3.35 does (app.py get_models). With `--config_file F`
(or CONFIG_FILE, over it), the models of F's `models` entries, held one at a time as its
LlamaProxy holds them (llama_cpp/server/model.py): the first at start, another when a POST to
/v1/chat/completions names its alias (the one before closed first); each model file mapped whole
(as llama.cpp maps a GGUF), or read without a mapping for an entry with `"use_mmap": false`.
For the port tests: FAKE_REUSEPORT=1 sets SO_REUSEPORT (as vLLM and llama-server --reuse-port
do); FAKE_NO_LISTEN=1 stays up listening on nothing (as a second mlx_lm.server whose bind
failed); FAKE_EXIT=N exits with status N after FAKE_EXIT_AFTER seconds."""

from __future__ import annotations

import argparse
import json
import mmap
import os
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer


class Proxy:
    """The models of a config (alias -> entry) and the one held now, mapped or read."""

    def __init__(self, entries: list[dict[str, object]]) -> None:
        self.entries = {str(e.get("model_alias") or e["model"]): e for e in entries}
        self.held: object = None
        self.load(next(iter(self.entries)))

    def load(self, alias: str) -> None:
        entry = self.entries.get(alias) or next(iter(self.entries.values()))
        if isinstance(self.held, mmap.mmap):
            self.held.close()
        self.held = None
        with open(str(entry["model"]), "rb") as file:
            self.held = (
                file.read()
                if entry.get("use_mmap") is False
                else mmap.mmap(file.fileno(), 0, prot=mmap.PROT_READ)
            )


class Handler(BaseHTTPRequestHandler):
    alias = "fake"
    proxy: Proxy | None = None

    def do_POST(self) -> None:
        asked = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if self.proxy is not None and self.path == "/v1/chat/completions":
            self.proxy.load(str(asked.get("model")))
        body = json.dumps({"choices": [{"message": {"content": "ok"}}]}).encode()
        self.send_response(200 if self.path == "/v1/chat/completions" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        aliases = list(self.proxy.entries) if self.proxy is not None else [self.alias]
        listed = [{"id": alias, "object": "model", "owned_by": "me", "permissions": []} for alias in aliases]
        body = json.dumps({"object": "list", "data": listed}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class Server(HTTPServer):
    def server_bind(self) -> None:
        if os.environ.get("FAKE_REUSEPORT"):
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        super().server_bind()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="localhost")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default="fake")
    parser.add_argument("--model_alias")
    parser.add_argument("--config_file")
    args = parser.parse_args()
    config_file = os.environ.get("CONFIG_FILE", args.config_file)
    if config_file:
        with open(config_file, "rb") as file:
            config = json.load(file)
        args.host, args.port = config.get("host", "localhost"), int(config.get("port", 8000))
        Handler.proxy = Proxy(config["models"])
    if os.environ.get("FAKE_EXIT"):
        time.sleep(float(os.environ.get("FAKE_EXIT_AFTER", "0")))
        sys.exit(int(os.environ["FAKE_EXIT"]))
    if os.environ.get("FAKE_NO_LISTEN"):
        while True:
            time.sleep(60)
    Handler.alias = args.model_alias or args.model
    server = Server((args.host, args.port), Handler)
    print("listening", flush=True)
    server.serve_forever()


main()
