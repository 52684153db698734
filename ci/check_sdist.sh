#!/usr/bin/env bash
# The sdist builds and installs where Rust exists: its contents checked, then `pip install` of it
# into a fresh venv (pip's isolated build: maturin from PyPI compiles the crate), and the installed
# package checked: BACKEND native, the extension built here from the sdist.
#
#   ci/check_sdist.sh VENV SDIST        (SDIST from `maturin sdist`)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
venv="$1"
sdist="$(realpath "$2")"
rm -rf "$venv"
python3 - "$sdist" <<'EOF'
import sys, tarfile
names = tarfile.open(sys.argv[1]).getnames()
top = names[0].split("/")[0]
rel = {n[len(top) + 1 :] for n in names if n.startswith(top + "/")}
need = {"Cargo.toml", "Cargo.lock", "pyproject.toml", "README.md", "rust/lib.rs", "rust/python.rs",
        "python/enginespec/__init__.py", "python/enginespec/py.typed", "python/enginespec/_native.pyi", "PKG-INFO"}
bad = sorted(n for n in rel if n.startswith(("fuzz/", "target/", "dist/", ".venv")) or n.endswith((".so", ".whl")))
problems = [f"missing {n}" for n in sorted(need - rel)] + [f"should not ship {n}" for n in bad]
for p in problems:
    print(f"sdist: {p}")
print(f"sdist: {sys.argv[1]}: {len(rel)} files" + ("" if problems else ", contents ok"))
sys.exit(1 if problems else 0)
EOF

python3 -m venv "$venv"
venv="$(cd "$venv" && pwd)"
"$venv/bin/python" -m pip install -q --upgrade pip
# --no-cache-dir: the extension is compiled from this sdist, never taken from an earlier build.
"$venv/bin/python" -m pip install -q --no-cache-dir "$sdist"
(cd / && env -u ENGINESPEC_BACKEND "$venv/bin/python" -c \
    'import enginespec; assert enginespec.BACKEND == "native", enginespec.BACKEND')
(cd / && env -u ENGINESPEC_BACKEND "$venv/bin/python" "$root/ci/installed_package.py" native "$venv")
# Built here, from source: pip's build is tagged for this platform only (not the release manylinux tag).
(cd / && "$venv/bin/python" - <<'EOF'
from importlib.metadata import distribution
tags = [line.split(": ", 1)[1] for line in distribution("enginespec").read_text("WHEEL").splitlines() if line.startswith("Tag: ")]
assert tags and all("-linux_" in t for t in tags), tags
print(f"sdist: installed from source, wheel tags {tags}")
EOF
)
