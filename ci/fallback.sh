#!/usr/bin/env bash
# The pure-Python fallback as a user meets it: the wheel installed into a fresh venv (no Rust on
# PATH), its extension deleted from site-packages, the backend left to choose itself (no
# ENGINESPEC_BACKEND), and the whole pytest suite run against that installed copy.
#
#   ci/fallback.sh VENV WHEEL
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
venv="$1" wheel="$2"
. ci/no_rust_env.sh

bash ci/install_wheel.sh "$venv" "$wheel" test
venv="$(cd "$venv" && pwd)"
pkg="$(cd / && "$venv/bin/python" -c 'import enginespec, os; print(os.path.dirname(enginespec.__file__))')"
shopt -s nullglob
native=("$pkg"/_native*.so)
if [ "${#native[@]}" -ne 1 ]; then
    echo "fallback: expected one extension in $pkg, found ${native[*]:-none}" >&2
    exit 1
fi
rm -- "${native[0]}"
echo "fallback: deleted ${native[0]}"

(cd / && no_rust env -u ENGINESPEC_BACKEND "$venv/bin/python" -c \
    'import enginespec; assert enginespec.BACKEND == "python", enginespec.BACKEND')
(cd / && no_rust env -u ENGINESPEC_BACKEND "$venv/bin/python" "$root/ci/installed_package.py" python "$venv")
# Tests of the extension itself (they import enginespec._native) cannot run here. Until they skip
# themselves where it is absent, they are left out by name; test_plugin expects "native" whenever
# ENGINESPEC_BACKEND is unset (fixed by the same tests patch, then these lines go).
native_only=(
    --ignore=tests/test_differential.py
    --deselect=tests/test_backend_and_cli.py::test_native_is_the_default_when_built
    --deselect=tests/test_backend_and_cli.py::test_same_result_on_both_backends_and_without_the_extension
    --deselect=tests/test_scan.py::test_both_backends_return_the_same_processes
    --deselect=tests/test_scan.py::test_sysinfo_source_finds_the_same_engines
    --deselect=tests/test_plugin.py::test_entry_point_plugin_in_a_real_venv
)
no_rust env -u ENGINESPEC_BACKEND ENGINESPEC_CI_VENV="$venv" ENGINESPEC_CI_BACKEND=python \
    PYTHONPATH="$root/ci" PYTEST_ADDOPTS="-p pytest_installed_package" \
    "$venv/bin/python" -m pytest -q "${native_only[@]}"
