"""Every benchmark still loads against the package and the test helpers it measures with: its
imports and module-level code run (its ``main`` does not; the benchmarks are run by hand, so a
renamed helper would otherwise go unnoticed until someone measures)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
BENCHES = sorted((ROOT / "benches").glob("*.py"))

LOAD = """
import runpy, sys
sys.path[:0] = [sys.argv[2], sys.argv[3]]
runpy.run_path(sys.argv[1], run_name="loaded_by_the_test")
"""


def test_the_benchmarks_are_found() -> None:
    assert {"bench_scan.py", "bench_gpus.py", "bench_lifecycle.py", "_mix.py"} <= {b.name for b in BENCHES}


def _needs_the_extension(bench: Path) -> bool:
    """Whether the benchmark compares the Rust extension with its twin (it imports ``_native``)."""
    text = bench.read_text()
    return "import _native" in text or "enginespec._native" in text


@pytest.mark.parametrize("bench", BENCHES, ids=lambda path: path.name)
def test_a_benchmark_loads(bench: Path) -> None:
    if _needs_the_extension(bench):
        pytest.importorskip("enginespec._native", reason="the Rust extension is not installed")
    loaded = subprocess.run(
        [sys.executable, "-c", LOAD, str(bench), str(ROOT / "benches"), str(ROOT / "tests")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert loaded.returncode == 0, loaded.stderr
