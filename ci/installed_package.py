"""Checks enginespec is imported from an installed copy, never from the source tree.

As a command, in the venv's Python (any directory):

    python ci/installed_package.py native|python VENV

Inside the pytest process that runs the suite, through the plugin `ci/pytest_installed_package.py`.

The expected backend is the one the installed package gives when ENGINESPEC_BACKEND is unset:
`native` when the wheel's extension is installed, `python` when it has been deleted. Checked: the
interpreter is the venv's; every loaded `enginespec` module (and the extension, if expected) comes
from that venv's site-packages; `enginespec.BACKEND` is ENGINESPEC_BACKEND if set, else the expected
one; and without the extension, `enginespec._native` is not importable at all.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig
from pathlib import Path

SOURCE_TREE = Path(__file__).resolve().parent.parent / "python"


def problems(expected: str, venv: str) -> list[str]:
    import enginespec

    found: list[str] = []
    if Path(sys.prefix).resolve() != Path(venv).resolve():
        found.append(f"interpreter prefix {sys.prefix} is not the venv {venv}")
    sites = {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}
    files = {
        name: module.__file__
        for name, module in list(sys.modules.items())
        if (name == "enginespec" or name.startswith("enginespec.")) and getattr(module, "__file__", None)
    }
    spec = importlib.util.find_spec("enginespec._native")
    if expected == "native":
        if spec is None or spec.origin is None:
            found.append("enginespec._native is not importable")
        else:
            files["enginespec._native (spec)"] = spec.origin
    elif spec is not None:
        found.append(f"enginespec._native is importable from {spec.origin}, expected it absent")
    outside = sorted(
        f"{name} from {path}"
        for name, path in ((n, Path(str(f)).resolve()) for n, f in files.items())
        if path.is_relative_to(SOURCE_TREE) or not any(path.is_relative_to(site) for site in sites)
    )
    if outside:
        where = " or ".join(sorted(map(str, sites)))
        found.append(f"{len(outside)} modules not from {where}, e.g. {outside[0]}")
    wanted = os.environ.get("ENGINESPEC_BACKEND") or expected
    if wanted != enginespec.BACKEND:
        found.append(f"enginespec.BACKEND is {enginespec.BACKEND!r}, expected {wanted!r}")
    return found


if __name__ == "__main__":
    issues = problems(sys.argv[1], sys.argv[2])
    for issue in issues:
        print(f"installed_package: {issue}")
    if not issues:
        import enginespec

        version, backend, file = enginespec.__version__, enginespec.BACKEND, enginespec.__file__
        print(f"installed_package: enginespec {version} BACKEND={backend} from {file}")
    sys.exit(1 if issues else 0)
