"""NVIDIA's NVML, loaded at run time with ctypes (``libnvidia-ml.so.1``, or the file named by
``ENGINESPEC_NVML_LIBRARY``): the devices, their memory, power and energy, the processes on them
and each process's share of the device's time. The library is loaded only when NVML is to be
tried."""

from __future__ import annotations

import ctypes
import dataclasses
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from enginespec.gpus.ids import UUID, normal_pci


@dataclass(frozen=True)
class NvmlProcess:
    pid: int
    memory_bytes: int | None


@dataclass(frozen=True)
class NvmlDevice:
    uuid: str
    name: str | None
    pci: str | None
    index: int
    mig_index: int | None
    parent_uuid: str | None
    total: int | None
    used: int | None
    #: ``None`` when NVML could not list them (``problem`` says why).
    processes: tuple[NvmlProcess, ...] | None
    problem: str | None = None
    #: The board's power draw (``nvmlDeviceGetPowerUsage``, milliwatts) and the driver's energy
    #: counter (``nvmlDeviceGetTotalEnergyConsumption``, millijoules since the driver loaded),
    #: each ``None`` with the NVML error in ``power_problem`` / ``energy_problem``.
    power_milliwatts: int | None = None
    energy_millijoules: int | None = None
    power_problem: str | None = None
    energy_problem: str | None = None
    #: Each pid's SM utilisation (percent) over the samples NVML took since the last reading
    #: (``nvmlDeviceGetProcessUtilization``), ``None`` with ``utilization_problem`` when NVML
    #: does not say.
    utilization: Mapping[int, int] | None = None
    utilization_problem: str | None = None


_NVML_SUCCESS = 0
_NVML_INSUFFICIENT_SIZE = 7
_NVML_VALUE_NOT_AVAILABLE = (1 << 64) - 1
_NVML_ERRORS = {
    1: "uninitialized",
    2: "invalid argument",
    3: "not supported",
    4: "no permission",
    9: "driver not loaded",
    12: "library not found",
    13: "function not found",
    15: "GPU is lost",
    18: "lib rm version mismatch",
    999: "unknown error",
}


class _ProcessV1(ctypes.Structure):
    _fields_ = (("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong))


class _ProcessV2(ctypes.Structure):
    _fields_ = (
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    )


class _ProcessV3Cc(ctypes.Structure):
    """The v3 struct of the first R535 drivers (a confidential-computing field at the end)."""

    _fields_ = (*_ProcessV2._fields_, ("usedGpuCcProtectedMemory", ctypes.c_ulonglong))


class _PciInfo(ctypes.Structure):
    _fields_ = (
        ("busIdLegacy", ctypes.c_char * 16),
        ("domain", ctypes.c_uint),
        ("bus", ctypes.c_uint),
        ("device", ctypes.c_uint),
        ("pciDeviceId", ctypes.c_uint),
        ("pciSubSystemId", ctypes.c_uint),
        ("busId", ctypes.c_char * 32),
    )


class _Memory(ctypes.Structure):
    _fields_ = (("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong))


class _ProcessUtilizationSample(ctypes.Structure):
    """``nvmlProcessUtilizationSample_t`` (nvml.h): a pid, the sample's CPU timestamp in
    microseconds, and its SM, memory, encoder and decoder utilisation in percent."""

    _fields_ = (
        ("pid", ctypes.c_uint),
        ("timeStamp", ctypes.c_ulonglong),
        ("smUtil", ctypes.c_uint),
        ("memUtil", ctypes.c_uint),
        ("encUtil", ctypes.c_uint),
        ("decUtil", ctypes.c_uint),
    )


_NVML_NOT_FOUND = 6
#: At most this many utilisation samples are read per device (NVML keeps a short ring of them).
_MAX_SAMPLES = 1024


class NvmlError(Exception):
    """An NVML call failed (the message names the call and NVML's error)."""


class _Nvml:
    """An initialised NVML (kept for the life of the process: initialising takes a driver
    round trip). Calls are serialised."""

    def __init__(self, path: str) -> None:
        self.lib = ctypes.CDLL(path)
        init = self._symbol("nvmlInit_v2") or self._symbol("nvmlInit")
        if init is None:
            raise NvmlError(f"{path} has no nvmlInit")
        self._check(init(), "nvmlInit")
        self.lock = threading.Lock()
        #: per device UUID, the newest utilisation sample's timestamp read (the next reading asks
        #: for samples after it: the window between two readings)
        self.last_sample: dict[str, int] = {}
        self.suffix, self.struct = self._process_api()

    def _symbol(self, name: str) -> Any:
        """The library's function of that name (returning an NVML status), or ``None``."""
        try:
            function = getattr(self.lib, name)
        except AttributeError:
            return None
        function.restype = ctypes.c_int
        return function

    def _process_api(self) -> tuple[str, type[ctypes.Structure]]:
        """Which process-list entry point and struct the driver has, as nvitop decides it
        (nvitop/api/libnvml.py, 1.3): ``_v3`` with the v3 struct only where the confidential
        computing API exists without the later detail-list API (the first R535 drivers), else
        ``_v3`` with the v2 layout (released headers), else ``_v2``, else the unversioned v1."""
        if self._symbol("nvmlDeviceGetComputeRunningProcesses_v3") is not None:
            early_r535 = (
                self._symbol("nvmlDeviceGetConfComputeMemSizeInfo") is not None
                and self._symbol("nvmlDeviceGetRunningProcessDetailList") is None
            )
            return "_v3", _ProcessV3Cc if early_r535 else _ProcessV2
        if self._symbol("nvmlDeviceGetComputeRunningProcesses_v2") is not None:
            return "_v2", _ProcessV2
        return "", _ProcessV1

    @staticmethod
    def _check(code: int, what: str) -> None:
        if code != _NVML_SUCCESS:
            raise NvmlError(f"{what}: {_NVML_ERRORS.get(code, f'error {code}')}")

    def _call(self, name: str, *args: object) -> None:
        function = self._symbol(name)
        if function is None:
            raise NvmlError(f"{name}: function not found")
        self._check(function(*args), name)

    def _text(self, name: str, handle: ctypes.c_void_p) -> str | None:
        buffer = ctypes.create_string_buffer(96)
        try:
            self._call(name, handle, buffer, ctypes.c_uint(len(buffer)))
        except NvmlError:
            return None
        return buffer.value.decode("utf-8", "replace") or None

    def _processes(self, kind: str, handle: ctypes.c_void_p) -> list[NvmlProcess]:
        function = self._symbol(f"nvmlDeviceGet{kind}RunningProcesses{self.suffix}")
        if function is None:
            return []
        count = ctypes.c_uint(0)
        code = function(handle, ctypes.byref(count), None)
        if code == _NVML_SUCCESS:
            return []
        if code != _NVML_INSUFFICIENT_SIZE:
            self._check(code, f"nvmlDeviceGet{kind}RunningProcesses")
        count.value = count.value * 2 + 5  # room for processes started meanwhile
        entries = (self.struct * count.value)()
        self._check(function(handle, ctypes.byref(count), entries), f"nvmlDeviceGet{kind}RunningProcesses")
        return [
            NvmlProcess(
                pid=entry.pid,
                memory_bytes=None
                if entry.usedGpuMemory == _NVML_VALUE_NOT_AVAILABLE
                else entry.usedGpuMemory,
            )
            for entry in entries[: min(count.value, len(entries))]
        ]

    def _power(self, handle: ctypes.c_void_p) -> dict[str, Any]:
        """Power and energy, as nvml.h documents them: ``nvmlDeviceGetPowerUsage`` the board's
        draw in milliwatts (an unsigned int), ``nvmlDeviceGetTotalEnergyConsumption`` the
        energy in millijoules since the driver was last reloaded (an unsigned long long; Volta
        and later). Either may be unsupported (a MIG instance, older boards)."""
        found: dict[str, Any] = {}
        power = ctypes.c_uint(0)
        try:
            self._call("nvmlDeviceGetPowerUsage", handle, ctypes.byref(power))
            found["power_milliwatts"] = int(power.value)
        except NvmlError as err:
            found["power_problem"] = f"NVML: {err}"
        energy = ctypes.c_ulonglong(0)
        try:
            self._call("nvmlDeviceGetTotalEnergyConsumption", handle, ctypes.byref(energy))
            found["energy_millijoules"] = int(energy.value)
        except NvmlError as err:
            found["energy_problem"] = f"NVML: {err}"
        return found

    def _utilization(self, handle: ctypes.c_void_p, uuid: str) -> dict[str, Any]:
        """Each pid's mean SM utilisation over the samples NVML took since the last reading of
        this device (``nvmlDeviceGetProcessUtilization``, nvml.h: asked first with no buffer for
        the count, then filled; samples newer than ``lastSeenTimeStamp`` only, ``NOT_FOUND`` when
        there are none)."""
        function = self._symbol("nvmlDeviceGetProcessUtilization")
        if function is None:
            return {"utilization_problem": "NVML: nvmlDeviceGetProcessUtilization: function not found"}
        since = ctypes.c_ulonglong(self.last_sample.get(uuid, 0))
        count = ctypes.c_uint(0)
        code = function(handle, None, ctypes.byref(count), since)
        if code in (_NVML_SUCCESS, _NVML_NOT_FOUND):
            return {"utilization": {}}
        try:
            if code != _NVML_INSUFFICIENT_SIZE:
                self._check(code, "nvmlDeviceGetProcessUtilization")
            count.value = min(count.value * 2 + 5, _MAX_SAMPLES)
            samples = (_ProcessUtilizationSample * count.value)()
            code = function(handle, samples, ctypes.byref(count), since)
            if code == _NVML_NOT_FOUND:
                return {"utilization": {}}
            self._check(code, "nvmlDeviceGetProcessUtilization")
        except NvmlError as err:
            return {"utilization_problem": f"NVML: {err}"}
        per_pid: dict[int, list[int]] = {}
        latest = since.value
        for sample in samples[: min(count.value, len(samples))]:
            if sample.smUtil <= 100:  # a percentage: anything else is not believed
                per_pid.setdefault(int(sample.pid), []).append(int(sample.smUtil))
            latest = max(latest, int(sample.timeStamp))
        self.last_sample[uuid] = latest
        return {"utilization": {pid: sum(values) // len(values) for pid, values in per_pid.items()}}

    def _device(
        self, handle: ctypes.c_void_p, index: int, mig_index: int | None, parent: NvmlDevice | None
    ) -> NvmlDevice | None:
        uuid = self._text("nvmlDeviceGetUUID", handle)
        if uuid is None or not UUID.fullmatch(uuid):
            return None
        pci = parent.pci if parent else None
        if parent is None:
            info = _PciInfo()
            try:
                self._call("nvmlDeviceGetPciInfo_v3", handle, ctypes.byref(info))
                pci = normal_pci(info.busId.decode("ascii", "replace"))
            except NvmlError:
                pass
        memory = _Memory()
        total: int | None
        used: int | None
        try:
            self._call("nvmlDeviceGetMemoryInfo", handle, ctypes.byref(memory))
            total, used = int(memory.total), int(memory.used)
        except NvmlError:
            total = used = None
        # A pid in both lists (compute and graphics) holds one set of memory: counted once.
        listed: dict[int, NvmlProcess] = {}
        processes: tuple[NvmlProcess, ...] | None = None
        problem = None
        try:
            for kind in ("Compute", "Graphics"):
                for process in self._processes(kind, handle):
                    listed.setdefault(process.pid, process)
            processes = tuple(listed.values())
        except NvmlError as err:
            problem = f"NVML: {err}"
        return NvmlDevice(
            uuid=uuid,
            name=self._text("nvmlDeviceGetName", handle),
            pci=pci,
            index=index,
            mig_index=mig_index,
            parent_uuid=parent.uuid if parent else None,
            total=total,
            used=used,
            processes=processes,
            problem=problem,
            **self._power(handle),
            **self._utilization(handle, uuid),
        )

    def _mig_handles(self, handle: ctypes.c_void_p) -> list[tuple[int, ctypes.c_void_p]]:
        current, pending = ctypes.c_uint(0), ctypes.c_uint(0)
        try:
            self._call("nvmlDeviceGetMigMode", handle, ctypes.byref(current), ctypes.byref(pending))
        except NvmlError:
            return []  # not a MIG-capable GPU
        if current.value != 1:
            return []
        count = ctypes.c_uint(0)
        self._call("nvmlDeviceGetMaxMigDeviceCount", handle, ctypes.byref(count))
        found = []
        getter = self._symbol("nvmlDeviceGetMigDeviceHandleByIndex")
        for slot in range(min(count.value, 64)):
            mig = ctypes.c_void_p()
            if getter is not None and getter(handle, ctypes.c_uint(slot), ctypes.byref(mig)) == _NVML_SUCCESS:
                found.append((slot, mig))
        return found

    def devices(self) -> tuple[NvmlDevice, ...]:
        with self.lock:
            count = ctypes.c_uint(0)
            self._call("nvmlDeviceGetCount_v2", ctypes.byref(count))
            result = []
            for index in range(min(count.value, 64)):
                handle = ctypes.c_void_p()
                try:  # a GPU fallen off the bus leaves the others readable
                    self._call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(handle))
                    device = self._device(handle, index, None, None)
                    migs = self._mig_handles(handle) if device is not None else []
                except NvmlError:
                    continue
                if device is None:
                    continue
                # In MIG mode each instance lists its own processes: the GPU's own list (an
                # aggregate, for the privileged) would count them twice.
                result.append(device if not migs else _without_processes(device))
                for slot, mig in migs:
                    instance = self._device(mig, index, slot, device)
                    if instance is not None:
                        result.append(instance)
            return tuple(result)


def _without_processes(device: NvmlDevice) -> NvmlDevice:
    return dataclasses.replace(device, processes=())


_loaded: dict[str, _Nvml | str] = {}
_loading = threading.Lock()


def query(path: str) -> tuple[tuple[NvmlDevice, ...] | None, str | None]:
    """The devices of the NVML at ``path`` (loaded once per process: initialising NVML takes a
    driver round trip; a failure to load is remembered, not retried every poll), or ``None`` and
    why."""
    with _loading:
        nvml = _loaded.get(path)
        if nvml is None:
            try:
                nvml = _Nvml(path)
            except (OSError, NvmlError) as err:
                nvml = f"NVML not loaded ({path}): {err}"
            _loaded[path] = nvml
    if isinstance(nvml, str):
        return None, nvml
    try:
        return nvml.devices(), None
    except NvmlError as err:
        return None, f"NVML: {err}"
