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
no_rust env -u ENGINESPEC_BACKEND ENGINESPEC_CI_VENV="$venv" ENGINESPEC_CI_BACKEND=python \
    PYTHONPATH="$root/ci" PYTEST_ADDOPTS="-p pytest_installed_package" \
    "$venv/bin/python" -m pytest -q
