"""Power and energy as drivers and the kernel count them: a DRM GPU's hwmon files (amdgpu, i915,
xe), the CPU packages' RAPL counters under ``/sys/class/powercap``, each value read through the
host's root, bounded and validated (a value that is no number, negative or beyond any real
device is ``None`` with why); and the energy between two readings of a counter that wraps."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from enginespec._host.root import HostRoot, host_root

#: A sysfs value is one number and a newline: more bytes than this is no such value.
_VALUE_LIMIT = 64
#: No one accelerator board (or CPU package) draws more (the largest, GB200 superchips, draw
#: about 2.7 kW): a reading above it is not believed.
MAX_WATTS = 10_000.0
#: A counter of more joules than this (10 kW for 30 years) is not believed.
MAX_JOULES = 1e13
#: At most this many hwmon directories of a device, and powercap zones of a host, are read.
_MAX_ENTRIES = 64


def read_scaled(
    door: HostRoot, parts: tuple[str, ...], scale: float, maximum: float
) -> tuple[float | None, str | None]:
    """The number in the file ``ROOT/PARTS`` times ``scale`` (``1e-6`` for microwatts or
    microjoules), or ``None`` and why: unreadable, no whole number, negative, above
    ``maximum``."""
    data = door.kernel_file(*parts, limit=_VALUE_LIMIT + 1)
    where = "/".join(parts[-2:])
    if data is None:
        return None, f"cannot read {where}"
    text = data.decode("ascii", "replace").strip()
    if len(data) > _VALUE_LIMIT or not re.fullmatch(r"-?[0-9]{1,20}", text):
        return None, f"{where} holds no number"
    value = int(text) * scale
    if value < 0:
        return None, f"{where} is negative"
    if value > maximum:
        return None, f"{where} is beyond any device ({value:.6g})"
    return value, None


def hwmon(door: HostRoot, *device: str) -> tuple[float | None, str | None, float | None, str | None]:
    """Power (watts) and the energy counter (joules) of the hwmon device of a DRM GPU under
    ``ROOT/DEVICE/hwmon/hwmon<M>``, each ``None`` with why: (power, why, energy, why).

    The files and units are the kernel's hwmon sysfs interface (Documentation/hwmon/
    sysfs-interface.rst: ``power<N>_average`` and ``power<N>_input`` in microwatts,
    ``energy<N>_input`` in microjoules). amdgpu has ``power1_average`` (older ASICs) or
    ``power1_input`` (newer ones) and no energy file (Documentation/gpu/amdgpu/thermal.rst);
    i915 and xe have ``energy1_input``, the card's (xe's ``energy2_input`` is the package's) and
    no power file (Documentation/ABI/testing/sysfs-driver-intel-i915-hwmon,
    sysfs-driver-intel-xe-hwmon): their power is what two readings of the counter say."""
    names = [n for n in door.kernel_directory(*device, "hwmon") if re.fullmatch(r"hwmon[0-9]{1,6}", n)]
    if not names:
        return None, "the driver has no hwmon device", None, "the driver has no hwmon device"
    power_problem = energy_problem = None
    for name in names[:_MAX_ENTRIES]:
        base = (*device, "hwmon", name)
        files = set(door.kernel_directory(*base))
        power = next((f for f in ("power1_average", "power1_input") if f in files), None)
        watts, power_problem = (
            read_scaled(door, (*base, power), 1e-6, MAX_WATTS)
            if power
            else (None, "no hwmon power file (power1_average, power1_input)")
        )
        joules, energy_problem = (
            read_scaled(door, (*base, "energy1_input"), 1e-6, MAX_JOULES)
            if "energy1_input" in files
            else (None, "the driver keeps no energy counter (no hwmon energy1_input)")
        )
        if watts is not None or joules is not None:
            return watts, power_problem, joules, energy_problem
    return None, power_problem, None, energy_problem


def counter_delta(before: float, after: float, wraps_at: float | None) -> tuple[float | None, str | None]:
    """The energy between two readings of a counter: ``after - before``; a reading lower than the
    one before wrapped (``after + wraps_at - before``, powercap.rst: the counter wraps at
    ``max_energy_range_uj``) when the range is known, else the counter was reset (the driver
    reloaded) and the energy between them is ``None`` with why."""
    if after >= before:
        return after - before, None
    if wraps_at is not None and wraps_at > 0 and before <= wraps_at:
        return after + wraps_at - before, None
    return None, "the energy counter went back (reset): nothing said for that interval"


class CpuPackage(BaseModel):
    """A RAPL power zone of the host (``/sys/class/powercap/intel-rapl:<N>``, a CPU package, or
    ``psys`` for the platform), as Documentation/power/powercap/powercap.rst describes it:
    ``energy_joules`` is its counter (``energy_uj``), which wraps to zero past
    ``max_energy_joules`` (``max_energy_range_uj``); ``None`` with ``problem`` when unreadable
    (``energy_uj`` is readable by root only since the fix for CVE-2020-8694)."""

    model_config = ConfigDict(frozen=True)

    zone: str
    name: str | None
    energy_joules: float | None
    max_energy_joules: float | None
    problem: str | None = None


def cpu_packages(root: str = "/") -> tuple[CpuPackage, ...]:
    """The host's top-level RAPL zones (``intel-rapl:<N>``: AMD's CPUs register there too), read
    under ``root``."""
    door = host_root(root)
    base = ("sys", "class", "powercap")
    zones = [n for n in door.kernel_directory(*base) if re.fullmatch(r"intel-rapl:[0-9]{1,4}", n)]
    found = []
    for zone in zones[:_MAX_ENTRIES]:
        raw = door.kernel_file(*base, zone, "name", limit=_VALUE_LIMIT + 1) or b""
        name_text = raw.decode("ascii", "replace").strip()
        name = name_text if re.fullmatch(r"[A-Za-z0-9_.-]{1,32}", name_text) else None
        wraps, wrap_problem = read_scaled(door, (*base, zone, "max_energy_range_uj"), 1e-6, MAX_JOULES)
        energy, problem = read_scaled(door, (*base, zone, "energy_uj"), 1e-6, MAX_JOULES)
        if energy is None and problem and problem.startswith("cannot read"):
            problem += " (readable by root only since the fix for CVE-2020-8694)"
        if energy is not None and wraps is not None and energy > wraps:
            energy, problem = None, f"{zone}/energy_uj is beyond its max_energy_range_uj"
        found.append(
            CpuPackage(
                zone=zone,
                name=name,
                energy_joules=energy,
                max_energy_joules=wraps,
                problem=problem or wrap_problem,
            )
        )
    return tuple(found)


class CpuEnergy(BaseModel):
    """An engine tree's share of the CPU packages' energy, by ``rule`` ``cpu_time``: its pids'
    CPU time (``utime + stime`` of ``/proc/PID/stat``) over the time all CPUs were busy
    (``/proc/stat``) between two readings. ``power_watts`` is its share of the packages' mean
    power over the last window, ``energy_joules`` what was attributed to it while watched;
    ``None`` with ``problem`` until two readings, or where the host does not say."""

    model_config = ConfigDict(frozen=True)

    power_watts: float | None
    energy_joules: float | None
    rule: Literal["cpu_time"] = "cpu_time"
    problem: str | None = None


@dataclass(frozen=True)
class _CpuSample:
    at: float
    zones: Mapping[str, tuple[float, float | None]]
    busy: int | None
    #: per pid, (its start in ticks, its utime + stime): a pid reused is a new process
    ticks: Mapping[int, tuple[int, int]]


class CpuEnergyReader:
    """Attributes the CPU packages' energy (RAPL ``package-*`` zones, summed: which socket a
    process ran on is not known) to engine trees by CPU-time share, remembering the previous
    reading. The shares never add up to more than the packages' energy; what no tree accounts
    for is :attr:`unattributed_joules`."""

    def __init__(self, root: str = "/") -> None:
        self.root = root
        self.clock: Callable[[], float] = time.monotonic
        self._before: _CpuSample | None = None
        self._attributed: dict[tuple[int, ...], float] = {}
        self.unattributed_joules = 0.0

    def _sample(self, trees: Sequence[Sequence[int]]) -> tuple[_CpuSample, str | None]:
        door = host_root(self.root)
        packages = [p for p in cpu_packages(self.root) if (p.name or "").startswith("package")]
        zones = {
            p.zone: (p.energy_joules, p.max_energy_joules) for p in packages if p.energy_joules is not None
        }
        problem = None
        if not packages:
            problem = "no RAPL package zone (/sys/class/powercap/intel-rapl:<N>)"
        elif len(zones) < len(packages):
            problem = next(p.problem for p in packages if p.energy_joules is None)
        ticks = {}
        for pid in {pid for tree in trees for pid in tree}:
            found = door.stat(pid)
            if found is not None:
                ticks[pid] = (found.start_ticks, found.utime + found.stime)
        return _CpuSample(self.clock(), zones, door.cpu_busy_ticks(), ticks), problem

    def _unknown(self, key: tuple[int, ...], why: str) -> CpuEnergy:
        """No power for this window, and why; the energy given so far stays."""
        return CpuEnergy(power_watts=None, energy_joules=self._attributed.get(key), problem=why)

    def read(self, trees: Sequence[Sequence[int]]) -> list[CpuEnergy]:
        """Each tree's (its pids) share of the packages' power and energy, in order."""
        after, problem = self._sample(trees)
        before, self._before = self._before, after
        keys = [tuple(tree) for tree in trees]
        if problem is not None or before is None:
            reason = problem or "one reading so far"
            return [self._unknown(key, reason) for key in keys]
        joules, why = _packages_delta(before, after)
        seconds = after.at - before.at
        if after.busy is None or before.busy is None or after.busy <= before.busy:
            why = why or "the CPUs' busy time is unknown or did not move"
        if joules is None or why is not None or seconds <= 0:
            return [self._unknown(key, why or "no time between the readings") for key in keys]
        busy = (after.busy or 0) - (before.busy or 0)
        used = [_tree_ticks(before, after, tree) for tree in keys]
        # never more than the CPUs' busy time, whatever the pids' files say
        fractions = [u / max(busy, sum(used)) for u in used]
        self._attributed = {key: self._attributed.get(key, 0.0) for key in keys}
        for key, fraction in zip(keys, fractions, strict=True):
            self._attributed[key] += joules * fraction
        self.unattributed_joules += max(joules - joules * sum(fractions), 0.0)
        return [
            CpuEnergy(power_watts=joules / seconds * fraction, energy_joules=self._attributed[key])
            for key, fraction in zip(keys, fractions, strict=True)
        ]


def _packages_delta(before: _CpuSample, after: _CpuSample) -> tuple[float | None, str | None]:
    """The packages' energy between two samples (each zone's counter, a wrap added back)."""
    if set(before.zones) != set(after.zones):
        return None, "the RAPL package zones changed between readings"
    total = 0.0
    for zone, (energy, wraps) in after.zones.items():
        delta, why = counter_delta(before.zones[zone][0], energy, wraps)
        if delta is None:
            return None, why
        total += delta
    return total, None


def _tree_ticks(before: _CpuSample, after: _CpuSample, pids: Sequence[int]) -> int:
    """The CPU ticks the tree's pids spent in the window (a pid new, or reused, counts from the
    next window: its time before this one is not the window's)."""
    used = 0
    for pid in set(pids):
        old, new = before.ticks.get(pid), after.ticks.get(pid)
        if old is not None and new is not None and old[0] == new[0] and new[1] >= old[1]:
            used += new[1] - old[1]
    return used
