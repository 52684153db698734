"""The GPUs of every DRM driver (amdgpu, i915, xe, nouveau, virtio...): their nodes ``card<N>`` and
``renderD<N>`` (major 226) from ``/sys/class/drm`` with their PCI devices, and the memory each DRM
client reports in its fdinfo, as the kernel's drm-usage-stats document gives it. A node of a GPU
an earlier vendor found (nvidia-drm's) is that GPU."""

from __future__ import annotations

import re
from collections.abc import Mapping

from enginespec._host.root import HostRoot
from enginespec.definition.accelerators import Vendor
from enginespec.gpus.energy import hwmon
from enginespec.gpus.ids import normal_pci
from enginespec.gpus.vendor import (
    Client,
    Device,
    HostGpus,
    TreeGpus,
    VendorReading,
    link_name,
    number,
    read_text,
)

DRM_MAJOR = 226  # /dev/dri/card<N>, /dev/dri/renderD<N> (include/uapi/drm/drm.h: DRM_MAJOR)
_VENDORS: Mapping[str, Vendor] = {"0x10de": "nvidia", "0x1002": "amd", "0x8086": "intel"}
_UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def _size(text: str) -> int | None:
    value_text, _, unit = text.strip().partition(" ")
    value = number(value_text)
    factor = _UNITS.get(unit.strip())
    return None if value is None or factor is None else value * factor


def drm_client(text: str) -> tuple[tuple[str, str] | None, Client]:
    """A DRM fdinfo's client key (``drm-pdev``, ``drm-client-id``) and memory, as the kernel's
    drm-usage-stats document gives it: per region ``drm-resident-<r>`` (else ``drm-total-<r>``,
    else the older ``drm-memory-<r>``); VRAM and local memory are the device's, GTT, system and
    ``cpu`` regions are host memory, ``amd-evicted-vram`` is VRAM pushed out to it."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    client_id = fields.get("drm-client-id")
    pdev = normal_pci(fields.get("drm-pdev", "")) or fields.get("drm-pdev", "")
    client_key = (pdev, client_id) if client_id is not None else None
    regions: dict[str, int] = {}
    for prefix in ("drm-memory-", "drm-total-", "drm-resident-"):  # later ones win
        for name, value in fields.items():
            size = _size(value) if name.startswith(prefix) else None
            if size is not None:
                regions[name[len(prefix) :]] = size
    client = Client(evicted=_size(fields.get("amd-evicted-vram", "")) or 0)
    for region, size in regions.items():
        if region.startswith(("vram", "local", "stolen-local")):
            client.device_bytes = (client.device_bytes or 0) + size
            client.local = True
        elif region.startswith(("gtt", "system", "cpu", "stolen")):
            client.host_bytes = (client.host_bytes or 0) + size
    return client_key, client


class DrmReading(VendorReading):
    majors = frozenset({DRM_MAJOR})

    def __init__(self, root: HostRoot, nodes: Mapping[tuple[int, int], str]) -> None:
        self.root = root
        self.nodes = nodes

    def opened(self, pid: int, fd: int, major: int, minor: int, tree: TreeGpus) -> None:
        key = self.nodes.get((major, minor))
        if key is None:
            return
        text = read_text(self.root, "proc", str(pid), "fdinfo", str(fd))
        client_key, client = drm_client(text) if text is not None else (None, None)
        if client_key is not None and client is not None:
            # One DRM client (a dup'd or inherited fd shares its struct file) counts once.
            tree.holding(key).clients.setdefault(client_key, client)


def read(host: HostGpus, libraries: bool) -> DrmReading:
    """DRM nodes (``card<N>``, ``renderD<N>``) and their PCI devices, from ``/sys/class/drm``."""
    door, base = host.door, ("sys", "class", "drm")
    cards: list[tuple[int, Device]] = []
    for name in door.kernel_directory(*base):
        if not re.fullmatch(r"(card|renderD)\d+", name):
            continue
        major, _, minor = (read_text(door, *base, name, "dev") or "").strip().partition(":")
        if number(major) != DRM_MAJOR or number(minor) is None:
            continue
        device_dir = (*base, name, "device")
        pci = normal_pci(link_name(door, *device_dir) or "")
        device = host.by_pci(pci)
        if device is None:
            vendor = _VENDORS.get((read_text(door, *device_dir, "vendor") or "").strip(), "other")
            product = (read_text(door, *device_dir, "product_name") or "").strip()
            driver = link_name(door, *device_dir, "driver")
            model = (read_text(door, *device_dir, "device") or "").strip()
            label = product or " ".join(part for part in (driver, model) if part) or None
            key = f"pci:{pci}" if pci else f"drm:{name}"
            device = Device(key=key, vendor=vendor, name=label, pci=pci)
            device.total = number(read_text(door, *device_dir, "mem_info_vram_total"))
            device.used = number(read_text(door, *device_dir, "mem_info_vram_used"))
            power, device.power_problem, energy, device.energy_problem = hwmon(door, *device_dir)
            device.power_watts, device.energy_joules = power, energy
            host.devices[key] = device
            cards.append((int(minor), device))
        host.nodes[(DRM_MAJOR, int(minor))] = device.key
    # Not NVIDIA: in the order of their DRM nodes (a later vendor may number them its own way).
    counters: dict[Vendor, int] = {}
    for _minor, device in sorted(cards, key=lambda item: item[0]):
        if device.index is None and device.vendor != "nvidia":
            device.index = counters.get(device.vendor, 0)
            counters[device.vendor] = device.index + 1
    return DrmReading(door, host.nodes)
