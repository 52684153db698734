#!/usr/bin/env bash
# The test command (README): lints, the pure Rust tests, then pytest on both backends.
# Expects the package installed in the active Python (see .ci/run for a fresh machine).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --all -- --check
cargo clippy --all-targets --features python -- -D warnings
ruff check .
ruff format --check .
mypy
# The stub of the Rust module against the module as built (names, parameters, defaults).
python -m mypy.stubtest enginespec._native

cargo test
ENGINESPEC_BACKEND=native python -m pytest -q
ENGINESPEC_BACKEND=python python -m pytest -q
