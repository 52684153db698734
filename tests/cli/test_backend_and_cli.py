"""Backend choice at import, and the `enginespec parse` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.cli import run

ARGV = ["python3", "/v/bin/vllm", "serve", "--host", "0.0.0.0", "/models/a", "--served-model-name", "a", "b"]
PROBE = f"import enginespec; print(enginespec.BACKEND, enginespec.parse_argv({ARGV!r}).model_dump_json())"


def _run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def _needs_native() -> None:
    pytest.importorskip("enginespec._native", reason="the Rust extension is not installed")


def test_native_is_the_default_when_built() -> None:
    _needs_native()
    env = {k: v for k, v in os.environ.items() if k != "ENGINESPEC_BACKEND"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.split()[0] == "native"


def test_same_result_on_both_backends_and_without_the_extension() -> None:
    _needs_native()
    native = _run(PROBE, {"ENGINESPEC_BACKEND": "native"})
    forced = _run(PROBE, {"ENGINESPEC_BACKEND": "python"})
    # The extension cannot be imported at all: the package falls back by itself.
    blocked = _run(
        "import sys; sys.modules['enginespec._native'] = None; " + PROBE, {"ENGINESPEC_BACKEND": ""}
    )
    assert native.returncode == forced.returncode == blocked.returncode == 0, native.stderr + blocked.stderr
    assert native.stdout.split(" ", 1)[0] == "native"
    assert forced.stdout.split(" ", 1)[0] == "python"
    assert blocked.stdout.split(" ", 1)[0] == "python"
    results = {out.stdout.split(" ", 1)[1] for out in (native, forced, blocked)}
    assert len(results) == 1
    assert json.loads(results.pop())["served_model_names"] == ["a", "b"]


def test_missing_extension_is_an_error_when_native_is_demanded() -> None:
    out = _run(
        "import sys; sys.modules['enginespec._native'] = None; import enginespec",
        {"ENGINESPEC_BACKEND": "native"},
    )
    assert out.returncode != 0
    assert "enginespec._native" in out.stderr


def test_unknown_backend_name_is_a_clear_error() -> None:
    out = _run("import enginespec", {"ENGINESPEC_BACKEND": "rust"})
    assert out.returncode != 0
    assert "ENGINESPEC_BACKEND='rust'" in out.stderr


def test_cli_parse_prints_json() -> None:
    out = run("parse", "--", *ARGV)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["engine"] == "vllm"
    assert data["model"] == "/models/a"
    assert data["served_model_name"] == "a"
    assert data["effective_port"] == 8000


def test_cli_json_of_argv_that_is_not_utf8() -> None:
    # argv read from /proc may hold any bytes: the JSON escapes them, the CLI does not die
    model = os.fsdecode(b"/m/caf\xe9.gguf")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "enginespec.cli",
            "parse",
            "--",
            "llama-server",
            "-m",
            os.fsencode(model),
        ],
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["model"] == model


def test_cli_parse_not_an_engine() -> None:
    out = run("parse", "--", "grep", "llama-server")
    assert out.returncode == 1
    assert "not a server of a known engine" in out.stderr
    assert out.stdout == ""
    secret = run("parse", "--", "vllm", "bench", "serve", "--api-key", "sk-hush")
    assert secret.returncode == 1
    assert "sk-hush" not in secret.stderr


@pytest.mark.parametrize("args", [["parse"], ["parse", "--"], ["frobnicate"], []])
def test_cli_usage_errors_exit_2(args: list[str]) -> None:
    assert run(*args).returncode == 2


def test_cli_command_prints_argv_and_env(tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        'engine = "vllm"\nmodel_path = "/models/my model"\napi_key = "sk-topsecret"\n'
        "visible_devices = [0, 1]\n[env_vars]\nHF_HOME = '/c ache'\n"
    )
    out = run("command", str(recipe))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "export CUDA_VISIBLE_DEVICES=0,1" in lines
    assert "export HF_HOME='/c ache'" in lines
    assert "'/models/my model'" in lines[-1]
    assert "sk-topsecret" not in out.stdout
    data = json.loads(run("command", str(recipe), "--json").stdout)
    assert data["argv"][data["argv"].index("--api-key") + 1] == "***"
    assert data["env"]["HF_HOME"] == "/c ache"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'engine = "vllm"\nmodel_path = "m"\nport = 0\n',
            "port: Input should be greater than or equal to 1 (got 0)",
        ),
        ('engine = "vllm"\n', "model_path: Field required"),
        ('engine = "vllm"\nmodel_path = "m"\n[extra_args]\n"--x; rm -rf /" = 1\n', "extra_args"),
    ],
)
def test_cli_command_bad_recipe_exits_2_with_one_line(tmp_path: Path, text: str, message: str) -> None:
    recipe = tmp_path / "bad.toml"
    recipe.write_text(text)
    out = run("command", str(recipe))
    assert out.returncode == 2
    assert out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1
    assert message in out.stderr
    assert "bad.toml" in out.stderr
