#!/usr/bin/env bash
# The pytest suite against a built wheel as users install it (release workflow, Linux runners):
# the wheel and its test extras installed into a fresh venv without Rust (ci/install_wheel.sh), then
# pytest on both backends, with the plugin that fails the run unless enginespec comes from that venv.
#
#   ci/test_wheel.sh VENV WHEEL
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
bash ci/install_wheel.sh "$1" "$2" test
venv="$(cd "$1" && pwd)"
for backend in native python; do
    ENGINESPEC_BACKEND="$backend" ENGINESPEC_CI_VENV="$venv" ENGINESPEC_CI_BACKEND=native \
        PYTHONPATH="$root/ci" PYTEST_ADDOPTS="-p pytest_installed_package" \
        "$venv/bin/python" -m pytest -q
done
