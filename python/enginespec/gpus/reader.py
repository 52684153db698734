"""Which GPUs the engines hold, and how much of them: the host's devices and what each process
tree holds, from every registered vendor (``gpus/nvidia.py``, ``gpus/drm.py``, ``gpus/amd.py``:
the drivers' own files, DRM fdinfo, ROCm's KFD, NVML when its library can be loaded), and the
devices a tree holds from its open character devices.

Every read goes under one root directory (``/`` on a live host), so a directory laid out like
``/`` (``ROOT/proc``, ``ROOT/sys``, with real character devices for ``fd/*`` links to point at) is
a host these functions read the same way. Only the pids they are given are read.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import get_args

from pydantic import BaseModel, ConfigDict

from enginespec._host.root import HOST_ROOT, host_root
from enginespec.definition.accelerators import Vendor
from enginespec.gpus import amd, drm, nvidia
from enginespec.gpus.attribution import (
    EnergyFrom,
    EnergyRule,
    Sample,
    Share,
    Window,
    sample,
    shares,
    window,
)
from enginespec.gpus.vendor import Device, GpuSource, GpuVendor, Holding, HostGpus, TreeGpus, read_text
from enginespec.untrusted.boundary import contained

#: The vendors asked, in this order: a later one joins the devices an earlier one found (DRM nodes
#: to the NVIDIA driver's GPUs by bus id, KFD's GPUs to their DRM render nodes). A new vendor is a
#: module here and its line in this list.
VENDORS: tuple[GpuVendor, ...] = (nvidia, drm, amd)

#: How often memory (NVML, fdinfo, KFD) and the host's devices are read again for a poll.
MEMORY_REFRESH_SECONDS = 2.0
#: How often the open files of a pid of an unchanged engine tree are listed again: one holding a
#: GPU driver's device keeps it (engines open their GPUs once), one holding none may still open
#: one (a worker initialising CUDA). A tree that changes is listed again at once.
FD_REFRESH_SECONDS = 30.0
NO_GPU_FD_REFRESH_SECONDS = 10.0
#: ... and of one holding only devices whose driver's process lists answer (NVIDIA's while NVML
#: does): the lists, read with the memory, say which of those GPUs a tree uses (a GPU it starts
#: using included), not its fds.
NVML_HOLDER_FD_REFRESH_SECONDS = 120.0
#: Character device majors that are no GPU driver's: mem (/dev/null), tty, /dev/tty, pts.
_NOT_GPU_MAJORS = (1, 4, 5, 136)
_VENDOR_ORDER: tuple[Vendor, ...] = get_args(Vendor)


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
    #: The tree's share of the device's power (watts, over the last window between two readings
    #: of the device; after one reading, of its power now) and the energy attributed to it while
    #: this reader watched (joules; ``None`` until two readings), by ``energy_rule``:
    #: ``utilization`` (its pids' share of NVML's per-process utilisation) or ``memory`` (its
    #: share of the device's memory in use); ``energy_from`` says whether the device's energy
    #: came from its counter or its power times the interval; ``energy_problem`` why a figure
    #: is ``None`` (docs/gpus.md, "Energy of engines").
    power_watts: float | None = None
    energy_joules: float | None = None
    energy_rule: EnergyRule | None = None
    energy_from: EnergyFrom | None = None
    energy_problem: str | None = None


#: GpuUse's fields that move with every reading of the device (not what the tree holds).
ENERGY_FIELDS = ("power_watts", "energy_joules", "energy_rule", "energy_from", "energy_problem")


def holdings(uses: Sequence[GpuUse]) -> list[dict[str, object]]:
    """What ``uses`` say a tree holds, without the power and energy that move with every
    reading (a watch tells of a change in what is held, not of every watt)."""
    return [use.model_dump(exclude=set(ENERGY_FIELDS)) for use in uses]


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
    #: The driver's power draw (watts) and energy counter (joules since the driver began
    #: counting: NVML's since it loaded, hwmon's since boot), each ``None`` with why in
    #: ``power_problem`` / ``energy_problem`` (docs/gpus.md, "Power and energy").
    power_watts: float | None = None
    energy_joules: float | None = None
    power_problem: str | None = None
    energy_problem: str | None = None
    #: the device's power no engine's share accounts for (other processes, the driver, idle):
    #: ``power_watts`` less the engines' ``GpuUse.power_watts``; ``None`` when either is unknown
    unattributed_power_watts: float | None = None


#: What an engine tree holds: its GPUs, and why the set is not known when it is not.
Held = tuple[tuple[GpuUse, ...], str | None]


# -- the host's devices ---------------------------------------------------------------------------


def _char_devices(root: str) -> dict[str, set[int]]:
    """Character device majors by driver name, from ``/proc/devices``."""
    majors: dict[str, set[int]] = {}
    text = read_text(host_root(root), "proc", "devices") or ""
    block = text.find("Block devices:")
    for line in text[: block if block >= 0 else None].splitlines():
        number, _, name = line.strip().partition(" ")
        if number.isdigit() and name:
            majors.setdefault(name.strip(), set()).add(int(number))
    return majors


def read_host(root: str = "/", *, nvml: bool = True) -> HostGpus:
    """The host's GPUs, from each vendor in :data:`VENDORS` in turn (``nvml``: whether NVML, a
    driver's library, may be loaded)."""
    host = HostGpus(root=root, majors=_char_devices(root))
    for vendor in VENDORS:
        host.add(vendor.read(host, nvml))
    return host


# -- what a process tree holds -------------------------------------------------------------------


@dataclass(frozen=True)
class _Fds:
    """The character devices among one pid's open files: (fd, major, minor)."""

    devices: tuple[tuple[int, int, int], ...]
    problem: str | None = None


def _open_devices(root: str, pid: int) -> _Fds | None:
    """The character devices ``/proc/PID/fd/*`` point at, by ``st_rdev``, as the backend lists
    them; ``None`` for a vanished process."""
    found, denied = host_root(root).procfs.open_devices(pid)
    if found is not None:
        return _Fds(tuple(found))
    # named as the process knows it: its own /proc/PID/fd
    return _Fds((), f"cannot read {HOST_ROOT.path(pid, 'fd')}: permission denied") if denied else None


#: The character devices (fd, major, minor) of the pids whose open files a scan listed.
_Opened = Mapping[int, Sequence[tuple[int, int, int]]]
#: The devices handed over for each pid of a tree (``None``: not listed by the scan).
_Given = tuple[tuple[tuple[int, int, int], ...] | None, ...]


def _gpu_use(device: Device, holding: Holding) -> GpuUse:
    spilled = None
    source: GpuSource = "fd"
    memory = None
    if holding.accounted_by is not None:
        known = holding.accounted.values()
        memory = None if any(b is None for b in known) else sum(b or 0 for b in known)
        source = holding.accounted_by
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


def _energy_use(
    use: GpuUse, share: Share, spent: Window | None, device: Device, joules: float | None
) -> GpuUse:
    """``use`` with the tree's share of the device's power and its energy while watched."""
    if share.fraction is None:
        return use.model_copy(update={"energy_rule": share.rule, "energy_problem": share.problem})
    if spent is None:  # one reading so far: its share of the power now
        power = None if device.power_watts is None else device.power_watts * share.fraction
        why = "one reading so far" + ("" if power is not None else f"; {device.power_problem}")
        return use.model_copy(update={"power_watts": power, "energy_rule": share.rule, "energy_problem": why})
    update: dict[str, object] = {
        "energy_rule": share.rule,
        "energy_from": spent.measured,
        "energy_joules": joules,
    }
    if spent.watts is None:
        update["energy_problem"] = spent.problem
    else:
        update["power_watts"] = spent.watts * share.fraction
        if joules is None:
            update["energy_problem"] = "watched from the next reading"
    return use.model_copy(update=update)


def _sort_key(use: GpuUse) -> tuple[int, int, int, str]:
    order = _VENDOR_ORDER.index(use.vendor)
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
        self._host: HostGpus | None = None
        self._host_due = -1.0
        #: per tree: when to read it again, the devices handed over it was read with, and what it holds
        self._held: dict[tuple[int, ...], tuple[float, _Given, Held]] = {}
        #: the clock of the readings (monotonic seconds; a test's own)
        self.clock: Callable[[], float] = time.monotonic
        #: energy: the host reading last attributed, each device's previous sample and last
        #: window, each (tree, device)'s attributed joules and each device's unattributed ones
        self._energy_host: HostGpus | None = None
        self._samples: dict[str, Sample] = {}
        self._windows: dict[str, Window] = {}
        self._attributed: dict[tuple[tuple[int, ...], str], float] = {}
        self.unattributed_joules: dict[str, float] = {}

    @property
    def host(self) -> HostGpus:
        now = self.clock()
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
        readings = self._host.readings if self._host is not None else ()
        followed = {major for reading in readings if reading.lists is not None for major in reading.majors}
        if followed and majors <= followed:
            return NVML_HOLDER_FD_REFRESH_SECONDS
        return FD_REFRESH_SECONDS

    def read(
        self, trees: Sequence[Sequence[int]], opened: _Opened | None = None, *, energy: bool = True
    ) -> list[Held]:
        """What each tree (its pids, the server first) holds, in order, with (``energy``) each
        tree's share of each device's power and energy. ``opened``: the character devices (fd,
        major, minor) of the pids whose open files were already listed."""
        now = self.clock()
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
        if not energy:
            return result
        # what goes wrong in attributing energy leaves what the trees hold
        keys = [tuple(tree) for tree in trees]
        return contained("GPU energy", lambda: self._with_energy(keys, result), lambda _reason: result)

    def _advance(self, host: HostGpus) -> bool:
        """Closes each device's window at this host reading (once per reading)."""
        if host is self._energy_host:
            return False
        self._energy_host = host
        now = self.clock()
        for key, device in host.devices.items():
            after = sample(device, now)
            before = self._samples.get(key)
            if before is not None:
                self._windows[key] = window(before, after, device.energy_range_joules)
            self._samples[key] = after
        return True

    def _with_energy(self, keys: list[tuple[int, ...]], result: list[Held]) -> list[Held]:
        """``result`` with each tree's share of each device's power and energy (gpus/attribution.py)."""
        host = self._host
        if host is None:
            return result
        advanced = self._advance(host)
        on_device: dict[str, list[tuple[int, int]]] = {}  # device -> (tree, use) positions
        for tree, (uses, _problem) in enumerate(result):
            for position, use in enumerate(uses):
                on_device.setdefault(use.device, []).append((tree, position))
        updated = [list(uses) for uses, _problem in result]
        for key, places in on_device.items():
            device = host.devices.get(key)
            if device is None:
                continue
            found = shares(device, [(updated[t][p].pids, updated[t][p].memory_bytes) for t, p in places])
            spent = self._windows.get(key)
            given = 0.0
            for (tree, position), share in zip(places, found, strict=True):
                mark = (keys[tree], key)
                if advanced and spent is not None and spent.joules is not None and share.fraction is not None:
                    part = spent.joules * share.fraction
                    self._attributed[mark] = self._attributed.get(mark, 0.0) + part
                    given += part
                updated[tree][position] = _energy_use(
                    updated[tree][position], share, spent, device, self._attributed.get(mark)
                )
            if advanced and spent is not None and spent.joules is not None:
                left = max(spent.joules - given, 0.0)
                self.unattributed_joules[key] = self.unattributed_joules.get(key, 0.0) + left
        if advanced:
            alive = set(keys)
            self._attributed = {mark: j for mark, j in self._attributed.items() if mark[0] in alive}
        return [(tuple(uses), problem) for uses, (_uses, problem) in zip(updated, result, strict=True)]

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
        host = self.host  # read at most every MEMORY_REFRESH_SECONDS, whatever the trees
        all_lists = host.lists
        if not opened and not all_lists:
            return (), "; ".join(problems) or None
        tree = TreeGpus()
        for pid, devices in opened.items():
            for fd, major, minor in devices:
                for reading in host.by_major.get(major, ()):
                    reading.opened(pid, fd, major, minor, tree)
                key = host.nodes.get((major, minor))
                if key is not None:
                    tree.holding(key).pids.add(pid)
        by_lists = [(lists, lists.holdings(pids)) for lists in all_lists]
        uses = [
            _gpu_use(host.devices[key], holding)
            for key, holding in tree.holdings.items()
            # a driver's lists say which of its GPUs (and MIG instances) the tree uses
            if not any(found and lists.answer_for(host.devices[key]) for lists, found in by_lists)
        ]
        for _lists, found in by_lists:
            uses += [_gpu_use(host.devices[key], h) for key, h in found.items() if key in host.devices]
        for vendor in _VENDOR_ORDER if tree.unknown else ():
            message = tree.unknown.get(vendor)
            if message is not None and not any(u.vendor == vendor for u in uses):
                problems.append(message)
        return tuple(sorted(uses, key=_sort_key)), "; ".join(problems) or None


def _comm(root: str, pid: int) -> str | None:
    text = read_text(host_root(root), "proc", str(pid), "comm")
    return text.rstrip("\n") if text is not None else None


def _other_holders(root: str, skip: set[int], host: HostGpus) -> Iterable[int]:
    """Pids outside the engine trees holding a GPU driver's character device (every process's
    open files are listed: what ``enginespec gpus`` reads beyond a scan)."""
    for pid, _inode in sorted(host_root(root).procfs.list_pids()):  # the backend's lister
        if pid in skip:
            continue
        fds = _open_devices(root, pid)
        if fds is not None and any(
            reading.holds_gpu(major, minor)
            for _fd, major, minor in fds.devices
            for reading in host.by_major.get(major, ())
        ):
            yield pid


@dataclass(frozen=True)
class EngineTree:
    """What the ledger needs of an engine: its instance id, its pids (server first), whether an orphan."""

    instance_id: str
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
    engine_watts: dict[str, list[float | None]] = {}
    for tree, (uses, _problem) in zip(engines, held, strict=True):
        for use in uses:
            on_device[use.device][tree.instance_id] = use.memory_bytes
            engine_watts.setdefault(use.device, []).append(use.power_watts)
            if tree.orphan:
                orphans[use.device].append(tree.instance_id)
    others: dict[str, dict[int, int | None]] = {key: {} for key in host.devices}
    for lists in host.lists:
        for key, listed in lists.by_device.items():
            for pid, size in (listed or {}).items():
                if pid not in in_trees and key in others:
                    others[key][pid] = size
    if all_processes and host.devices:  # no GPU: nobody else to look for
        seen = {pid for found in others.values() for pid in found}
        extra = list(_other_holders(root, in_trees | seen, host))
        for pid, (uses, _problem) in zip(
            extra, reader.read([(pid,) for pid in extra], energy=False), strict=True
        ):
            for use in uses:
                # A driver's lists (NVML's) are the whole truth for its GPUs: a process holding
                # the device file without a context there (nvidia-persistenced) holds no memory.
                if use.source != "fd" or all(lists.vendor != use.vendor for lists in host.lists):
                    others[use.device].setdefault(pid, use.memory_bytes)
    # A MIG GPU sums its instances.
    for device in host.devices.values():
        if device.parent is not None and device.parent in on_device:
            for instance_id, size in on_device[device.key].items():
                before = on_device[device.parent].get(instance_id, 0)
                on_device[device.parent][instance_id] = (
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
                problem=device.problem or _device_problem(host, device),
                power_watts=device.power_watts,
                energy_joules=device.energy_joules,
                power_problem=None if device.power_watts is not None else device.power_problem,
                energy_problem=None if device.energy_joules is not None else device.energy_problem,
                unattributed_power_watts=_unattributed_power(
                    device.power_watts, engine_watts.get(device.key, [])
                ),
            )
        )
    return tuple(result)


def _unattributed_power(watts: float | None, shares: Sequence[float | None]) -> float | None:
    """The device's power less the engines' shares of it, when all are known."""
    if watts is None or any(share is None for share in shares):
        return None
    return max(watts - sum(share or 0.0 for share in shares), 0.0)


def _device_problem(host: HostGpus, device: Device) -> str | None:
    """Why a vendor cannot say who holds how much of ``device`` (NVML not loaded), if it knows."""
    return next((problem for r in host.readings if (problem := r.device_problem(device))), None)


def _device_order(device: Device) -> tuple[int, int, int, str]:
    order = _VENDOR_ORDER.index(device.vendor)
    index = device.index if device.index is not None else 1 << 30
    return (order, index, device.mig_index if device.mig_index is not None else -1, device.key)
