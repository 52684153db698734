"""Input that would do something else than asked is refused, naming the field and value."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from enginespec import Config, InstallOptions, InstallOptionsError, Recipe, get_engine_spec
from helpers.cli import enginespec


@pytest.mark.parametrize("version", ["", " ", "latest", "1.0 --index-url http://x"])
def test_install_refuses_versions_that_are_not_pep440(tmp_path: Path, version: str) -> None:
    data = tmp_path / "data"
    out = enginespec("install", "vllm", "--version", version, "--data-dir", str(data))
    assert out.returncode == 2
    assert b"version:" in out.stderr
    assert len(out.stderr.splitlines()) == 1
    with pytest.raises(InstallOptionsError, match="version"):
        get_engine_spec("mlx").install(InstallOptions(version=version), Config(data_dir=data))
    assert not data.exists()  # nothing was created, nothing ran


@pytest.mark.parametrize(("command", "value"), [("ps", "0"), ("ps", "-1"), ("health", "-1"), ("ps", "nan")])
def test_timeouts_must_be_positive(command: str, value: str) -> None:
    args = [command, "--timeout", value] + (["vllm", "http://127.0.0.1:1"] if command == "health" else [])
    out = enginespec(*args)
    assert out.returncode == 2
    assert b"--timeout" in out.stderr


@pytest.mark.parametrize(
    "fields",
    [
        {"extra_args": {"lora-modules": ["a=b", "--trust-remote-code"]}},
        {"extra_args": {"seed": "--help"}},
        {"host": "--help"},
        {"chat_template": "-x"},
        {"dtype": "--version"},
        {"model_path": "-m"},
        {"api_key": "--admin"},
    ],
)
def test_recipe_values_that_would_be_flags_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match="would be taken for a flag"):
        Recipe(engine="vllm", model_path=str(fields.pop("model_path", "m")), **fields)  # type: ignore[arg-type]


def test_negative_numbers_are_values_not_flags() -> None:
    recipe = Recipe(engine="llamacpp", model_path="m.gguf", extra_args={"seed": -1, "temp": "-0.5"})
    argv = get_engine_spec("llamacpp").build_command(recipe)
    assert argv[-4:] == ["--seed", "-1", "--temp", "-0.5"]


def test_a_console_script_with_an_unbalanced_shebang_is_not_installed(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "vllm"
    script.write_text('#!/usr/bin/python3 "unbalanced\nprint(1)\n')
    script.chmod(0o755)
    probe = get_engine_spec("vllm").probe_binary(script)
    assert (probe.installed, probe.error) == (False, "not a Python console script")
    out = enginespec("info", "vllm", "--data-dir", str(tmp_path / "d"), env={"PATH": str(bin_dir)})
    assert out.returncode == 0, out.stderr
    assert b"not installed" in out.stdout
