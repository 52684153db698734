"""Smoke test of an installed enginespec on any OS (the release workflow runs it where the pytest
suite, which needs Linux's /proc and gcc, cannot run).

    python ci/smoke.py [native|python]

Checks the backend (default `native`), parses an argv, builds a command, then starts a real process
that looks like a vLLM server (`python -m vllm.entrypoints.openai.api_server --model ...`, served by a
stub module in a temporary folder) and finds it with `enginespec.scan()`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import enginespec


def main() -> int:
    expected = sys.argv[1] if len(sys.argv) > 1 else "native"
    assert expected == enginespec.BACKEND, (enginespec.BACKEND, expected)
    inv = enginespec.parse_argv(["vllm", "serve", "/models/a", "--port", "8001"])
    assert inv is not None
    assert (inv.engine, inv.model, inv.effective_port) == ("vllm", "/models/a", 8001)
    assert enginespec.parse_argv(["vllm", "bench", "serve", "--model", "m"]) is None
    recipe = enginespec.Recipe(engine="llamacpp", model_path="/m/x.gguf", port=9001)
    argv = enginespec.get_engine_spec("llamacpp").build_command(recipe)
    assert "/m/x.gguf" in argv, argv
    assert "9001" in argv, argv

    with tempfile.TemporaryDirectory() as tmp:
        module = Path(tmp, "vllm", "entrypoints", "openai")
        module.mkdir(parents=True)
        for folder in (module.parent.parent, module.parent, module):
            (folder / "__init__.py").write_text("")
        (module / "api_server.py").write_text("import time\ntime.sleep(60)\n")
        model = f"/models/smoke-{os.getpid()}"
        server = subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--port", "8123"],
            env={**os.environ, "PYTHONPATH": tmp},
        )
        try:
            deadline = time.monotonic() + 20
            found = []
            while not found and time.monotonic() < deadline:
                time.sleep(0.2)
                found = [p for p in enginespec.scan() if p.pid == server.pid]
            assert found, f"scan() did not find pid {server.pid} within 20 s"
            proc = found[0]
            assert (proc.engine, proc.model, proc.port) == ("vllm", model, 8123), proc
        finally:
            server.kill()
            server.wait()
    print(f"smoke: enginespec {enginespec.__version__} ({enginespec.BACKEND}) on {sys.platform}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
