"""The exporter's GPU series: per engine the bytes its process tree holds on each GPU and its share
of each GPU's power and energy (with the rule that made it, see :mod:`enginespec.gpus.attribution`);
per GPU the driver's memory, power and energy figures and what no engine accounts for.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from enginespec.gpus.reader import GpuDevice
from enginespec.process.record import EngineProcess

#: One sample: its family's name, its label values, its value.
Sample = tuple[str, list[str], float]


def label_value(value: str) -> str:
    """A label value prometheus-client can write: argv bytes that are not UTF-8 (surrogate
    escapes from /proc) become ``\\xNN`` escapes instead of failing the whole scrape."""
    return os.fsencode(value).decode("utf-8", "backslashreplace")


def gpu_label(device: GpuDevice) -> str:
    """A GPU's label: its NVML/ROCm index (``0``; ``0:1`` for a MIG instance), else its key."""
    if device.index is None:
        return label_value(device.device)
    return f"{device.index}:{device.mig_index}" if device.mig_index is not None else str(device.index)


def gpu_samples(process: EngineProcess, identity: list[str], gpu_labels: dict[str, str]) -> list[Sample]:
    """Per GPU the bytes the engine's process tree holds, and its share of the GPU's power and
    energy with the rule that made it, where known."""
    samples: list[Sample] = []
    for use in process.gpus:
        gpu = gpu_labels.get(use.device, label_value(use.device))
        if use.memory_bytes is not None:
            samples.append(("enginespec_engine_gpu_memory_bytes", [*identity, gpu], float(use.memory_bytes)))
        rule = use.energy_rule or ""
        if use.power_watts is not None:
            samples.append(("enginespec_engine_power_watts", [*identity, gpu, rule], use.power_watts))
        if use.energy_joules is not None:
            samples.append(("enginespec_engine_energy_joules", [*identity, gpu, rule], use.energy_joules))
    return samples


def gpu_metrics(devices: Sequence[GpuDevice], labels: dict[str, str]) -> Iterator[Metric]:
    """Per GPU (``labels``: each device's label) the driver's memory figures and what no engine or
    listed process accounts for; its power, what no engine's share accounts for, its energy counter."""
    for name, what, attribute, kind in (
        ("memory_total_bytes", "Memory of the GPU", "memory_total_bytes", GaugeMetricFamily),
        (
            "memory_used_bytes",
            "Memory of the GPU in use, as the driver says",
            "memory_used_bytes",
            GaugeMetricFamily,
        ),
        (
            "memory_unattributed_bytes",
            "Memory in use on the GPU that no engine or listed process holds",
            "unattributed_bytes",
            GaugeMetricFamily,
        ),
        ("power_watts", "The GPU's power draw, as the driver says", "power_watts", GaugeMetricFamily),
        (
            "unattributed_power_watts",
            "The GPU's power no engine's share accounts for",
            "unattributed_power_watts",
            GaugeMetricFamily,
        ),
        (
            "energy_joules",
            "The GPU driver's energy counter (it resets when the driver reloads)",
            "energy_joules",
            CounterMetricFamily,
        ),
    ):
        family = kind(f"enginespec_gpu_{name}", what, labels=["gpu"])
        for device in devices:
            value = getattr(device, attribute)
            if value is not None:
                family.add_metric([labels[device.device]], value)
        yield family
