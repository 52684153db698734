"""What a GPU vendor module supplies to the reader, as nvtop's ``gpu_vendor`` does: the devices it
finds under a root, the device-node numbers that tie a process's open file to one of them, what
else an open file of its says (memory, a compute stack in use), and the driver's own lists of the
processes on its devices when it has them. The reader (``gpus/reader.py``) asks each registered
vendor in turn and names none of them; a vendor reads its files through the helpers here, under
the host's root."""

from __future__ import annotations

import os
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from enginespec._host.procfiles import kernel_link, read_kernel_file
from enginespec.definition.accelerators import Vendor

#: Where a tree's bytes on a device (or, for ``fd``, only the device) came from.
GpuSource = Literal["nvml", "fdinfo", "kfd", "fd"]

_READ_LIMIT = 1 << 16


# -- reading under a root ------------------------------------------------------------------------


def read_text(*parts: str) -> str | None:
    """The kernel file at the joined path (its first 64 KiB), or ``None`` when unreadable."""
    data = read_kernel_file(os.path.join(*parts), _READ_LIMIT)
    return None if data is None else data.decode("utf-8", "replace")


def number(text: str | None, base: int = 10) -> int | None:
    """A non-negative integer written in ``text``, or ``None``."""
    if text is None:
        return None
    try:
        value = int(text.strip(), base)
    except ValueError:
        return None
    return value if value >= 0 else None


def link_name(*parts: str) -> str | None:
    """The last part of the target of the link at the joined path (a sysfs link), or ``None``."""
    target = kernel_link(os.path.join(*parts))
    return None if target is None else os.path.basename(target)


# -- the host's devices --------------------------------------------------------------------------


@dataclass
class Device:
    """One GPU (or MIG instance) as the vendors found it; ``key`` is its stable key (see
    :class:`~enginespec.gpus.reader.GpuUse`)."""

    key: str
    vendor: Vendor
    name: str | None
    pci: str | None
    index: int | None = None
    mig_index: int | None = None
    parent: str | None = None
    total: int | None = None
    used: int | None = None
    #: why its processes' bytes are unknown (NVML could not list them), or ``None``
    problem: str | None = None


@dataclass(frozen=True)
class ProcessLists:
    """A driver's own lists of the processes on its vendor's devices (NVIDIA's NVML): while they
    answer they say which of those devices a tree uses and with how many bytes, whatever its
    open files say."""

    vendor: Vendor
    source: GpuSource
    #: per device key, each listed pid's bytes (``None``: unknown); ``None``: that device's
    #: processes could not be listed (its holders are then known from their open files).
    by_device: Mapping[str, Mapping[int, int | None] | None]
    #: the character device majors whose holders the lists follow: a pid holding only those has
    #: its open files listed again less often.
    majors: frozenset[int]

    def answer_for(self, device: Device) -> bool:
        """Whether the lists say who holds ``device`` (a device of their vendor not known to have
        failed to list)."""
        return device.vendor == self.vendor and not (
            device.key in self.by_device and self.by_device[device.key] is None
        )


@dataclass
class HostGpus:
    """One reading of the host's GPUs under ``root``: the devices by key, the device nodes
    (character device major, minor) that are each device, the character device majors by driver
    name (``/proc/devices``), and each vendor's reading, in the order the vendors are asked."""

    root: str
    majors: Mapping[str, set[int]]
    devices: dict[str, Device] = field(default_factory=dict)
    nodes: dict[tuple[int, int], str] = field(default_factory=dict)
    readings: list[VendorReading] = field(default_factory=list)

    def by_pci(self, pci: str | None) -> Device | None:
        """The GPU (not a MIG instance) at that PCI bus id, if a vendor found it."""
        return next((d for d in self.devices.values() if pci and d.pci == pci and d.parent is None), None)

    def rekey(self, device: Device, key: str) -> None:
        """Gives ``device`` the key a later source knows it by (NVML's UUID for a GPU whose procfs
        entry had none); its nodes follow."""
        del self.devices[device.key]
        for node, known in self.nodes.items():
            if known == device.key:
                self.nodes[node] = key
        device.key = key
        self.devices[key] = device

    @property
    def lists(self) -> tuple[ProcessLists, ...]:
        """The process lists of the vendors that have them now."""
        return tuple(reading.lists for reading in self.readings if reading.lists is not None)


# -- what a process tree holds -------------------------------------------------------------------


@dataclass
class Client:
    """The memory one client of a device reports for its open file (DRM fdinfo): ``local`` when
    the device has memory of its own, where host memory is spilled memory."""

    device_bytes: int | None = None
    host_bytes: int | None = None
    evicted: int = 0
    local: bool = False


@dataclass
class Holding:
    """What a tree holds of one device: its pids holding it, the bytes a driver accounts to each
    of them (and where those came from), and the memory its clients report, each client once."""

    pids: set[int] = field(default_factory=set)
    accounted: dict[int, int | None] = field(default_factory=dict)
    accounted_by: GpuSource | None = None
    clients: dict[Hashable, Client] = field(default_factory=dict)

    def account(self, pid: int, size: int | None, source: GpuSource) -> None:
        self.pids.add(pid)
        self.accounted[pid] = size
        self.accounted_by = source


@dataclass
class TreeGpus:
    """What one tree's open files say, as the vendors read them: the devices it holds, and per
    vendor whose compute stack it uses, what to say when none of that vendor's devices is found."""

    holdings: dict[str, Holding] = field(default_factory=dict)
    unknown: dict[Vendor, str] = field(default_factory=dict)

    def holding(self, key: str) -> Holding:
        return self.holdings.setdefault(key, Holding())


# -- the protocol --------------------------------------------------------------------------------


class VendorReading(Protocol):
    """One vendor's answers for one reading of the host (kept until the devices are read again).
    Subclass it to keep its defaults: no process lists, nothing more to say of a device."""

    @property
    def lists(self) -> ProcessLists | None:
        return None

    def opened(self, pid: int, fd: int, major: int, minor: int, tree: TreeGpus) -> None:
        """Adds to ``tree`` what ``pid``'s open character device ``fd`` (``major``, ``minor``) says,
        when it is this vendor's: memory, a compute stack in use. The device a node in
        ``HostGpus.nodes`` is, the reader ties to the pid itself."""

    def holds_gpu(self, major: int, minor: int) -> bool:
        """Whether a process holding this character device holds one of the vendor's GPUs (how a
        ledger finds the processes that are no engine's)."""
        return False

    def device_problem(self, device: Device) -> str | None:
        """Why the bytes the processes on ``device`` hold are unknown, when this vendor knows."""
        return None


class GpuVendor(Protocol):
    """A vendor module (the module itself is the vendor: ``gpus/nvidia.py``, ``gpus/drm.py``...)."""

    def read(self, host: HostGpus, libraries: bool) -> VendorReading:
        """Adds the vendor's devices under ``host.root`` to ``host`` (joining those an earlier
        vendor found, by PCI bus id or device node) with their nodes, and answers for them.
        ``libraries``: whether a driver's library (NVML) may be loaded."""
        ...
