"""A GPU's energy between two readings, and each engine tree's share of it, by a stated rule:
by each process's share of the device's time where NVML reports per-process utilisation
(``utilization``), else by each tree's share of the device's memory in use (``memory``). The
shares of a device never add up to more than its energy: what no engine accounts for (other
processes, the driver, idle) is the device's unattributed energy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from enginespec.gpus.energy import MAX_WATTS, counter_delta
from enginespec.gpus.vendor import Device

#: How a tree's share of a device was reckoned.
EnergyRule = Literal["utilization", "memory"]
#: Where a device's energy over a window came from: its driver's counter, else its power draw
#: times the interval.
EnergyFrom = Literal["counter", "power"]


@dataclass(frozen=True)
class Sample:
    """One reading of a device's counter and power, at a monotonic time."""

    at: float
    counter: float | None
    watts: float | None


def sample(device: Device, at: float) -> Sample:
    return Sample(at, device.energy_joules, device.power_watts)


@dataclass(frozen=True)
class Window:
    """What a device drew between two readings: ``joules`` and mean ``watts`` over ``seconds``
    (``None`` with ``problem`` when neither its counter nor its power says)."""

    seconds: float
    joules: float | None
    watts: float | None
    measured: EnergyFrom | None
    problem: str | None = None


def window(before: Sample, after: Sample, wraps_at: float | None) -> Window:
    """The device's energy from ``before`` to ``after``: the counter's difference (a wrap added
    back, a reset said), else the mean of the two power readings times the interval."""
    seconds = after.at - before.at
    if seconds <= 0:
        return Window(seconds, None, None, None, "no time between the readings")
    if before.counter is not None and after.counter is not None:
        joules, why = counter_delta(before.counter, after.counter, wraps_at)
        if joules is not None and joules / seconds > MAX_WATTS:
            # NVML's counter wraps only past 2**64 mJ: lower is a reload, not a wrap
            joules, why = (
                None,
                "the energy counter went back (reset) or jumped: nothing said for that interval",
            )
        if joules is None:
            return Window(seconds, None, None, "counter", why)
        return Window(seconds, joules, joules / seconds, "counter")
    known = [w for w in (before.watts, after.watts) if w is not None]
    if after.watts is None or not known:
        return Window(seconds, None, None, None, "the driver reports neither an energy counter nor power")
    watts = sum(known) / len(known)
    return Window(seconds, watts * seconds, watts, "power")


@dataclass(frozen=True)
class Share:
    """A tree's share (0..1) of a device, and the rule that made it; ``None`` with why."""

    fraction: float | None
    rule: EnergyRule | None
    problem: str | None = None


def shares(device: Device, trees: Sequence[tuple[Sequence[int], int | None]]) -> list[Share]:
    """Each tree's share of ``device``, for trees given as (their pids, the bytes they hold on it).

    ``utilization``: a tree's pids' SM utilisation over that of every process NVML sampled (other
    processes' shares are left unattributed; a tree NVML sampled none of its pids for has 0).
    ``memory``, where the driver reports no per-process utilisation or no process used the
    device: a tree's bytes over the device's memory in use (or, should the trees claim more, over
    their sum)."""
    utilization = device.utilization or {}
    total = sum(utilization.values())
    if total > 0:
        claimed: set[int] = set()
        found = []
        for pids, _bytes in trees:
            mine = {pid for pid in pids if pid in utilization and pid not in claimed}
            claimed |= mine  # a pid counts once, whatever lists it twice
            found.append(Share(sum(utilization[pid] for pid in mine) / total, "utilization"))
        return found
    if device.used is None or device.used <= 0:
        why = (
            f"no per-process utilisation ({device.utilization_problem or 'no samples'}) and the "
            "device's memory in use unknown"
        )
        return [Share(None, None, why) for _ in trees]
    denominator = max(device.used, sum(size or 0 for _pids, size in trees))
    return [
        Share(size / denominator, "memory")
        if size is not None
        else Share(None, "memory", "the tree's memory on the device is unknown")
        for _pids, size in trees
    ]


def unattributed(joules: float, fractions: Mapping[object, float]) -> float:
    """What of ``joules`` no tree's share accounts for (never below zero)."""
    return max(joules - sum(joules * fraction for fraction in fractions.values()), 0.0)
