"""`python -m llama_cpp.server --host H --port P [--model_alias A]`, as the real one is launched,
answering /v1/models as llama-cpp-python 0.3.35 does (app.py get_models). For the port tests:
FAKE_REUSEPORT=1 sets SO_REUSEPORT (as vLLM and llama-server --reuse-port do); FAKE_NO_LISTEN=1
stays up listening on nothing (as a second mlx_lm.server whose bind failed); FAKE_EXIT=N exits
with status N after FAKE_EXIT_AFTER seconds."""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer


class Handler(BaseHTTPRequestHandler):
    alias = "fake"

    def do_GET(self) -> None:
        body = json.dumps({"object": "list", "data": [{"id": self.alias, "object": "model"}]}).encode()
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
    args = parser.parse_args()
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
