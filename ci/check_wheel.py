"""Checks the one wheel in a folder is the portable abi3 wheel users get.

    python ci/check_wheel.py DIST_DIR

The glibc ceiling is the `compatibility` of `[tool.maturin]` in pyproject.toml (e.g.
`manylinux_2_28`). Checked: exactly one wheel; its tags are cp310-abi3 and manylinux no newer than
the ceiling, for this machine's architecture; the extension inside needs no shared library beyond
the C runtime and no glibc symbol version above the ceiling (read from its ELF headers); and
`auditwheel show` agrees: the wheel is consistent with a tag no newer than the ceiling and needs no
external shared library. Prints auditwheel's report. Exits 1 with the reasons otherwise.
"""

from __future__ import annotations

import platform
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import tomllib
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection
from packaging.utils import parse_wheel_filename

ROOT = Path(__file__).resolve().parent.parent
# What a manylinux extension may link against: the C runtime itself (PEP 600's list, less the
# X11/GL/C++ libraries this crate has no business needing).
ALLOWED_LIBS = {
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "librt.so.1",
    "libpthread.so.0",
    "libgcc_s.so.1",
    "libutil.so.1",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
}
LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def glibc_of_tag(tag: str, arch: str) -> tuple[int, int] | None:
    """(major, minor) of a manylinux platform tag for `arch`, None for anything else."""
    m = re.fullmatch(rf"manylinux_(\d+)_(\d+)_{re.escape(arch)}", tag)
    if m:
        return int(m[1]), int(m[2])
    for name, version in LEGACY.items():
        if tag == f"{name}_{arch}":
            return version
    return None


def ceiling() -> tuple[str, tuple[int, int]]:
    maturin = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["maturin"]
    compat = maturin["compatibility"]
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)", compat)
    if m:
        return compat, (int(m[1]), int(m[2]))
    if compat in LEGACY:
        return compat, LEGACY[compat]
    raise SystemExit(f"[tool.maturin] compatibility={compat!r}: expected manylinux_X_Y or a legacy alias")


def check_elf(so: Path, limit: tuple[int, int]) -> list[str]:
    problems = []
    with so.open("rb") as f:
        elf = ELFFile(f)
        needed, rpaths = [], []
        for section in elf.iter_sections():
            if isinstance(section, DynamicSection):
                for t in section.iter_tags():
                    if t.entry.d_tag == "DT_NEEDED":
                        needed.append(t.needed)
                    elif t.entry.d_tag in ("DT_RPATH", "DT_RUNPATH"):
                        rpaths.append(t.entry.d_tag)
            if isinstance(section, GNUVerNeedSection):
                for verneed, auxs in section.iter_versions():
                    for aux in auxs:
                        m = re.fullmatch(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?", aux.name)
                        if m and (int(m[1]), int(m[2])) > limit:
                            problems.append(f"{so.name} needs {aux.name} from {verneed.name}")
                        if aux.name.startswith(("GLIBCXX_", "CXXABI_")):
                            problems.append(f"{so.name} needs the C++ runtime ({aux.name})")
        extra = sorted(set(needed) - ALLOWED_LIBS)
        if extra:
            problems.append(f"{so.name} links against {extra}")
        if rpaths:
            problems.append(f"{so.name} has {rpaths}")
        print(f"{so.name}: DT_NEEDED {needed}")
    return problems


def main() -> int:
    dist = Path(sys.argv[1])
    compat, limit = ceiling()
    arch = platform.machine()
    wheels = sorted(dist.glob("*.whl"))
    if len(wheels) != 1:
        print(f"expected one wheel in {dist}, found {[w.name for w in wheels]}")
        return 1
    wheel = wheels[0]
    problems: list[str] = []
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    name, wversion, _build, tags = parse_wheel_filename(wheel.name)
    if name != "enginespec" or str(wversion) != version:
        problems.append(f"{wheel.name}: expected enginespec {version}")
    for tag in tags:
        if (tag.interpreter, tag.abi) != ("cp310", "abi3"):
            problems.append(f"{wheel.name}: tag {tag} is not cp310-abi3")
        glibc = glibc_of_tag(tag.platform, arch)
        if glibc is None or glibc > limit:
            problems.append(f"{wheel.name}: platform {tag.platform} is not manylinux <= {compat} for {arch}")

    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        for wanted in ("enginespec/py.typed", "enginespec/_native.pyi", "enginespec/__init__.py"):
            if wanted not in names:
                problems.append(f"{wheel.name} lacks {wanted}")
        sos = [n for n in names if n.endswith(".so")]
        if sos != ["enginespec/_native.abi3.so"]:
            problems.append(f"{wheel.name}: expected one enginespec/_native.abi3.so, found {sos}")
        for so in sos:
            problems += check_elf(Path(archive.extract(so, tmp)), limit)

    shown = subprocess.run(
        [sys.executable, "-m", "auditwheel", "show", str(wheel)], capture_output=True, text=True
    )
    print(shown.stdout + shown.stderr)
    text = " ".join(shown.stdout.split())
    m = re.search(r'consistent with the following platform tag: "([^"]+)"', text)
    if shown.returncode != 0 or not m:
        problems.append(f"auditwheel show exited {shown.returncode} without a platform tag")
    else:
        glibc = glibc_of_tag(m[1], arch)
        if glibc is None or glibc > limit:
            problems.append(f"auditwheel: consistent with {m[1]}, newer than {compat}")
    if "external shared libraries" in text:
        problems.append("auditwheel: the wheel needs external shared libraries")

    for problem in problems:
        print(f"check_wheel: {problem}")
    if not problems:
        print(f"check_wheel: {wheel.name} is abi3, manylinux <= {compat}, no external libraries")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
