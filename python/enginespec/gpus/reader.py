"""Which GPUs the engines hold, and how much of them: devices from the drivers' own files, the
devices a process tree holds from its open character devices, and memory from DRM fdinfo, ROCm's
KFD and, for NVIDIA, NVML when its library can be loaded (never required).

Every read goes under one root directory (``/`` on a live host), so a directory laid out like
``/`` (``ROOT/proc``, ``ROOT/sys``, with real character devices for ``fd/*`` links to point at) is
a host these functions read the same way. Only the pids they are given are read.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict

from enginespec._host.backend import proc_root
from enginespec._host.procfiles import kernel_link, list_kernel_directory, proc_path, read_kernel_file
from enginespec.gpus.ids import UUID, normal_pci
from enginespec.gpus.nvml import NvmlDevice, query
from enginespec.untrusted.boundary import contained

Vendor = Literal["nvidia", "amd", "intel", "other"]
GpuSource = Literal["nvml", "fdinfo", "kfd", "fd"]

#: The file NVML is loaded from instead of ``libnvidia-ml.so.1``.
NVML_LIBRARY_ENV = "ENGINESPEC_NVML_LIBRARY"
#: How often memory (NVML, fdinfo, KFD) and the host's devices are read again for a poll.
MEMORY_REFRESH_SECONDS = 2.0
#: How often the open files of a pid of an unchanged engine tree are listed again: one holding a
#: GPU driver's device keeps it (engines open their GPUs once), one holding none may still open
#: one (a worker initialising CUDA). A tree that changes is listed again at once.
FD_REFRESH_SECONDS = 30.0
NO_GPU_FD_REFRESH_SECONDS = 10.0
#: ... and of one holding only NVIDIA devices while NVML answers: NVML's process lists, read with
#: the memory, say which NVIDIA GPUs a tree uses (a GPU it starts using included), not its fds.
NVML_HOLDER_FD_REFRESH_SECONDS = 120.0
#: Character device majors that are no GPU driver's: mem (/dev/null), tty, /dev/tty, pts.
_NOT_GPU_MAJORS = (1, 4, 5, 136)

_NVIDIA_MAJOR = 195  # /dev/nvidia<minor>, nvidia-modeset 254, nvidiactl 255 (nv.c)
_NVIDIA_CONTROL_MINORS = (254, 255)
_DRM_MAJOR = 226  # /dev/dri/card<N>, /dev/dri/renderD<N> (include/uapi/drm/drm.h: DRM_MAJOR)
_VENDORS: Mapping[str, Vendor] = {"0x10de": "nvidia", "0x1002": "amd", "0x8086": "intel"}
_READ_LIMIT = 1 << 16
_UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


class GpuUse(BaseModel):
    """A GPU an engine's process tree holds. ``device`` is the device's stable key (the NVIDIA
    UUID, ``MIG-...`` for a MIG instance, else ``pci:<domain:bus:dev.fn>``); ``index`` the
    device's number as NVML (PCI bus order) or ROCm (KFD node order) count it, ``mig_index`` the
    instance's slot on a MIG GPU. ``memory_bytes`` is the device memory the tree holds, summed with
    no pid or DRM client counted twice: ``None`` when nothing says (NVIDIA without NVML), never a
    guess. ``spilled_bytes`` is what a DRM driver reports held in host memory instead (GTT,
    system, evicted VRAM). ``pids`` are the tree's pids holding it; ``source`` says where the bytes
    (or, for ``fd``, only the device) came from."""

    model_config = ConfigDict(frozen=True)

    device: str
    index: int | None
    mig_index: int | None = None
    vendor: Vendor
    name: str | None
    pci_bus_id: str | None
    memory_bytes: int | None
    spilled_bytes: int | None = None
    pids: tuple[int, ...]
    source: GpuSource


class GpuProcess(BaseModel):
    """A process on a GPU that is no engine's (a training job, a desktop): ``name`` is its
    ``comm``, as the kernel has it."""

    model_config = ConfigDict(frozen=True)

    pid: int
    name: str | None
    memory_bytes: int | None


class GpuDevice(BaseModel):
    """One GPU of the host (or one MIG instance, with its GPU's key in ``parent``) and who holds
    it: ``engines`` maps each engine's id to the bytes its tree holds (``None``: unknown),
    ``reclaimable`` are those of them that are orphans (their server is gone: stopping them frees
    the memory). ``memory_used_bytes`` is the driver's figure; ``unattributed_bytes`` is what of it
    neither an engine nor a listed process accounts for (``None`` when the used figure or a holder's
    bytes are unknown)."""

    model_config = ConfigDict(frozen=True)

    device: str
    index: int | None
    mig_index: int | None = None
    parent: str | None = None
    vendor: Vendor
    name: str | None
    pci_bus_id: str | None
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    engines: Mapping[str, int | None]
    reclaimable: tuple[str, ...] = ()
    other_processes: tuple[GpuProcess, ...] = ()
    unattributed_bytes: int | None
    #: why the device's bytes are unknown (``NVML not loaded (...)``), or ``None``.
    problem: str | None = None


#: What an engine tree holds: its GPUs, and why the set is not known when it is not.
Held = tuple[tuple[GpuUse, ...], str | None]


# -- reading under a root ------------------------------------------------------------------------


def _path(root: str, *parts: str) -> str:
    return os.path.join(root, *parts)


def _read(path: str) -> str | None:
    data = read_kernel_file(path, _READ_LIMIT)
    return None if data is None else data.decode("utf-8", "replace")


def _int(text: str | None, base: int = 10) -> int | None:
    if text is None:
        return None
    try:
        value = int(text.strip(), base)
    except ValueError:
        return None
    return value if value >= 0 else None


def _link_name(path: str) -> str | None:
    target = kernel_link(path)
    return None if target is None else os.path.basename(target)


def _char_devices(root: str) -> dict[str, set[int]]:
    """Character device majors by driver name, from ``/proc/devices``."""
    majors: dict[str, set[int]] = {}
    text = _read(_path(root, "proc", "devices")) or ""
    block = text.find("Block devices:")
    for line in text[: block if block >= 0 else None].splitlines():
        number, _, name = line.strip().partition(" ")
        if number.isdigit() and name:
            majors.setdefault(name.strip(), set()).add(int(number))
    return majors


# -- the host's devices --------------------------------------------------------------------------


@dataclass
class _Device:
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


@dataclass
class _Host:
    """One reading of the host's GPUs: the devices by key and the ways to find them."""

    devices: dict[str, _Device] = field(default_factory=dict)
    nvidia_minors: dict[int, str] = field(default_factory=dict)
    drm_minors: dict[int, str] = field(default_factory=dict)
    kfd_ids: dict[int, str] = field(default_factory=dict)
    majors: dict[str, set[int]] = field(default_factory=dict)
    nvml: tuple[NvmlDevice, ...] | None = None
    nvml_problem: str | None = None


def _information(text: str) -> dict[str, str]:
    """The fields of a ``/proc/driver/nvidia/gpus/<bus>/information`` file (``Key: \\t value``
    lines, as the driver's nv-procfs.c writes them)."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def _read_nvidia(root: str, host: _Host) -> None:
    base = _path(root, "proc", "driver", "nvidia", "gpus")
    found = []
    for bus in list_kernel_directory(base):
        info = _information(_read(_path(base, bus, "information")) or "")
        pci = normal_pci(info.get("Bus Location", bus))
        minor = _int(info.get("Device Minor"))
        uuid = info.get("GPU UUID", "")
        key = uuid if UUID.fullmatch(uuid) else f"pci:{pci or bus}"
        found.append((pci or "", _Device(key=key, vendor="nvidia", name=info.get("Model") or None, pci=pci)))
        if minor is not None and minor not in _NVIDIA_CONTROL_MINORS:
            host.nvidia_minors[minor] = key
    # NVML numbers GPUs in PCI bus order (its default, CUDA_DEVICE_ORDER=PCI_BUS_ID's order).
    for index, (_pci, device) in enumerate(sorted(found, key=lambda item: item[0])):
        device.index = index
        host.devices[device.key] = device


def _by_pci(host: _Host, pci: str | None) -> _Device | None:
    return next((d for d in host.devices.values() if pci and d.pci == pci and d.parent is None), None)


def _read_drm(root: str, host: _Host) -> None:
    """DRM nodes (``card<N>``, ``renderD<N>``) and their PCI devices, from ``/sys/class/drm``."""
    base = _path(root, "sys", "class", "drm")
    cards: list[tuple[int, _Device]] = []
    for name in list_kernel_directory(base):
        if not re.fullmatch(r"(card|renderD)\d+", name):
            continue
        major, _, minor = (_read(_path(base, name, "dev")) or "").strip().partition(":")
        if _int(major) != _DRM_MAJOR or _int(minor) is None:
            continue
        device_dir = _path(base, name, "device")
        pci = normal_pci(_link_name(device_dir) or "")
        device = _by_pci(host, pci)
        if device is None:
            vendor = _VENDORS.get((_read(_path(device_dir, "vendor")) or "").strip(), "other")
            product = (_read(_path(device_dir, "product_name")) or "").strip()
            driver = _link_name(_path(device_dir, "driver"))
            model = (_read(_path(device_dir, "device")) or "").strip()
            label = product or " ".join(part for part in (driver, model) if part) or None
            key = f"pci:{pci}" if pci else f"drm:{name}"
            device = _Device(key=key, vendor=vendor, name=label, pci=pci)
            device.total = _int(_read(_path(device_dir, "mem_info_vram_total")))
            device.used = _int(_read(_path(device_dir, "mem_info_vram_used")))
            host.devices[key] = device
            cards.append((int(minor), device))
        host.drm_minors[int(minor)] = device.key
    # Not NVIDIA and not numbered by ROCm below: in the order of their DRM nodes.
    counters: dict[Vendor, int] = {}
    for _minor, device in sorted(cards, key=lambda item: item[0]):
        if device.index is None and device.vendor != "nvidia":
            device.index = counters.get(device.vendor, 0)
            counters[device.vendor] = device.index + 1


def _read_kfd(root: str, host: _Host) -> None:
    """ROCm's GPUs (KFD topology nodes with a ``gpu_id``), numbered as ROCm numbers them."""
    base = _path(root, "sys", "class", "kfd", "kfd", "topology", "nodes")
    index = 0
    for node in sorted(list_kernel_directory(base), key=lambda name: _int(name) or 0):
        gpu_id = _int(_read(_path(base, node, "gpu_id")))
        if not gpu_id:
            continue  # a CPU node
        properties = dict(
            line.split(None, 1) for line in (_read(_path(base, node, "properties")) or "").splitlines()
            if len(line.split(None, 1)) == 2
        )  # fmt: skip
        key = host.drm_minors.get(_int(properties.get("drm_render_minor")) or -1)
        if key is not None:
            host.kfd_ids[gpu_id] = key
            host.devices[key].index = index
        index += 1


def read_host(root: str = "/", *, nvml: bool = True) -> _Host:
    """The host's GPUs: NVIDIA from the driver's procfs (and NVML), others from DRM and KFD."""
    host = _Host()
    _read_nvidia(root, host)
    if nvml:
        host.nvml, host.nvml_problem = nvml_devices(root, bool(host.devices))
        for found in host.nvml or ():
            _merge_nvml(host, found)
    _read_drm(root, host)
    _read_kfd(root, host)
    host.majors = _char_devices(root)
    return host


def _merge_nvml(host: _Host, found: NvmlDevice) -> None:
    parent = host.devices.get(found.parent_uuid or "")
    device = host.devices.get(found.uuid) or _by_pci(host, found.pci if found.parent_uuid is None else None)
    if device is None:
        device = _Device(key=found.uuid, vendor="nvidia", name=found.name, pci=found.pci)
        host.devices[found.uuid] = device
    elif device.key != found.uuid:  # the procfs had no UUID: the device is known by it now
        del host.devices[device.key]
        host.nvidia_minors = {m: found.uuid if k == device.key else k for m, k in host.nvidia_minors.items()}
        device.key = found.uuid
        host.devices[found.uuid] = device
    device.name = found.name or device.name
    device.pci = found.pci or (parent.pci if parent else device.pci)
    device.index = found.index
    device.mig_index = found.mig_index
    device.parent = found.parent_uuid
    device.total, device.used = found.total, found.used
    device.problem = found.problem


# -- NVML ----------------------------------------------------------------------------------------


def nvml_devices(
    root: str = "/", nvidia_listed: bool = True
) -> tuple[tuple[NvmlDevice, ...] | None, str | None]:
    """NVML's devices and their processes, or ``None`` and why. NVML is tried when
    ``ENGINESPEC_NVML_LIBRARY`` names a library, or on a live host (``root`` ``/``) whose NVIDIA
    driver lists a GPU."""
    path = os.environ.get(NVML_LIBRARY_ENV)
    if not path:
        if os.path.realpath(root) != "/" or not nvidia_listed:
            return None, None
        path = "libnvidia-ml.so.1"
    return query(path)


# -- what a process tree holds -------------------------------------------------------------------


@dataclass(frozen=True)
class _Fds:
    """The character devices among one pid's open files: (fd, major, minor)."""

    devices: tuple[tuple[int, int, int], ...]
    problem: str | None = None


def _open_devices(root: str, pid: int) -> _Fds | None:
    """The character devices ``/proc/PID/fd/*`` point at, by ``st_rdev``, as the backend lists
    them; ``None`` for a vanished process."""
    found, denied = proc_root(_path(root, "proc")).open_devices(pid)
    if found is not None:
        return _Fds(tuple(found))
    return _Fds((), f"cannot read {proc_path(pid, 'fd')}: permission denied") if denied else None


@dataclass
class _Client:
    device_bytes: int | None = None
    host_bytes: int | None = None
    evicted: int = 0
    local: bool = False


#: The character devices (fd, major, minor) of the pids whose open files a scan listed.
_Opened = Mapping[int, Sequence[tuple[int, int, int]]]
#: The devices handed over for each pid of a tree (``None``: not listed by the scan).
_Given = tuple[tuple[tuple[int, int, int], ...] | None, ...]


def _size(text: str) -> int | None:
    number, _, unit = text.strip().partition(" ")
    value = _int(number)
    factor = _UNITS.get(unit.strip())
    return None if value is None or factor is None else value * factor


def drm_client(text: str) -> tuple[tuple[str, str] | None, _Client]:
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
    client = _Client(evicted=_size(fields.get("amd-evicted-vram", "")) or 0)
    for region, size in regions.items():
        if region.startswith(("vram", "local", "stolen-local")):
            client.device_bytes = (client.device_bytes or 0) + size
            client.local = True
        elif region.startswith(("gtt", "system", "cpu", "stolen")):
            client.host_bytes = (client.host_bytes or 0) + size
    return client_key, client


@dataclass
class _Holding:
    pids: set[int] = field(default_factory=set)
    nvml_bytes: list[int | None] = field(default_factory=list)
    clients: dict[tuple[str, str], _Client] = field(default_factory=dict)
    kfd: dict[int, int] = field(default_factory=dict)  # pid -> VRAM bytes


def _gpu_use(device: _Device, holding: _Holding, nvml: bool) -> GpuUse:
    spilled = None
    if nvml:
        known = holding.nvml_bytes
        memory = None if any(b is None for b in known) else sum(b or 0 for b in known)
        source: GpuSource = "nvml"
    elif holding.kfd:
        memory, source = sum(holding.kfd.values()), "kfd"
    else:
        memory, source = None, "fd"
    clients = holding.clients.values()
    if clients and any(c.device_bytes is not None or c.host_bytes is not None for c in clients):
        local = any(c.local for c in clients)
        device_bytes = sum(c.device_bytes or 0 for c in clients)
        host_bytes = sum(c.host_bytes or 0 for c in clients)
        if local:
            spilled = host_bytes + sum(c.evicted for c in clients)
        else:  # an integrated GPU: system memory is its memory
            device_bytes += host_bytes
        if source == "fd":
            memory, source = device_bytes, "fdinfo"
    return GpuUse(
        device=device.key,
        index=device.index,
        mig_index=device.mig_index,
        vendor=device.vendor,
        name=device.name,
        pci_bus_id=device.pci,
        memory_bytes=memory,
        spilled_bytes=spilled,
        pids=tuple(sorted(holding.pids)),
        source=source,
    )


def _sort_key(use: GpuUse) -> tuple[int, int, int, str]:
    order = ("nvidia", "amd", "intel", "other").index(use.vendor)
    return (order, use.index if use.index is not None else 1 << 30, use.mig_index or -1, use.device)


class GpuReader:
    """Reads what engine trees hold on a host under ``root``, remembering between polls. A scan
    hands over the character devices its backend listed with each tree's sockets (its read set's
    ``devices``); a pid it did not list has its open files listed here, again every
    :data:`FD_REFRESH_SECONDS` for an unchanged tree (every :data:`NO_GPU_FD_REFRESH_SECONDS` for
    a pid holding no GPU yet, every :data:`NVML_HOLDER_FD_REFRESH_SECONDS` for one holding only
    NVIDIA's while NVML answers). Memory and devices are read every
    :data:`MEMORY_REFRESH_SECONDS`, and at once when a tree's devices change. Nothing is read for a
    tree that holds no character device of a GPU driver beyond its open files."""

    def __init__(self, root: str = "/", *, nvml: bool = True) -> None:
        self.root = root
        self.nvml = nvml
        self._fds: dict[int, tuple[float, _Fds | None]] = {}
        self._host: _Host | None = None
        self._host_due = -1.0
        #: per tree: when to read it again, the devices handed over it was read with, and what it holds
        self._held: dict[tuple[int, ...], tuple[float, _Given, Held]] = {}

    @property
    def host(self) -> _Host:
        now = time.monotonic()
        if self._host is None or now >= self._host_due:
            self._host = read_host(self.root, nvml=self.nvml)
            self._host_due = now + MEMORY_REFRESH_SECONDS
        return self._host

    def _fds_of(self, pid: int, now: float, fresh: bool, scanned: _Opened) -> _Fds | None:
        listed = scanned.get(pid)
        if listed is not None:  # the scan's backend listed them with the tree's sockets
            return _Fds(tuple(listed))
        known = self._fds.get(pid)
        if known is None or fresh or now >= known[0]:
            fds = _open_devices(self.root, pid)
            known = (now + self._fd_refresh(fds), fds)
            self._fds[pid] = known
        return known[1]

    def _fd_refresh(self, fds: _Fds | None) -> float:
        """Seconds until a pid's open files are listed again."""
        majors = {d[1] for d in fds.devices if d[1] not in _NOT_GPU_MAJORS} if fds is not None else set()
        if not majors:
            return NO_GPU_FD_REFRESH_SECONDS
        host = self._host
        nvidia = {_NVIDIA_MAJOR} | (host.majors.get("nvidia-uvm", set()) if host is not None else set())
        if host is not None and host.nvml is not None and majors <= nvidia:
            return NVML_HOLDER_FD_REFRESH_SECONDS
        return FD_REFRESH_SECONDS

    def read(self, trees: Sequence[Sequence[int]], opened: _Opened | None = None) -> list[Held]:
        """What each tree (its pids, the server first) holds, in order. ``opened``: the character
        devices (fd, major, minor) of the pids whose open files were already listed."""
        now = time.monotonic()
        opened = opened or {}
        wanted = {tuple(tree) for tree in trees}
        fresh = {pid for tree in wanted if tree not in self._held for pid in tree}
        if fresh or len(wanted) != len(self._held):  # else the same trees as before: same pids
            alive = {pid for tree in wanted for pid in tree}
            self._fds = {pid: v for pid, v in self._fds.items() if pid in alive}
        result = []
        for tree in trees:
            key = tuple(tree)
            known = self._held.get(key)
            given = tuple(tuple(opened[pid]) if pid in opened else None for pid in key)
            if known is None or now >= known[0] or known[1] != given or any(pid in fresh for pid in key):
                held = self._held_by(key, now, fresh, opened)
                known = (now + MEMORY_REFRESH_SECONDS, given, held)
                self._held[key] = known
            result.append(known[2])
        if len(self._held) != len(wanted):
            self._held = {key: value for key, value in self._held.items() if key in wanted}
        return result

    def _held_by(self, pids: tuple[int, ...], now: float, fresh: set[int], scanned: _Opened) -> Held:
        """What the tree holds (:meth:`_read_tree`), or nothing, with why, when that fails."""
        return contained(
            "GPU attribution",
            lambda: self._read_tree(pids, now, fresh, scanned),
            lambda reason: ((), reason),
        )

    def _read_tree(self, pids: tuple[int, ...], now: float, fresh: set[int], scanned: _Opened) -> Held:
        problems: list[str] = []
        opened: dict[int, tuple[tuple[int, int, int], ...]] = {}
        for pid in dict.fromkeys(pids):
            fds = self._fds_of(pid, now, pid in fresh, scanned)
            if fds is None:
                continue
            if fds.problem:
                problems.append(fds.problem)
            devices = tuple(d for d in fds.devices if d[1] not in _NOT_GPU_MAJORS)
            if devices:
                opened[pid] = devices
        nvml_pids = set(pids)
        host = self.host  # read at most every MEMORY_REFRESH_SECONDS, whatever the trees
        if not opened and host.nvml is None:
            return (), "; ".join(problems) or None
        holdings: dict[str, _Holding] = {}
        uses_cuda = uses_rocm = False
        uvm = host.majors.get("nvidia-uvm", set())
        kfd = host.majors.get("kfd", set())
        for pid, devices in opened.items():
            for fd, major, minor in devices:
                key = None
                if major == _NVIDIA_MAJOR and minor not in _NVIDIA_CONTROL_MINORS:
                    key = host.nvidia_minors.get(minor)
                    uses_cuda = True
                elif major in uvm:
                    uses_cuda = True
                elif major in kfd:
                    uses_rocm = True
                    self._read_kfd(host, pid, holdings)
                elif major == _DRM_MAJOR:
                    key = host.drm_minors.get(minor)
                    if key is not None:
                        self._read_fdinfo(pid, fd, holdings.setdefault(key, _Holding()))
                if key is not None:
                    holdings.setdefault(key, _Holding()).pids.add(pid)
        nvidia_by_nvml: dict[str, _Holding] = {}
        unlisted = {listed.uuid for listed in host.nvml or () if listed.processes is None}
        for listed in host.nvml or ():
            for process in listed.processes or ():
                if process.pid in nvml_pids:
                    holding = nvidia_by_nvml.setdefault(listed.uuid, _Holding())
                    holding.pids.add(process.pid)
                    holding.nvml_bytes.append(process.memory_bytes)
        uses = []
        for key, holding in holdings.items():
            device = host.devices[key]
            if device.vendor == "nvidia" and nvidia_by_nvml and key not in unlisted:
                continue  # NVML says which NVIDIA GPUs (and MIG instances) the tree uses
            uses.append(_gpu_use(device, holding, nvml=False))
        for key, holding in nvidia_by_nvml.items():
            listed_device = host.devices.get(key)
            if listed_device is not None:
                uses.append(_gpu_use(listed_device, holding, nvml=True))
        if uses_cuda and not any(u.vendor == "nvidia" for u in uses):
            problems.append("uses CUDA (holds nvidia-uvm or a GPU the driver does not list): device unknown")
        if uses_rocm and not any(u.vendor == "amd" for u in uses):
            problems.append("uses ROCm (holds /dev/kfd): device unknown")
        return tuple(sorted(uses, key=_sort_key)), "; ".join(problems) or None

    def _read_fdinfo(self, pid: int, fd: int, holding: _Holding) -> None:
        text = _read(_path(self.root, "proc", str(pid), "fdinfo", str(fd)))
        if text is None:
            return
        key, client = drm_client(text)
        if key is not None:
            # One DRM client (a dup'd or inherited fd shares its struct file) counts once.
            holding.clients.setdefault(key, client)

    def _read_kfd(self, host: _Host, pid: int, holdings: dict[str, _Holding]) -> None:
        """ROCm compute memory: ``/sys/class/kfd/kfd/proc/<pid>/vram_<gpu_id>`` (bytes)."""
        directory = _path(self.root, "sys", "class", "kfd", "kfd", "proc", str(pid))
        for name in list_kernel_directory(directory):
            gpu_id = _int(name[5:]) if name.startswith("vram_") else None
            key = host.kfd_ids.get(gpu_id) if gpu_id is not None else None
            size = _int(_read(_path(directory, name))) if key is not None else None
            if key is not None and size is not None:
                holding = holdings.setdefault(key, _Holding())
                holding.kfd[pid] = size
                holding.pids.add(pid)


def _comm(root: str, pid: int) -> str | None:
    text = _read(_path(root, "proc", str(pid), "comm"))
    return text.rstrip("\n") if text is not None else None


def _other_holders(root: str, skip: set[int], host: _Host) -> Iterable[int]:
    """Pids outside the engine trees holding a GPU driver's character device (every process's
    open files are listed: what ``enginespec gpus`` reads beyond a scan)."""
    gpu_majors = {_NVIDIA_MAJOR, _DRM_MAJOR, *host.majors.get("kfd", ())}
    for pid, _inode in sorted(proc_root(_path(root, "proc")).list_pids()):  # the backend's lister
        if pid in skip:
            continue
        fds = _open_devices(root, pid)
        if fds is not None and any(
            major in gpu_majors and not (major == _NVIDIA_MAJOR and minor in _NVIDIA_CONTROL_MINORS)
            for _fd, major, minor in fds.devices
        ):
            yield pid


@dataclass(frozen=True)
class EngineTree:
    """What the ledger needs of an engine: its id, its pids (server first), whether an orphan."""

    engine_id: str
    pids: tuple[int, ...]
    orphan: bool


def ledger(
    engines: Sequence[EngineTree],
    *,
    root: str = "/",
    nvml: bool = True,
    all_processes: bool = True,
    held: Sequence[Held] | None = None,
) -> tuple[GpuDevice, ...]:
    """One :class:`GpuDevice` per device of the host under ``root``, with the engines on it and,
    from NVML's lists (and, with ``all_processes``, from every process's open files), the other
    processes on it. ``held``: what the trees hold, when already read (a scan's records)."""
    reader = GpuReader(root, nvml=nvml)
    if held is None:
        held = reader.read([tree.pids for tree in engines])
    host = reader.host
    in_trees = {pid for tree in engines for pid in tree.pids}
    on_device: dict[str, dict[str, int | None]] = {key: {} for key in host.devices}
    orphans: dict[str, list[str]] = {key: [] for key in host.devices}
    for tree, (uses, _problem) in zip(engines, held, strict=True):
        for use in uses:
            on_device[use.device][tree.engine_id] = use.memory_bytes
            if tree.orphan:
                orphans[use.device].append(tree.engine_id)
    others: dict[str, dict[int, int | None]] = {key: {} for key in host.devices}
    for listed in host.nvml or ():
        for process in listed.processes or ():
            if process.pid not in in_trees:
                others[listed.uuid][process.pid] = process.memory_bytes
    if all_processes and host.devices:  # no GPU: nobody else to look for
        seen = {pid for found in others.values() for pid in found}
        extra = list(_other_holders(root, in_trees | seen, host))
        for pid, (uses, _problem) in zip(extra, reader.read([(pid,) for pid in extra]), strict=True):
            for use in uses:
                # NVML's lists are the whole truth for its GPUs: a process holding the device
                # file without a context there (nvidia-persistenced) holds no memory on it.
                if use.source != "fd" or use.vendor != "nvidia" or host.nvml is None:
                    others[use.device].setdefault(pid, use.memory_bytes)
    # A MIG GPU sums its instances.
    for device in host.devices.values():
        if device.parent is not None and device.parent in on_device:
            for engine_id, size in on_device[device.key].items():
                before = on_device[device.parent].get(engine_id, 0)
                on_device[device.parent][engine_id] = (
                    None if size is None or before is None else before + size
                )
            for pid, size in others[device.key].items():
                others[device.parent].setdefault(pid, size)
    result = []
    for device in sorted(host.devices.values(), key=_device_order):
        engines_here = on_device[device.key]
        processes = tuple(
            GpuProcess(pid=pid, name=_comm(root, pid), memory_bytes=size)
            for pid, size in sorted(others[device.key].items())
        )
        sizes = [*engines_here.values(), *(p.memory_bytes for p in processes)]
        unattributed = None
        if device.used is not None and device.problem is None and all(size is not None for size in sizes):
            unattributed = max(device.used - sum(size or 0 for size in sizes), 0)
        result.append(
            GpuDevice(
                device=device.key,
                index=device.index,
                mig_index=device.mig_index,
                parent=device.parent,
                vendor=device.vendor,
                name=device.name,
                pci_bus_id=device.pci,
                memory_total_bytes=device.total,
                memory_used_bytes=device.used,
                engines=engines_here,
                reclaimable=tuple(orphans[device.key]),
                other_processes=processes,
                unattributed_bytes=unattributed,
                problem=device.problem or (_nvml_missing(host) if device.vendor == "nvidia" else None),
            )
        )
    return tuple(result)


def _nvml_missing(host: _Host) -> str | None:
    if host.nvml is not None:
        return None
    return host.nvml_problem or "NVML not used: per-process bytes unknown"


def _device_order(device: _Device) -> tuple[int, int, int, str]:
    order = ("nvidia", "amd", "intel", "other").index(device.vendor)
    index = device.index if device.index is not None else 1 << 30
    return (order, index, device.mig_index if device.mig_index is not None else -1, device.key)
