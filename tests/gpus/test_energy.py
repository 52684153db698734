"""Power and energy on fixture hosts (no GPU needed): the test NVML library's power, energy
counter and per-process utilisation, DRM GPUs' hwmon files (amdgpu's power, i915's and xe's
energy counter), the CPU packages' RAPL zones under ``sys/class/powercap``; and what is not
believed (no number, negative, absurd, a FIFO, a huge file) is ``None`` with why."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import enginespec.gpus.nvml as nvml_module
from enginespec import EngineProcess, GpuUse, gpu_ledger
from enginespec.fleet.agent_views import _Served
from enginespec.fleet.documentschema import EngineDocument
from enginespec.gpus.energy import CpuEnergy, CpuEnergyReader, counter_delta, cpu_packages
from enginespec.gpus.reader import GpuReader
from enginespec.scanning.watch import changed_fields
from helpers.gpuhost import GIB, Host, build_nvml, engine

UUID0 = "GPU-6a1f6e4c-2f0b-4c1e-9d1a-0d7a4f1b0c01"
UUID1 = "GPU-6a1f6e4c-2f0b-4c1e-9d1a-0d7a4f1b0c02"
BUS0, BUS1 = "0000:17:00.0", "0000:65:00.0"
AMD0, XE0 = "0000:c1:00.0", "0000:03:00.0"


@pytest.fixture(scope="session")
def nvml_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_nvml(tmp_path_factory.mktemp("nvml-energy"), 3)


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Host:
    # NVML is loaded once per process and remembers the last utilisation sample it read per
    # device: each test starts with an NVML of its own.
    monkeypatch.setattr(nvml_module, "_loaded", {})
    return Host(tmp_path / "host")


def nvidia_gpus(host: Host, monkeypatch: pytest.MonkeyPatch, library: Path) -> None:
    host.nvidia(BUS0, 0, "NVIDIA H100 80GB HBM3", UUID0)
    host.nvidia(BUS1, 1, "NVIDIA H100 80GB HBM3", UUID1)
    lines, host.nvml_lines = host.nvml_lines, []  # the GPUs first: later lines name them
    host.nvml_gpu(UUID0, BUS0, "NVIDIA H100 80GB HBM3", 80 * GIB, 70 * GIB)
    host.nvml_gpu(UUID1, BUS1, "NVIDIA H100 80GB HBM3", 80 * GIB, 70 * GIB)
    host.nvml_lines += lines
    monkeypatch.setenv("ENGINESPEC_NVML_LIBRARY", str(library))
    monkeypatch.setenv("ENGINESPEC_TEST_NVML_HOST", str(host.nvml_file()))


# -- NVML ---------------------------------------------------------------------------------------


def test_nvml_power_and_energy_counter_per_device(
    host: Host, nvml_library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nvmlDeviceGetPowerUsage (milliwatts) and nvmlDeviceGetTotalEnergyConsumption
    (millijoules): GPU 1 is a board without an energy counter (NVML: not supported)."""
    host.nvml_power("0", 312_500)
    host.nvml_energy("0", 987_654_321)
    host.nvml_power("1", 71_250)
    nvidia_gpus(host, monkeypatch, nvml_library)
    devices = {d.device: d for d in gpu_ledger([engine(100)], root=str(host.root))}
    first, second = devices[UUID0], devices[UUID1]
    assert (first.power_watts, first.energy_joules) == (pytest.approx(312.5), pytest.approx(987_654.321))
    assert (first.power_problem, first.energy_problem) == (None, None)
    assert second.power_watts == pytest.approx(71.25)
    assert (second.energy_joules, second.energy_problem) == (
        None,
        "NVML: nvmlDeviceGetTotalEnergyConsumption: not supported",
    )
    dumped = json.loads(first.model_dump_json())
    assert dumped["power_watts"] == pytest.approx(312.5)
    assert dumped["energy_joules"] == pytest.approx(987_654.321)


def test_nvml_errors_and_absurd_values_are_none_with_why(
    host: Host, nvml_library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host.nvml_fail_call("power", "0", 4)
    host.nvml_fail_call("energy", "0", 15)
    host.nvml_power("1", 4_000_000_000)  # 4 MW: no board
    host.nvml_energy("1", (1 << 64) - 1)
    nvidia_gpus(host, monkeypatch, nvml_library)
    devices = {d.device: d for d in gpu_ledger([engine(100)], root=str(host.root))}
    first, second = devices[UUID0], devices[UUID1]
    assert (first.power_watts, first.power_problem) == (None, "NVML: nvmlDeviceGetPowerUsage: no permission")
    assert (first.energy_joules, first.energy_problem) == (
        None,
        "NVML: nvmlDeviceGetTotalEnergyConsumption: GPU is lost",
    )
    assert second.power_watts is None
    assert "beyond any device" in (second.power_problem or "")
    assert second.energy_joules is None
    assert "beyond any device" in (second.energy_problem or "")


def test_nvidia_without_nvml_says_why_power_is_unknown(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    host.nvidia(BUS0, 0, "NVIDIA H100 80GB HBM3", UUID0)
    monkeypatch.setenv("ENGINESPEC_NVML_LIBRARY", str(host.root / "absent" / "libnvidia-ml.so.1"))
    (device,) = gpu_ledger([engine(100)], root=str(host.root))
    assert (device.power_watts, device.energy_joules) == (None, None)
    assert "NVML" in (device.power_problem or "")
    assert "NVML" in (device.energy_problem or "")


# -- hwmon --------------------------------------------------------------------------------------


def test_amdgpu_power_from_hwmon_and_no_energy_counter(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    """amdgpu's hwmon: ``power1_average`` in microwatts (thermal.rst); it keeps no energy file."""
    monkeypatch.delenv("ENGINESPEC_NVML_LIBRARY", raising=False)
    host.drm(AMD0, "0x1002", "amdgpu", 0, 128, product="AMD Instinct MI210")
    host.hwmon(
        AMD0, 3, {"power1_average": "287000000\n", "power1_cap": "300000000\n", "temp1_input": "51000\n"}
    )
    (device,) = gpu_ledger([engine(100)], root=str(host.root))
    assert device.power_watts == pytest.approx(287.0)
    assert device.energy_joules is None
    assert device.energy_problem == "the driver keeps no energy counter (no hwmon energy1_input)"


def test_newer_amdgpu_power1_input(host: Host) -> None:
    host.drm(AMD0, "0x1002", "amdgpu", 0, 128)
    host.hwmon(AMD0, 5, {"power1_input": "45500000\n"})
    (device,) = gpu_ledger([engine(100)], root=str(host.root))
    assert device.power_watts == pytest.approx(45.5)


def test_intel_xe_energy_counter_and_no_power_file(host: Host) -> None:
    """xe's hwmon: ``energy1_input`` (the card's, microjoules) and no power reading."""
    host.drm(XE0, "0x8086", "xe", 0, 128)
    host.hwmon(XE0, 2, {"energy1_input": "123456789012\n", "energy2_input": "999\n", "power1_max": "0\n"})
    (device,) = gpu_ledger([engine(100)], root=str(host.root))
    assert device.energy_joules == pytest.approx(123_456.789012)
    assert device.power_watts is None
    assert device.power_problem == "no hwmon power file (power1_average, power1_input)"


def test_a_gpu_without_hwmon(host: Host) -> None:
    host.drm("0000:04:00.0", "0x1af4", "virtio-pci", 0, 128)
    (device,) = gpu_ledger([engine(100)], root=str(host.root))
    assert (device.power_watts, device.power_problem) == (None, "the driver has no hwmon device")
    assert (device.energy_joules, device.energy_problem) == (None, "the driver has no hwmon device")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("lots\n", "holds no number"),
        ("-5000000\n", "is negative"),
        ("99999999999999999999\n", "beyond any device"),
        ("12\x1b[2J\n", "holds no number"),
        ("1" * (1 << 20), "holds no number"),
        ("", "holds no number"),
    ],
)
def test_hostile_hwmon_values_are_not_believed(host: Host, text: str, why: str) -> None:
    host.drm(AMD0, "0x1002", "amdgpu", 0, 128)
    host.hwmon(AMD0, 0, {"power1_average": text, "energy1_input": text})
    (device,) = gpu_ledger([engine(100)], root=str(host.root))
    assert device.power_watts is None
    assert why in (device.power_problem or "")
    assert device.energy_joules is None
    assert why in (device.energy_problem or "")


def test_a_fifo_or_a_link_to_one_is_refused_not_waited_on(host: Host) -> None:
    host.drm(AMD0, "0x1002", "amdgpu", 0, 128)
    directory = host.hwmon(AMD0, 0, {})
    os.mkfifo(directory / "power1_average")
    os.mkfifo(host.root / "fifo")
    (directory / "energy1_input").symlink_to(host.root / "fifo")
    (device,) = gpu_ledger([engine(100)], root=str(host.root))
    assert (device.power_watts, device.power_problem) == (None, "cannot read hwmon0/power1_average")
    assert (device.energy_joules, device.energy_problem) == (None, "cannot read hwmon0/energy1_input")


# -- RAPL ---------------------------------------------------------------------------------------


def test_cpu_packages_from_powercap(host: Host) -> None:
    """Top-level RAPL zones only (a package's ``core`` subzone is in its package), each with its
    counter and where it wraps (powercap.rst)."""
    host.rapl(0, "package-0", 81_234_567_890, 262_143_328_850)
    host.rapl(1, "package-1", 12, 262_143_328_850)
    (first, second) = cpu_packages(str(host.root))
    assert (first.zone, first.name, first.problem) == ("intel-rapl:0", "package-0", None)
    assert first.energy_joules == pytest.approx(81_234.56789)
    assert first.max_energy_joules == pytest.approx(262_143.32885)
    assert (second.zone, second.energy_joules) == ("intel-rapl:1", pytest.approx(12e-6))


def test_cpu_packages_unreadable_or_lying(host: Host) -> None:
    host.rapl(0, "package-0", None, 262_143_328_850)  # energy_uj root-only: unreadable here
    host.rapl(1, "package-1\x1b[31m", 300_000_000_000, 262_143_328_850)  # beyond its range
    host.rapl(2, "package-2", "x", "-1")
    first, second, third = cpu_packages(str(host.root))
    assert first.energy_joules is None
    assert "CVE-2020-8694" in (first.problem or "")
    assert (second.name, second.energy_joules) == (None, None)
    assert second.problem == "intel-rapl:1/energy_uj is beyond its max_energy_range_uj"
    assert (third.energy_joules, third.max_energy_joules) == (None, None)
    assert third.problem == "intel-rapl:2/energy_uj holds no number"


def test_no_powercap_no_packages(host: Host) -> None:
    assert cpu_packages(str(host.root)) == ()


def test_a_counter_that_wraps_or_resets() -> None:
    assert counter_delta(100.0, 250.0, 262_143.0) == (150.0, None)
    delta, why = counter_delta(262_000.0, 43.0, 262_143.0)  # wrapped past max_energy_range
    assert (delta, why) == (pytest.approx(186.0), None)
    delta, why = counter_delta(5_000.0, 20.0, None)  # the driver reloaded: no range to add
    assert delta is None
    assert "reset" in (why or "")


# -- attribution --------------------------------------------------------------------------------


class Clock:
    """A reader's clock a test moves (monotonic seconds)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def cuda_worker(host: Host, pid: int, *gpus: Path) -> None:
    fds: dict[int, Path | str] = {10: host.root / "dev" / "nvidiactl", 11: host.root / "dev" / "nvidia-uvm"}
    fds.update({20 + i: gpu for i, gpu in enumerate(gpus)})
    host.process(pid, "VLLM::Worker", fds)


def one_nvidia(host: Host, monkeypatch: pytest.MonkeyPatch, library: Path) -> None:
    """GPU 0 with engine A (pids 100, 102: 30 GiB), engine B (200: 10 GiB) and a job that is no
    engine (999: 2 GiB), as NVML lists them."""
    gpu = host.nvidia(BUS0, 0, "NVIDIA H100 80GB HBM3", UUID0)
    host.process(100, "vllm", {})
    cuda_worker(host, 102, gpu)
    cuda_worker(host, 200, gpu)
    monkeypatch.setenv("ENGINESPEC_NVML_LIBRARY", str(library))
    monkeypatch.setenv("ENGINESPEC_TEST_NVML_HOST", str(host.root / "nvml-host.tsv"))


def nvml_reading(
    host: Host, millijoules: int | None, milliwatts: int, util: dict[int, int], stamp: int
) -> None:
    """The description NVML answers from now (read again on every poll)."""
    host.nvml_lines = []
    host.nvml_gpu(UUID0, BUS0, "NVIDIA H100 80GB HBM3", 80 * GIB, 70 * GIB)
    host.nvml_process("0", 102, 30 * GIB)
    host.nvml_process("0", 200, 10 * GIB)
    host.nvml_process("0", 999, 2 * GIB)
    host.nvml_power("0", milliwatts)
    if millijoules is not None:
        host.nvml_energy("0", millijoules)
    for pid, sm in util.items():
        host.nvml_util("0", pid, sm, stamp)
    host.nvml_file()


TREES = [(100, 102), (200,)]


def read(reader: GpuReader) -> list[GpuUse]:
    """Each tree's use of GPU 0."""
    return [uses[0] for uses, _problem in reader.read(TREES)]


def test_energy_by_utilization_share_with_the_rest_unattributed(
    host: Host, nvml_library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between two readings the counter rose 500 J in 10 s; NVML's samples of the window give
    engine A's pid 50 % of the SM time, B's 25 %, a job that is no engine's 25 %: A 250 J, B
    125 J, 125 J unattributed; their power is their share of the window's mean 50 W."""
    one_nvidia(host, monkeypatch, nvml_library)
    nvml_reading(host, 1_000_000, 300_000, {102: 60, 200: 20, 999: 20}, stamp=1)
    clock = Clock()
    reader = GpuReader(str(host.root))
    reader.clock = clock
    first, second = read(reader)
    assert (first.energy_rule, first.power_watts, first.energy_joules) == (
        "utilization",
        pytest.approx(180.0),
        None,
    )
    assert first.energy_problem == "one reading so far"
    assert second.power_watts == pytest.approx(60.0)
    nvml_reading(host, 1_500_000, 50_000, {102: 50, 200: 25, 999: 25}, stamp=2)
    clock.now += 10
    first, second = read(reader)
    assert (first.energy_rule, first.energy_from, first.energy_problem) == ("utilization", "counter", None)
    assert (first.energy_joules, first.power_watts) == (pytest.approx(250.0), pytest.approx(25.0))
    assert (second.energy_joules, second.power_watts) == (pytest.approx(125.0), pytest.approx(12.5))
    assert reader.unattributed_joules[UUID0] == pytest.approx(125.0)
    # read again within the same reading of the host: nothing counted twice
    clock.now += 0.5
    assert read(reader) == [first, second]
    assert reader.unattributed_joules[UUID0] == pytest.approx(125.0)


def test_a_process_nvml_does_not_sample_gets_no_share(
    host: Host, nvml_library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NVML sampled A and the other job, not B (listed, idle in the window): B's share is 0."""
    one_nvidia(host, monkeypatch, nvml_library)
    nvml_reading(host, 0, 100_000, {102: 80, 999: 20}, stamp=1)
    clock = Clock()
    reader = GpuReader(str(host.root))
    reader.clock = clock
    read(reader)
    nvml_reading(host, 200_000, 100_000, {102: 80, 999: 20}, stamp=2)
    clock.now += 2.5
    first, second = read(reader)
    assert first.energy_joules == pytest.approx(160.0)
    assert (second.energy_rule, second.energy_joules, second.power_watts) == ("utilization", 0.0, 0.0)
    assert reader.unattributed_joules[UUID0] == pytest.approx(40.0)


def test_a_tree_nvml_does_not_list_has_no_share_by_memory_and_says_why(
    host: Host, nvml_library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B holds the GPU (its fds say so) but NVML lists none of its pids (another pid namespace's
    driver view): its bytes, and so its memory share, are unknown; A's share stands."""
    one_nvidia(host, monkeypatch, nvml_library)
    clock = Clock()
    reader = GpuReader(str(host.root))
    reader.clock = clock
    for millijoules in (1_000_000, 1_700_000):
        nvml_reading(host, millijoules, 70_000, {}, stamp=1)
        host.nvml_lines = [line for line in host.nvml_lines if "\t200\t" not in line]
        host.nvml_file()
        clock.now += 10
        first, second = read(reader)
    assert (first.energy_rule, first.energy_joules) == ("memory", pytest.approx(300.0))
    assert (second.source, second.memory_bytes, second.energy_joules, second.power_watts) == (
        "fd",
        None,
        None,
        None,
    )
    assert second.energy_problem == "the tree's memory on the device is unknown"
    assert reader.unattributed_joules[UUID0] == pytest.approx(400.0)


def test_energy_by_memory_share_without_utilization_samples(
    host: Host, nvml_library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No utilisation samples (NVML_ERROR_NOT_FOUND): each tree's bytes over the 70 GiB in use."""
    one_nvidia(host, monkeypatch, nvml_library)
    nvml_reading(host, 5_000_000, 70_000, {}, stamp=1)
    clock = Clock()
    reader = GpuReader(str(host.root))
    reader.clock = clock
    read(reader)
    nvml_reading(host, 5_700_000, 70_000, {}, stamp=1)
    clock.now += 10
    first, second = read(reader)
    assert (first.energy_rule, first.energy_joules, first.power_watts) == (
        "memory",
        pytest.approx(300.0),
        pytest.approx(30.0),
    )
    assert (second.energy_rule, second.energy_joules) == ("memory", pytest.approx(100.0))
    assert reader.unattributed_joules[UUID0] == pytest.approx(300.0)


def test_a_counter_that_goes_back_says_so_and_counts_nothing(
    host: Host, nvml_library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver reloaded between two readings (its counter restarts): that window gives no
    energy and says why; the next one counts again."""
    one_nvidia(host, monkeypatch, nvml_library)
    clock = Clock()
    reader = GpuReader(str(host.root))
    reader.clock = clock
    for stamp, millijoules in enumerate((9_000_000, 9_700_000, 1_000, 701_000), start=1):
        nvml_reading(host, millijoules, 70_000, {}, stamp=stamp)
        clock.now += 10
        uses = read(reader)
        if stamp == 3:
            assert uses[0].energy_joules == pytest.approx(300.0)  # what the first window gave
            assert uses[0].power_watts is None
            assert "reset" in (uses[0].energy_problem or "")
    assert uses[0].energy_joules == pytest.approx(600.0)
    assert reader.unattributed_joules[UUID0] == pytest.approx(600.0)


def test_hostile_utilization_and_memory_never_give_more_than_the_device(
    host: Host, nvml_library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Samples above 100 % are not believed; pids listed twice count once: the shares of a
    device never add up to more than its energy."""
    one_nvidia(host, monkeypatch, nvml_library)
    clock = Clock()
    reader = GpuReader(str(host.root))
    reader.clock = clock
    for stamp in (1, 2):
        nvml_reading(host, 1_000_000 * stamp, 100_000, {102: 100, 200: 4000}, stamp=stamp)
        with open(host.root / "nvml-host.tsv", "a") as description:
            description.write(f"util\t0\t102\t100\t{stamp}\nutil\t0\t999\t100\t{stamp}\n")
        clock.now += 10
        first, second = read(reader)
    total = (first.energy_joules or 0) + (second.energy_joules or 0)
    assert total <= 1000.0 + 1e-9
    assert (first.energy_joules, second.energy_joules) == (pytest.approx(500.0), 0.0)


def test_amdgpu_without_an_energy_counter_by_power_times_interval(host: Host) -> None:
    """amdgpu has power only: the window's energy is the mean of its two power readings times
    the interval, said in ``energy_from``; the share is by KFD's bytes (no utilisation)."""
    host.kfd_node(0, 0, 0)
    host.kfd_node(1, 51234, 128)
    render = host.drm(AMD0, "0x1002", "amdgpu", 0, 128, vram=(64 * GIB, 40 * GIB))
    hwmon = host.hwmon(AMD0, 1, {"power1_average": "200000000\n"})
    host.process(100, "vllm", {9: host.root / "dev" / "kfd", 30: render})
    host.kfd_vram(100, 51234, 32 * GIB)
    clock = Clock()
    reader = GpuReader(str(host.root))
    reader.clock = clock
    ((use,), _problem) = reader.read([(100,)])[0]
    assert (use.energy_rule, use.power_watts) == ("memory", pytest.approx(160.0))
    (hwmon / "power1_average").write_text("300000000\n")
    clock.now += 10
    ((use,), _problem) = reader.read([(100,)])[0]
    assert (use.energy_from, use.energy_joules, use.power_watts) == (
        "power",
        pytest.approx(2000.0),
        pytest.approx(200.0),
    )


def test_a_device_that_says_nothing_of_power_gives_none_with_why(host: Host) -> None:
    render = host.drm("0000:04:00.0", "0x1af4", "virtio-pci", 0, 128)
    host.process(100, "llama-server", {30: render})
    reader = GpuReader(str(host.root))
    ((use,), _problem) = reader.read([(100,)])[0]
    assert (use.power_watts, use.energy_joules, use.energy_rule) == (None, None, None)
    assert "memory in use unknown" in (use.energy_problem or "")


def test_the_ledger_shows_the_power_no_engine_accounts_for(
    host: Host, nvml_library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one_nvidia(host, monkeypatch, nvml_library)
    nvml_reading(host, 1_000_000, 300_000, {102: 60, 200: 20, 999: 20}, stamp=1)
    a, b = engine(100, workers=(102,)), engine(200, port=8001)
    (device,) = gpu_ledger([a, b], root=str(host.root))
    assert device.power_watts == pytest.approx(300.0)
    assert device.unattributed_power_watts == pytest.approx(60.0)


def test_a_watch_tells_of_a_change_in_what_is_held_not_of_every_watt() -> None:
    use = GpuUse(
        device=UUID0,
        index=0,
        vendor="nvidia",
        name=None,
        pci_bus_id=BUS0,
        memory_bytes=GIB,
        pids=(1,),
        source="nvml",
    )
    before = engine(100).model_copy(update={"gpus": (use,)})
    warmer = before.model_copy(update={"gpus": (use.model_copy(update={"power_watts": 250.0}),)})
    bigger = before.model_copy(update={"gpus": (use.model_copy(update={"memory_bytes": 2 * GIB}),)})
    assert changed_fields(before, warmer) == ()
    assert changed_fields(before, bigger) == ("gpus",)


def test_the_exporter_series_of_power_and_energy(
    host: Host, nvml_library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engines' shares (with the rule as a label) after two readings, and each GPU's power,
    counter and power no engine accounts for, scraped as Prometheus text."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families
    from prometheus_client.registry import CollectorRegistry

    from enginespec.fleet.exporter import EngineCollector, Snapshot
    from enginespec.scanning.scanner import with_held

    one_nvidia(host, monkeypatch, nvml_library)
    clock = Clock()
    reader = GpuReader(str(host.root))
    reader.clock = clock
    processes = [engine(100, workers=(102,)), engine(200, port=8001)]
    nvml_reading(host, 1_000_000, 300_000, {102: 60, 200: 20, 999: 20}, stamp=1)
    reader.read(TREES)
    nvml_reading(host, 1_500_000, 50_000, {102: 50, 200: 25, 999: 25}, stamp=2)
    clock.now += 10
    processes, _views = with_held(processes, reader.read(TREES), {})
    collector = EngineCollector()
    devices = gpu_ledger(processes, root=str(host.root), all_processes=False, reread=False)
    cpu = [CpuEnergy(power_watts=7.5, energy_joules=75.0), CpuEnergy(power_watts=None, energy_joules=None)]
    collector.snapshot = Snapshot(processes=processes, gpus=devices, cpu_energy=cpu)
    registry = CollectorRegistry()
    registry.register(collector)
    series: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            series.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    a, b = processes

    def labels(process: EngineProcess, **extra: str) -> tuple[tuple[str, str], ...]:
        found = {"engine_id": process.instance_id, "engine": "vllm", "model": "/models/m", "gpu": "0"}
        return tuple(sorted({**found, **extra}.items()))

    assert series["enginespec_engine_power_watts"] == {
        labels(a, rule="utilization"): pytest.approx(25.0),
        labels(b, rule="utilization"): pytest.approx(12.5),
    }
    assert series["enginespec_engine_energy_joules_total"] == {
        labels(a, rule="utilization"): pytest.approx(250.0),
        labels(b, rule="utilization"): pytest.approx(125.0),
    }
    assert series["enginespec_gpu_power_watts"] == {(("gpu", "0"),): pytest.approx(50.0)}
    assert series["enginespec_gpu_energy_joules_total"] == {(("gpu", "0"),): pytest.approx(1500.0)}
    assert series["enginespec_gpu_unattributed_power_watts"] == {(("gpu", "0"),): pytest.approx(12.5)}

    def cpu(process: EngineProcess) -> tuple[tuple[str, str], ...]:
        found = {"engine_id": process.instance_id, "engine": "vllm", "model": "/models/m", "rule": "cpu_time"}
        return tuple(sorted(found.items()))

    assert series["enginespec_engine_cpu_power_watts"] == {cpu(a): 7.5}
    assert series["enginespec_engine_cpu_energy_joules_total"] == {cpu(a): 75.0}
    assert series["enginespec_gpu_memory_used_bytes"] == {(("gpu", "0"),): 70 * GIB}
    # the agent's /v1/engines: each engine's share of the CPU packages beside its GPUs' energy, in
    # the published document schema
    served = _Served(collector.snapshot)
    first, second = (json.loads(piece) for piece in served.pieces)
    assert first["cpu_energy"] == {
        "power_watts": 7.5,
        "energy_joules": 75.0,
        "rule": "cpu_time",
        "problem": None,
    }
    assert second["cpu_energy"]["energy_joules"] is None
    assert first["gpus"][0]["energy_joules"] == pytest.approx(250.0)
    for document in (first, second):
        EngineDocument.model_validate(document)


# -- the CPU packages' energy by CPU time --------------------------------------------------------


def proc_stat(host: Host, busy: int, idle: int) -> None:
    """``proc/stat`` as the kernel writes it (proc(5)): ``busy`` ticks split over user, system,
    irq and softirq."""
    user, system, irq = busy // 2, busy // 4, busy // 8
    softirq = busy - user - system - irq
    (host.root / "proc" / "stat").write_text(
        f"cpu  {user} 0 {system} {idle} 7 {irq} {softirq} 0 0 0\n"
        f"cpu0 {user} 0 {system} {idle} 7 {irq} {softirq} 0 0 0\n"
        "intr 1 2 3\nctxt 42\nbtime 1765000000\nprocesses 9\n"
    )


def pid_stat(host: Host, pid: int, comm: str, utime: int, stime: int, start: int = 5000) -> None:
    """``proc/PID/stat``: 52 fields, utime and stime the 14th and 15th, the start the 22nd."""
    fields = ["S", "1"] + ["0"] * 9 + [str(utime), str(stime)] + ["0"] * 6 + [str(start)] + ["0"] * 30
    directory = host.root / "proc" / str(pid)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "stat").write_text(f"{pid} ({comm}) {' '.join(fields)}\n")


def rapl_counter(host: Host, zone: int, energy_uj: int) -> None:
    path = host.root / "sys" / "devices" / "virtual" / "powercap" / "intel-rapl" / f"intel-rapl:{zone}"
    (path / "energy_uj").write_text(f"{energy_uj}\n")


def test_cpu_energy_by_cpu_time_share_across_a_counter_that_wraps(host: Host) -> None:
    """Two packages; package 1's counter wraps in the window (powercap.rst: add the range). The
    packages gave 100 + 60 J in 10 s; the CPUs were busy 1000 ticks: engine A's pids 500 (a
    comm with ``) (`` in it), B's 100: A 80 J, B 16 J, 64 J no engine's."""
    wrap = 262_143_328_850
    host.rapl(0, "package-0", 10_000_000, wrap)
    host.rapl(1, "package-1", wrap - 20_000_000, wrap)
    host.rapl(2, "psys", 0, wrap)  # the platform's zone: no package
    proc_stat(host, 50_000, 900_000)
    pid_stat(host, 100, "vllm ) (x", 1000, 200)
    pid_stat(host, 102, "VLLM::Worker", 3000, 100)
    pid_stat(host, 200, "llama-server", 700, 0)
    clock = Clock()
    reader = CpuEnergyReader(str(host.root))
    reader.clock = clock
    first = reader.read([(100, 102), (200,)])
    assert [(e.power_watts, e.energy_joules, e.problem) for e in first] == [
        (None, None, "one reading so far")
    ] * 2
    rapl_counter(host, 0, 110_000_000)
    rapl_counter(host, 1, 40_000_000)
    proc_stat(host, 51_000, 901_000)
    pid_stat(host, 100, "vllm ) (x", 1100, 200)
    pid_stat(host, 102, "VLLM::Worker", 3300, 200)
    pid_stat(host, 200, "llama-server", 780, 20)
    clock.now += 10
    a, b = reader.read([(100, 102), (200,)])
    assert (a.rule, a.energy_joules, a.power_watts, a.problem) == (
        "cpu_time",
        pytest.approx(80.0),
        pytest.approx(8.0),
        None,
    )
    assert (b.energy_joules, b.power_watts) == (pytest.approx(16.0), pytest.approx(1.6))
    assert reader.unattributed_joules == pytest.approx(64.0)


def test_cpu_energy_never_more_than_the_packages_and_a_reused_pid_counts_from_the_next_window(
    host: Host,
) -> None:
    """Pids claiming more CPU time than the CPUs were busy share the energy, no more; a pid
    whose start changed (reused) counts nothing for the window it changed in."""
    host.rapl(0, "package-0", 0, 262_143_328_850)
    proc_stat(host, 1000, 0)
    pid_stat(host, 100, "a", 0, 0)
    pid_stat(host, 200, "b", 0, 0)
    pid_stat(host, 300, "c", 0, 0)
    clock = Clock()
    reader = CpuEnergyReader(str(host.root))
    reader.clock = clock
    reader.read([(100,), (200,), (300,)])
    rapl_counter(host, 0, 50_000_000)
    proc_stat(host, 1100, 0)
    pid_stat(host, 100, "a", 300, 0)
    pid_stat(host, 200, "b", 100, 0)
    pid_stat(host, 300, "c", 999, 0, start=9999)  # another process now
    clock.now += 5
    a, b, c = reader.read([(100,), (200,), (300,)])
    assert (a.energy_joules, b.energy_joules, c.energy_joules) == (
        pytest.approx(37.5),
        pytest.approx(12.5),
        0.0,
    )
    assert reader.unattributed_joules == pytest.approx(0.0)


def test_cpu_energy_unknown_says_why(host: Host) -> None:
    pid_stat(host, 100, "a", 0, 0)
    reader = CpuEnergyReader(str(host.root))
    (only,) = reader.read([(100,)])
    assert (only.energy_joules, only.problem) == (
        None,
        "no RAPL package zone (/sys/class/powercap/intel-rapl:<N>)",
    )
    host.rapl(0, "package-0", None, 262_143_328_850)  # energy_uj root-only
    (only,) = reader.read([(100,)])
    assert only.power_watts is None
    assert "CVE-2020-8694" in (only.problem or "")
