"""How GPUs are named: NVIDIA/MIG UUIDs and PCI bus ids (shared by the GPU reading and NVML)."""

from __future__ import annotations

import re

_PCI = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
#: An NVIDIA GPU's or MIG instance's UUID, as the driver's procfs and NVML write it.
UUID = re.compile(r"(GPU|MIG)-[0-9A-Za-z-]{1,80}")


def normal_pci(text: str) -> str | None:
    """``0000:01:00.0`` from a bus id as NVML (``00000000:01:00.0``) or sysfs write it."""
    text = text.strip().lower()
    if not _PCI.fullmatch(text):
        return None
    domain, rest = text.split(":", 1)
    return f"{int(domain, 16):04x}:{rest}"
