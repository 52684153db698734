"""What a GPU vendor module supplies to the reader, as nvtop's ``gpu_vendor`` does: the devices it
finds under a root, the device-node numbers that tie a process's open file to one of them, what
else an open file of its says (memory, a compute stack in use), and the driver's own lists of the
processes on its devices when it has them. The reader (``gpus/reader.py``) asks each registered
vendor in turn and names none of them; a vendor reads its files through the helpers here, through
the host's root (:class:`~enginespec._host.root.HostRoot`, the door of every read of a host)."""

from __future__ import annotations

import functools
import os
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from enginespec._host.root import HostRoot, host_root
from enginespec.definition.accelerators import Vendor

#: Where a tree's bytes on a device (or, for ``fd``, only the device) came from.
GpuSource = Literal["nvml", "fdinfo", "kfd", "fd"]

_READ_LIMIT = 1 << 16


# -- reading under a root ------------------------------------------------------------------------


def read_text(root: HostRoot, *parts: str) -> str | None:
    """The kernel file at ``ROOT/PARTS`` (its first 64 KiB), or ``None`` when unreadable."""
    data = root.kernel_file(*parts, limit=_READ_LIMIT)
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


def link_name(root: HostRoot, *parts: str) -> str | None:
    """The last part of the target of the link at ``ROOT/PARTS`` (a sysfs link), or ``None``."""
    target = root.kernel_link(*parts)
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
    #: the driver's power draw and energy counter (``gpus/energy.py``), each ``None`` with why
    power_watts: float | None = None
    energy_joules: float | None = None
    power_problem: str | None = "the driver reports no power"
    energy_problem: str | None = "the driver keeps no energy counter"
    #: where the counter wraps to zero (joules), when the driver says
    energy_range_joules: float | None = None
    #: each pid's share of the device's time (percent, NVML's per-process utilisation), or
    #: ``None`` with why
    utilization: Mapping[int, int] | None = None
    utilization_problem: str | None = "the driver reports no per-process utilisation"


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

    @functools.cached_property
    def _by_pid(self) -> Mapping[int, tuple[tuple[str, int | None], ...]]:
        """Each listed pid's devices and bytes (a tree's pids are looked up, not every list read)."""
        found: dict[int, list[tuple[str, int | None]]] = {}
        for key, listed in self.by_device.items():
            for pid, size in (listed or {}).items():
                found.setdefault(pid, []).append((key, size))
        return {pid: tuple(entries) for pid, entries in found.items()}

    def holdings(self, pids: Iterable[int]) -> dict[str, Holding]:
        """What the lists say ``pids`` hold, by device."""
        found: dict[str, Holding] = {}
        for pid in set(pids):
            for key, size in self._by_pid.get(pid, ()):
                found.setdefault(key, Holding()).account(pid, size, self.source)
        return found

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
    name (``/proc/devices``), and each vendor's reading, in the order the vendors are asked (and
    by the majors it answers for)."""

    root: str
    majors: Mapping[str, set[int]]
    devices: dict[str, Device] = field(default_factory=dict)
    nodes: dict[tuple[int, int], str] = field(default_factory=dict)
    readings: list[VendorReading] = field(default_factory=list)
    by_major: dict[int, list[VendorReading]] = field(default_factory=dict)
    #: the reader of the host under ``root``, every vendor's reads go through
    door: HostRoot = field(init=False)

    def __post_init__(self) -> None:
        self.door = host_root(self.root)

    def add(self, reading: VendorReading) -> None:
        self.readings.append(reading)
        for major in reading.majors:
            self.by_major.setdefault(major, []).append(reading)

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

    #: The character device majors that are the vendor's (its GPUs' nodes, its compute stack's):
    #: only open devices of these are handed to :meth:`opened` and :meth:`holds_gpu`.
    majors: frozenset[int]

    @property
    def lists(self) -> ProcessLists | None:
        """The driver's process lists, while they answer (a pid holding only devices of the
        vendor's majors then has its open files listed again less often)."""
        return None

    def opened(self, pid: int, fd: int, major: int, minor: int, tree: TreeGpus) -> None:
        """Adds to ``tree`` what ``pid``'s open character device ``fd`` (``major``, ``minor``, a
        major of the vendor's) says: memory, a compute stack in use. The device a node in
        ``HostGpus.nodes`` is, the reader ties to the pid itself."""

    def holds_gpu(self, major: int, minor: int) -> bool:
        """Whether a process holding this character device (a major of the vendor's) holds one of
        its GPUs (how a ledger finds the processes that are no engine's)."""
        return True

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
