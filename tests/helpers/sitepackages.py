"""A site-packages directory a test process maps a file from, as a Python engine's server maps its
extension modules: what enginespec reads a running engine's version from."""

from __future__ import annotations

import shutil
from pathlib import Path


def vllm_site(tmp_path: Path, helper: Path, version: str | None, metadata: str | None = None) -> Path:
    """A site-packages directory with vLLM's dist-info (``version``; ``None``: none; ``metadata``:
    its METADATA's text instead of a well-formed one) and an "extension module" that is ``helper``
    itself, returned: a process run from it maps a file from there."""
    site = tmp_path / "venv" / "lib" / "python3.12" / "site-packages"
    (site / "vllm").mkdir(parents=True)
    module = site / "vllm" / "_C.abi3.so"
    shutil.copy(helper, module)
    if version is not None:
        info = site / f"vllm-{version}.dist-info"
        info.mkdir()
        written = metadata or f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n\n"
        (info / "METADATA").write_text(written)
    return module
