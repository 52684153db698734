"""Real engines end to end (marker real_engine, run by .ci/run): installed by install() into a
cache outside the checkout (``ENGINESPEC_CI_CACHE``, default ``~/.cache/enginespec-ci``), so a rerun
finds them installed in seconds; tiny random models made here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from lifecycle import LLAMA_CPP_PYTHON

from enginespec import Config


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(pytest.mark.real_engine)


@pytest.fixture(scope="session")
def cache() -> Path:
    path = Path(os.environ.get("ENGINESPEC_CI_CACHE", Path.home() / ".cache" / "enginespec-ci"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def config(cache: Path) -> Config:
    return Config(data_dir=cache / "data")


@pytest.fixture(scope="session")
def build_tools(cache: Path) -> Path:
    """A venv with cmake, ninja and scikit-build-core (pip wheels: no cmake built from source), its
    bin put first on PATH for the source builds."""
    venv = cache / "tools"
    if not (venv / "bin" / "cmake").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "cmake>=3.21", "ninja", "scikit-build-core>=0.9"], check=True)
    os.environ["PATH"] = f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"
    return venv


@pytest.fixture(scope="session")
def sdist(cache: Path, build_tools: Path) -> Path:
    """llama-cpp-python's sdist, fetched once with pip (offline-safe with the build tools already
    there: --no-build-isolation, so pip builds no cmake from source to read its metadata)."""
    folder = cache / "sdist"
    found = sorted(folder.glob(f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"))
    if not found:
        python = str(build_tools / "bin" / "python")
        download = [
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--no-build-isolation",
        ]
        subprocess.run(
            [python, *download, "-d", str(folder), f"llama-cpp-python=={LLAMA_CPP_PYTHON}"],
            check=True,
        )
        found = sorted(folder.glob(f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"))
    assert found, f"no llama-cpp-python {LLAMA_CPP_PYTHON} sdist in {folder}"
    return found[0]


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(autouse=True)
def _no_hub() -> None:
    # Nothing may be fetched from a model hub; the tests make their models.
    os.environ["HF_HUB_OFFLINE"] = "1"
