"""Builds small real wheels for tests (a wheel is a zip with a dist-info; no build backend needed)."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Mapping
from pathlib import Path


def build_wheel(
    dest: Path,
    name: str,
    version: str,
    files: Mapping[str, str],
    entry_points: Mapping[str, Mapping[str, str]] | None = None,
) -> Path:
    """Writes ``<name>-<version>-py3-none-any.whl`` into ``dest`` and returns its path."""
    dist = name.replace("-", "_")
    dist_info = f"{dist}-{version}.dist-info"
    wheel = dest / f"{dist}-{version}-py3-none-any.whl"
    records: list[str] = []
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel, "w") as archive:

        def add(path: str, data: bytes) -> None:
            archive.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            records.append(f"{path},sha256={digest},{len(data)}")

        for path, text in files.items():
            add(path, text.encode())
        add(f"{dist_info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode())
        add(
            f"{dist_info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: enginespec-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        if entry_points:
            text = "".join(
                f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in items.items()) + "\n"
                for group, items in entry_points.items()
            )
            add(f"{dist_info}/entry_points.txt", text.encode())
        archive.writestr(f"{dist_info}/RECORD", "\n".join([*records, f"{dist_info}/RECORD,,"]) + "\n")
    return wheel
