"""NVIDIA's GPUs: the driver's procfs (``/proc/driver/nvidia/gpus/<bus>/information``), NVML's
devices, memory and process lists when its library loads (never required), and the device nodes
``/dev/nvidia<minor>`` (major 195) and ``nvidia-uvm`` that say a process uses CUDA."""

from __future__ import annotations

import os

from enginespec.gpus.energy import MAX_JOULES, MAX_WATTS
from enginespec.gpus.ids import UUID, normal_pci
from enginespec.gpus.nvml import NvmlDevice, query
from enginespec.gpus.vendor import Device, HostGpus, ProcessLists, TreeGpus, VendorReading, number, read_text

#: The file NVML is loaded from instead of ``libnvidia-ml.so.1``.
NVML_LIBRARY_ENV = "ENGINESPEC_NVML_LIBRARY"

NVIDIA_MAJOR = 195  # /dev/nvidia<minor>, nvidia-modeset 254, nvidiactl 255 (nv.c)
_CONTROL_MINORS = (254, 255)
_UNKNOWN = "uses CUDA (holds nvidia-uvm or a GPU the driver does not list): device unknown"


def _information(text: str) -> dict[str, str]:
    """The fields of a ``/proc/driver/nvidia/gpus/<bus>/information`` file (``Key: \\t value``
    lines, as the driver's nv-procfs.c writes them)."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def _read_procfs(host: HostGpus) -> int:
    """The GPUs the driver lists, and their device nodes; how many there are."""
    base = ("proc", "driver", "nvidia", "gpus")
    found = []
    for bus in host.door.kernel_directory(*base):
        info = _information(read_text(host.door, *base, bus, "information") or "")
        pci = normal_pci(info.get("Bus Location", bus))
        minor = number(info.get("Device Minor"))
        uuid = info.get("GPU UUID", "")
        key = uuid if UUID.fullmatch(uuid) else f"pci:{pci or bus}"
        device = Device(key=key, vendor="nvidia", name=info.get("Model") or None, pci=pci)
        device.power_problem = device.energy_problem = (
            "NVIDIA's power and energy are read through NVML: not used"
        )
        found.append((pci or "", device))
        if minor is not None and minor not in _CONTROL_MINORS:
            host.nodes[(NVIDIA_MAJOR, minor)] = key
    # NVML numbers GPUs in PCI bus order (its default, CUDA_DEVICE_ORDER=PCI_BUS_ID's order).
    for index, (_pci, device) in enumerate(sorted(found, key=lambda item: item[0])):
        device.index = index
        host.devices[device.key] = device
    return len(found)


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


def _merge(host: HostGpus, found: NvmlDevice) -> None:
    parent = host.devices.get(found.parent_uuid or "")
    device = host.devices.get(found.uuid) or host.by_pci(found.pci if found.parent_uuid is None else None)
    if device is None:
        device = Device(key=found.uuid, vendor="nvidia", name=found.name, pci=found.pci)
        host.devices[found.uuid] = device
    elif device.key != found.uuid:  # the procfs had no UUID: the device is known by it now
        host.rekey(device, found.uuid)
    device.name = found.name or device.name
    device.pci = found.pci or (parent.pci if parent else device.pci)
    device.index = found.index
    device.mig_index = found.mig_index
    device.parent = found.parent_uuid
    device.total, device.used = found.total, found.used
    device.problem = found.problem
    device.power_watts, device.power_problem = _checked(
        found.power_milliwatts, 1e-3, MAX_WATTS, found.power_problem, "power"
    )
    device.energy_joules, device.energy_problem = _checked(
        found.energy_millijoules, 1e-3, MAX_JOULES, found.energy_problem, "energy"
    )
    # nvml.h: an unsigned long long of millijoules, so it wraps only past 2**64 mJ
    device.energy_range_joules = (1 << 64) * 1e-3
    device.utilization, device.utilization_problem = found.utilization, found.utilization_problem


def _checked(
    value: int | None, scale: float, maximum: float, problem: str | None, what: str
) -> tuple[float | None, str | None]:
    """NVML's figure scaled to watts or joules, or ``None`` and why (NVML's error, or a value
    beyond any board's)."""
    if value is None:
        return None, problem or f"NVML reports no {what}"
    if value * scale > maximum:
        return None, f"NVML's {what} is beyond any device ({value * scale:.6g})"
    return value * scale, None


class NvidiaReading(VendorReading):
    def __init__(
        self, uvm: frozenset[int], nvml: tuple[NvmlDevice, ...] | None, nvml_problem: str | None
    ) -> None:
        self.majors = frozenset({NVIDIA_MAJOR, *uvm})
        self.nvml = nvml
        self.nvml_problem = nvml_problem
        self._lists = None
        if nvml is not None:
            by_device = {
                found.uuid: None
                if found.processes is None
                else {process.pid: process.memory_bytes for process in found.processes}
                for found in nvml
            }
            self._lists = ProcessLists("nvidia", "nvml", by_device)

    @property
    def lists(self) -> ProcessLists | None:
        """NVML's lists, while it answers."""
        return self._lists

    def opened(self, pid: int, fd: int, major: int, minor: int, tree: TreeGpus) -> None:
        if major != NVIDIA_MAJOR or minor not in _CONTROL_MINORS:  # nvidia-uvm or a GPU
            tree.unknown.setdefault("nvidia", _UNKNOWN)

    def holds_gpu(self, major: int, minor: int) -> bool:
        return major == NVIDIA_MAJOR and minor not in _CONTROL_MINORS

    def device_problem(self, device: Device) -> str | None:
        if device.vendor != "nvidia" or self.nvml is not None:
            return None
        return self.nvml_problem or "NVML not used: per-process bytes unknown"


def read(host: HostGpus, libraries: bool) -> NvidiaReading:
    """NVIDIA's GPUs from the driver's procfs and, with ``libraries``, NVML."""
    listed = _read_procfs(host)
    nvml, problem = nvml_devices(host.root, bool(listed)) if libraries else (None, None)
    for found in nvml or ():
        _merge(host, found)
    return NvidiaReading(frozenset(host.majors.get("nvidia-uvm", ())), nvml, problem)
