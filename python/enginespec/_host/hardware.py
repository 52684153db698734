"""Which accelerators this host has, from the kernel's device files (no driver library is
loaded, nothing is run)."""

from __future__ import annotations

from pathlib import Path

from enginespec._host.procfiles import list_kernel_directory
from enginespec.definition.accelerators import ACCELERATOR_OF, Accelerator, Vendor

#: What :func:`accelerators` looked for, for a message saying that no NVIDIA GPU was found.
NVIDIA_EVIDENCE = "no /proc/driver/nvidia/gpus entry, no /dev/nvidia*"


def accelerators(root: Path = Path("/")) -> frozenset[Vendor]:
    """The vendors of the host's GPUs that compute: ``nvidia`` when the NVIDIA driver lists a GPU
    (``/proc/driver/nvidia/gpus/*``) or a GPU device node exists (``/dev/nvidia0``...); ``amd``
    when ROCm's ``/dev/kfd`` exists."""
    found: set[Vendor] = set()
    listed = list_kernel_directory(str(root / "proc" / "driver" / "nvidia" / "gpus"))
    if listed or any(path.name[6:].isdigit() for path in (root / "dev").glob("nvidia[0-9]*")):
        found.add("nvidia")
    if (root / "dev" / "kfd").exists():
        found.add("amd")
    return frozenset(found)


def host_accelerator(root: Path = Path("/")) -> Accelerator:
    """What this host computes on: an NVIDIA GPU (CUDA), else an AMD one (ROCm), else the CPU."""
    found = accelerators(root)
    return next((accelerator for vendor, accelerator in ACCELERATOR_OF.items() if vendor in found), "cpu")
