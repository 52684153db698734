"""A third-party engine supplies every per-engine rule through its definition, and enginespec uses
each of them as it uses a built-in engine's: its model's registry name, its memory estimate, what
it logged about its memory, where it fits on a GPU ledger, its load metrics, its failure patterns,
its health rule and its workers' titles. The plugin is a real distribution declaring the
`enginespec.engines` entry point; the probe runs on the active backend."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import enginespec
from helpers.wheelkit import build_wheel

PLUGIN = textwrap.dedent(
    """
    import os
    from enginespec import (
        EngineSpec, FailurePattern, Failures, HealthRule, Launch, LaunchForm, LoadMetrics, Serving,
        Signature,
    )
    from enginespec.definition.modelrecords import Fitting, LoggedMemory, MemoryEstimate, Placement

    class ToySpec(EngineSpec):
        def registry_name(self, model_path, files):
            # read through the serving process's view of its files
            folder = model_path if files.kind(model_path) == "directory" else os.path.dirname(model_path)
            fd = files.open(os.path.join(folder, "REGISTRY"))
            try:
                return "toys/" + os.read(fd, 64).decode().strip()
            finally:
                os.close(fd)

        def estimate_memory(self, facts, argv):
            copies = int(argv[argv.index("--copies") + 1]) if "--copies" in argv else 1
            return MemoryEstimate(
                engine="toy", rule="toy: the weights, once per copy",
                weights={"GPU0": copies * (facts.weight_bytes or 0)},
            )

        def logged_memory(self, log):
            held = [line.split()[-1] for line in log.splitlines() if line.startswith("toy holds ")]
            return LoggedMemory(engine="toy", weights={"GPU0": int(held[-1])} if held else {})

        def fit(self, facts, argv, devices):
            need = 3 * (facts.weight_bytes or 0)
            roomy = [d for d in devices if (d.free_bytes or 0) >= need]
            return Fitting(
                placements=tuple(
                    Placement(
                        devices=(d.device,), environment={"TOY_DEVICE": d.device},
                        settings={"--copies": "3"}, needed_bytes={d.device: need},
                        free_bytes={d.device: d.free_bytes or 0},
                    )
                    for d in roomy[:1]
                ),
                refusals=tuple(f"{d.device}: too few toys" for d in devices if d not in roomy),
                notes=("toys are three copies of the weights",),
            )

    TOY = ToySpec(
        id="toy",
        signature=Signature(
            engine="toy",
            launch_forms=(LaunchForm(executables=("toy-server",)),),
            model_flags=("--weights",),
            port_flags=("--listen-port",),
            worker_titles=("TOY::Worker",),
            default_host="127.0.0.1",
            default_port=7070,
        ),
        launch=Launch(kind="binary", executable="toy-server"),
        serving=Serving(
            health_rules=(
                HealthRule(status=503, contains="warming", state="loading", reason="toy warms up"),
            ),
        ),
        load=LoadMetrics(
            kind="prometheus", requests_running=("toy_running",), requests_waiting=("toy_queue",)
        ),
        failures=Failures(
            patterns=(
                FailurePattern(
                    kind="gpu_oom", pattern=r"toy ran out of toys \\(needs (?P<n>\\d+)\\)",
                    hint="give the toy {n} toys",
                ),
            ),
        ),
    )
    """
)

PROBE = textwrap.dedent(
    """
    import contextlib, io, json, os, subprocess, sys, threading, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    import enginespec
    from enginespec import check_load, classify_failure
    from enginespec.health import check_health
    from enginespec.cli import main
    from enginespec.models.naming import model_name

    helper, folder, work = sys.argv[1], sys.argv[2], sys.argv[3]

    def cli(*args):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(list(args))
        return code, json.loads(out.getvalue())

    class Toy(BaseHTTPRequestHandler):
        def do_GET(self):
            metrics = b"toy_running 3\\ntoy_queue 1\\n"
            body, status = (b"warming", 503) if self.path == "/health" else (metrics, 200)
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    def started(argv):
        proc = subprocess.Popen(
            argv, executable=helper, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while open(f"/proc/{proc.pid}/cmdline", "rb").read() == b"" and time.monotonic() < deadline:
            time.sleep(0.01)
        return proc

    server = ThreadingHTTPServer(("127.0.0.1", 0), Toy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    children = []
    try:
        children.append(started(["toy-server", "--weights", folder, "--copies", "2"]))
        children.append(started(["TOY::Worker_0"]))
        scanned = {p.pid: p for p in enginespec.scan()}
        toy, worker = (scanned.get(child.pid) for child in children)
        log = os.path.join(work, "toy.log")
        with open(log, "w") as f:
            f.write("toy holds 1234\\n")
        model_code, model = cli("model", str(toy.pid), "--log", log, "--json")
        recipe, ledger = os.path.join(work, "toy.toml"), os.path.join(work, "ledger.json")
        fit_code, fit = cli("fit", recipe, "--ledger", ledger, "--json")
        health = check_health("toy", url)
        load = check_load("toy", url)
        failure = classify_failure("toy", "booting\\ntoy ran out of toys (needs 7)\\n", exit_code=1)
        print(json.dumps({
            "scanned": [toy.engine, toy.model],
            "table_name": model_name(folder, toy.pid, "toy"),
            "model": [model_code, *(model["facts"][k] for k in ("registry_name", "estimate", "logged"))],
            "fit": [fit_code, fit],
            "health": [health.state, health.reason],
            "load": [load.available, load.requests_running, load.requests_waiting],
            "failure": [failure.kind, failure.hint, list(failure.cause_lines)],
            "worker": [worker.engine, worker.role] if worker else None,
        }))
    finally:
        for child in children:
            child.kill()
            child.wait()
        server.shutdown()
    """
)


def _model(folder: Path) -> Path:
    """A Hugging Face folder of 8 bytes of weights (a safetensors header and its data)."""
    folder.mkdir()
    config = {"architectures": ["ToyForCausalLM"], "num_hidden_layers": 2, "num_attention_heads": 2}
    (folder / "config.json").write_text(json.dumps(config))
    header = json.dumps({"w": {"dtype": "F16", "shape": [4], "data_offsets": [0, 8]}}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    (folder / "REGISTRY").write_text("teddy:v2\n")
    return folder


def test_a_plugin_engine_supplies_every_rule(tmp_path: Path, helper: Path) -> None:
    wheelhouse = tmp_path / "wheels"
    build_wheel(
        wheelhouse,
        "enginespec-toy-rules",
        "1.0",
        {"enginespec_toy_rules.py": PLUGIN},
        entry_points={"enginespec.engines": {"toy": "enginespec_toy_rules:TOY"}},
    )
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-index",
            "--find-links",
            str(wheelhouse),
            "--target",
            str(target),
            "enginespec-toy-rules",
        ],
        check=True,
        timeout=300,
    )
    folder = _model(tmp_path / "toy-model")
    (tmp_path / "toy.toml").write_text(f'engine = "toy"\nmodel_path = "{folder}"\n')
    ledger = [
        {"device": "GPU-0", "index": 0, "memory_total_bytes": 100, "memory_used_bytes": 90},
        {"device": "GPU-1", "index": 1, "memory_total_bytes": 100, "memory_used_bytes": 10},
    ]
    (tmp_path / "ledger.json").write_text(json.dumps({"devices": ledger}))
    # the enginespec under test first, then the installed plugin
    path = os.pathsep.join([str(Path(enginespec.__file__).parents[1]), str(target)])
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(helper), str(folder), str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
        check=False,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["scanned"] == ["toy", str(folder)]
    # model name: the table's name and the facts' registry name, by the plugin's rule
    assert result["table_name"] == "toys/teddy:v2"
    code, registry_name, estimate, logged = result["model"]
    assert (code, registry_name) == (0, "toys/teddy:v2")
    # memory estimate, from the process's argv (two copies of 8 bytes)
    assert (estimate["rule"], estimate["weights"]) == ("toy: the weights, once per copy", {"GPU0": 16})
    # logged memory, from the log given
    assert logged["weights"] == {"GPU0": 1234}
    # fit: GPU-1 has room for three copies, GPU-0 (10 bytes free) not
    code, fit = result["fit"]
    assert code == 0
    assert (fit["engine"], fit["fits"]) == ("toy", True)
    (placement,) = fit["placements"]
    assert (placement["devices"], placement["settings"]) == (["GPU-1"], {"--copies": "3"})
    assert fit["refusals"] == ["GPU-0: too few toys"]
    assert fit["notes"] == ["toys are three copies of the weights"]
    # health rule, load metrics and failure patterns, by the plugin's data
    assert result["health"] == ["loading", "toy warms up"]
    assert result["load"] == [True, 3, 1]
    assert result["failure"] == ["gpu_oom", "give the toy 7 toys", ["toy ran out of toys (needs 7)"]]
    # worker titles: a process titled as the plugin's worker, with no server, is its orphan
    assert result["worker"] == ["toy", "orphan"]
