"""A third-party engine, installed as a real distribution declaring the `enginespec.engines`
entry point, becomes first-class: listed, parsed (on the active backend), built."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import enginespec
from helpers.wheelkit import build_wheel

PLUGIN = textwrap.dedent(
    """
    from enginespec import EngineSpec, Launch, LaunchForm, Signature

    TOY = EngineSpec(
        id="toy",
        signature=Signature(
            engine="toy",
            launch_forms=(LaunchForm(executables=("toy-server",), modules=("toy_server",)),),
            model_flags=("--weights",),
            host_flags=("--host",),
            port_flags=("--listen-port",),
            default_host="127.0.0.1",
            default_port=7070,
        ),
        launch=Launch(kind="binary", executable="toy-server"),
    )
    """
)

PROBE = textwrap.dedent(
    """
    import json, os, subprocess, sys, time, enginespec
    from enginespec import Recipe, get_engine_spec, parse_argv
    inv = parse_argv(["/opt/toy/bin/toy-server", "--weights", "/w/toy.bin", "--listen-port", "7001"])
    argv = get_engine_spec("toy").build_command(Recipe(engine="toy", model_path="/w/t", port=7002))
    # Its own output goes nowhere: a child left holding this probe's stdout would keep the test
    # waiting on the pipe after the probe is gone.
    quiet = subprocess.DEVNULL
    running = subprocess.Popen(
        ["toy-server", "--weights", "/w/running.bin"],
        executable=sys.argv[1], stdin=quiet, stdout=quiet, stderr=quiet,
    )
    try:
        deadline = time.monotonic() + 30
        while open(f"/proc/{running.pid}/cmdline", "rb").read() == b"" and time.monotonic() < deadline:
            time.sleep(0.01)
        scanned = [p.model for p in enginespec.scan() if p.pid == running.pid and p.engine == "toy"]
    finally:
        running.kill()
        running.wait()
    print(json.dumps({
        "backend": enginespec.BACKEND,
        "ids": [s.id for s in enginespec.ALL_ENGINE_SPECS],
        "parsed": inv.model_dump() if inv else None,
        "built": argv,
        "reparsed": parse_argv(argv).model_dump(),
        "not_toy": parse_argv(["toy-client", "--weights", "x"]),
        "scanned": scanned,
    }))
    """
)


def test_entry_point_plugin_in_a_real_venv(tmp_path: Path, helper: Path) -> None:
    wheelhouse = tmp_path / "wheels"
    build_wheel(
        wheelhouse,
        "enginespec-toy",
        "1.0",
        {"enginespec_toy.py": PLUGIN},
        entry_points={"enginespec.engines": {"toy": "enginespec_toy:TOY"}},
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
    )
    # enginespec itself (and pydantic) come from the environment running the tests.
    (site / "enginespec-under-test.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-index",
            "--find-links",
            str(wheelhouse),
            "enginespec-toy",
        ],
        check=True,
        timeout=300,
    )
    env = {**os.environ}
    out = subprocess.run(
        [str(python), "-c", PROBE, str(helper)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    # The venv sees the same enginespec as this process, so it makes the same backend choice.
    assert result["backend"] == enginespec.BACKEND
    assert result["ids"] == [*(spec.id for spec in enginespec.BUILTIN_ENGINE_SPECS), "toy"]
    parsed = result["parsed"]
    assert (parsed["engine"], parsed["model"], parsed["port"]) == ("toy", "/w/toy.bin", 7001)
    assert parsed["effective_host"] == "127.0.0.1"
    assert result["built"] == [
        "toy-server",
        "--weights",
        "/w/t",
        "--host",
        "127.0.0.1",
        "--listen-port",
        "7002",
    ]
    assert result["reparsed"]["port"] == 7002
    assert result["not_toy"] is None
    assert result["scanned"] == ["/w/running.bin"]  # the scanner knows the plugin too


def test_broken_plugin_warns_and_the_rest_works(tmp_path: Path) -> None:
    wheelhouse = tmp_path / "wheels"
    build_wheel(
        wheelhouse,
        "enginespec-broken",
        "1.0",
        {"enginespec_broken.py": "raise RuntimeError('boom')\n"},
        entry_points={"enginespec.engines": {"broken": "enginespec_broken:Spec"}},
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
            "enginespec-broken",
        ],
        check=True,
        timeout=300,
    )
    code = "import enginespec; print([s.id for s in enginespec.ALL_ENGINE_SPECS])"
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, timeout=120
    )
    assert out.stdout.strip() == str([spec.id for spec in enginespec.BUILTIN_ENGINE_SPECS])
    assert "'vllm'" in out.stdout
    assert "engine plugin 'broken' failed to load: boom" in out.stderr
