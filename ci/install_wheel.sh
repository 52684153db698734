#!/usr/bin/env bash
# Installs the built wheel as a user without Rust gets it, into a fresh venv, and checks it.
#
#   ci/install_wheel.sh VENV WHEEL [EXTRAS]     e.g. ci/install_wheel.sh .venv-ci/user dist/x.whl dev
#
# The venv is made anew; pip runs with no cargo/rustc/rustup reachable (ci/no_rust_env.sh), so the
# wheel and every dependency must install without compiling Rust. Then, from outside the source tree:
# `import enginespec` gives BACKEND "native", and enginespec and its extension come from the venv.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="$1" wheel="$2" extras="${3:-}"
. ci/no_rust_env.sh

rm -rf "$venv"
no_rust python3 -m venv "$venv"
venv="$(cd "$venv" && pwd)"
no_rust "$venv/bin/python" -m pip install -q --upgrade pip
no_rust "$venv/bin/python" -m pip install -q "$(realpath "$wheel")${extras:+[$extras]}"

check="$(pwd)/ci/installed_package.py"
(cd / && no_rust env -u ENGINESPEC_BACKEND "$venv/bin/python" -c \
    'import enginespec; assert enginespec.BACKEND == "native", enginespec.BACKEND')
(cd / && no_rust env -u ENGINESPEC_BACKEND "$venv/bin/python" "$check" native "$venv")
