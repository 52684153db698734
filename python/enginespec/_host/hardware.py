"""Which accelerators this host has, from the kernel's device files (no driver library is
loaded, nothing is run)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from enginespec._host.procfiles import list_kernel_directory

Accelerator = Literal["nvidia", "amd"]

#: What :func:`accelerators` looked for, for a message saying that no NVIDIA GPU was found.
NVIDIA_EVIDENCE = "no /proc/driver/nvidia/gpus entry, no /dev/nvidia*"


def accelerators(root: Path = Path("/")) -> frozenset[Accelerator]:
    """``nvidia`` when the NVIDIA driver lists a GPU (``/proc/driver/nvidia/gpus/*``) or a GPU
    device node exists (``/dev/nvidia0``...); ``amd`` when ROCm's ``/dev/kfd`` exists."""
    found: set[Accelerator] = set()
    listed = list_kernel_directory(str(root / "proc" / "driver" / "nvidia" / "gpus"))
    if listed or any(path.name[6:].isdigit() for path in (root / "dev").glob("nvidia[0-9]*")):
        found.add("nvidia")
    if (root / "dev" / "kfd").exists():
        found.add("amd")
    return frozenset(found)
