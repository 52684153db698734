"""Fixture hosts for the GPU tests: a directory laid out like ``/`` with the files GPU drivers
write (``proc/driver/nvidia/gpus/<bus>/information`` as nv-procfs.c prints it, ``sys/class/drm``
links into ``sys/devices``, KFD topology and per-process files), real character devices made with
mknod under ``dev/`` for the processes' ``proc/PID/fd/*`` links to point at, and ``fdinfo`` files;
and the test NVML library (helpers/nvml_fake.c) built in the variants drivers have, fed by a
description file."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from enginespec import EngineProcess
from enginespec.definition.signature import Role

NVML_SOURCE = Path(__file__).parent / "nvml_fake.c"
UVM_MAJOR = 508
KFD_MAJOR = 509
GIB = 1 << 30
MIB = 1 << 20


def build_nvml(directory: Path, api: int) -> Path:
    """The test NVML library with the process-list API of a driver generation (1, 2, 3, 35)."""
    library = directory / f"libnvidia-ml-api{api}.so"
    subprocess.run(
        [
            "gcc",
            "-O1",
            "-Wall",
            "-shared",
            "-fPIC",
            f"-DPROC_API={api}",
            "-o",
            str(library),
            str(NVML_SOURCE),
        ],
        check=True,
    )
    return library


class Host:
    """A fixture host under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.nvml_lines: list[str] = []
        (root / "dev").mkdir(parents=True)
        (root / "proc").mkdir()
        (root / "proc" / "devices").write_text(
            "Character devices:\n  1 mem\n  4 /dev/vc/0\n  5 /dev/tty\n136 pts\n195 nvidia-frontend\n"
            f"226 drm\n{UVM_MAJOR} nvidia-uvm\n{KFD_MAJOR} kfd\n\nBlock devices:\n  8 sd\n"
        )
        self.node("null", 1, 3)
        self.node("pts/0", 136, 0)

    def node(self, name: str, major: int, minor: int) -> Path:
        """A real character device ``dev/<name>``."""
        path = self.root / "dev" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(major, minor))
        return path

    # -- NVIDIA ------------------------------------------------------------------------------

    def nvidia(self, bus: str, minor: int, model: str, uuid: str | None) -> Path:
        """A GPU as the NVIDIA driver lists it, and its ``/dev/nvidia<minor>``."""
        directory = self.root / "proc" / "driver" / "nvidia" / "gpus" / bus
        directory.mkdir(parents=True)
        lines = [f"Model: \t\t {model}", "IRQ:   \t\t 35"]
        if uuid is not None:
            lines.append(f"GPU UUID: \t {uuid}")
        lines += [
            "Video BIOS: \t 94.02.5c.00.01",
            "Bus Type: \t PCIe",
            "DMA Size: \t 47 bits",
            "DMA Mask: \t 0x7fffffffffff",
            f"Bus Location: \t {bus}",
            f"Device Minor: \t {minor}",
            "GPU Firmware: \t 550.54.15",
            "GPU Excluded:\t No",
        ]
        (directory / "information").write_text("\n".join(lines) + "\n")
        self.node("nvidiactl", 195, 255)
        self.node("nvidia-modeset", 195, 254)
        self.node("nvidia-uvm", UVM_MAJOR, 0)
        return self.node(f"nvidia{minor}", 195, minor)

    def nvml_gpu(self, uuid: str, bus: str, name: str, total: int, used: int) -> None:
        self.nvml_lines.append(f"gpu\t{uuid}\t{'0000' + bus.upper()}\t{name}\t{total}\t{used}")

    def nvml_mig(self, gpu: int, slot: int, uuid: str, name: str, total: int, used: int) -> None:
        self.nvml_lines.append(f"mig\t{gpu}\t{slot}\t{uuid}\t{name}\t{total}\t{used}")

    def nvml_process(self, ref: str, pid: int, size: int | None, kind: str = "compute") -> None:
        self.nvml_lines.append(f"{kind}\t{ref}\t{pid}\t{'na' if size is None else size}")

    def nvml_fail(self, ref: str, code: int) -> None:
        """The device's process lists fail with NVML error ``code`` (4: no permission)."""
        self.nvml_lines.append(f"fail\t{ref}\t{code}")

    def nvml_power(self, ref: str, milliwatts: int) -> None:
        self.nvml_lines.append(f"power\t{ref}\t{milliwatts}")

    def nvml_energy(self, ref: str, millijoules: int) -> None:
        self.nvml_lines.append(f"energy\t{ref}\t{millijoules}")

    def nvml_util(self, ref: str, pid: int, sm: int, stamp: int | None = None) -> None:
        """A per-process utilisation sample (SM percent) NVML has for the device."""
        self.nvml_lines.append(f"util\t{ref}\t{pid}\t{sm}" + ("" if stamp is None else f"\t{stamp}"))

    def nvml_fail_call(self, call: str, ref: str, code: int) -> None:
        """``call`` (``power``, ``energy``, ``util``) fails on the device with NVML error ``code``."""
        self.nvml_lines.append(f"fail-{call}\t{ref}\t{code}")

    def nvml_file(self) -> Path:
        path = self.root / "nvml-host.tsv"
        path.write_text("\n".join(self.nvml_lines) + "\n")
        return path

    # -- DRM and KFD -------------------------------------------------------------------------

    def drm(
        self,
        pci: str,
        vendor: str,
        driver: str,
        card: int,
        render: int,
        *,
        product: str | None = None,
        vram: tuple[int, int] | None = None,
    ) -> Path:
        """A PCI GPU with DRM nodes ``card<card>`` and ``renderD<render>`` as sysfs shows them
        (``sys/class/drm/*`` links into ``sys/devices``); returns its ``/dev/dri/renderD<N>``."""
        sys = self.root / "sys"
        device = sys / "devices" / "pci0000:00" / pci
        device.mkdir(parents=True)
        (device / "vendor").write_text(f"{vendor}\n")
        (device / "device").write_text("0x0001\n")
        if product:
            (device / "product_name").write_text(f"{product}\n")
        if vram is not None:
            (device / "mem_info_vram_total").write_text(f"{vram[0]}\n")
            (device / "mem_info_vram_used").write_text(f"{vram[1]}\n")
        drivers = sys / "bus" / "pci" / "drivers" / driver
        drivers.mkdir(parents=True, exist_ok=True)
        (device / "driver").symlink_to(os.path.relpath(drivers, device))
        (sys / "class" / "drm").mkdir(parents=True, exist_ok=True)
        for name, minor in ((f"card{card}", card), (f"renderD{render}", render)):
            node = device / "drm" / name
            node.mkdir(parents=True)
            (node / "dev").write_text(f"226:{minor}\n")
            (node / "device").symlink_to(f"../../../{pci}")  # as sysfs links it
            (sys / "class" / "drm" / name).symlink_to(os.path.relpath(node, sys / "class" / "drm"))
        self.node(f"dri/card{card}", 226, card)
        return self.node(f"dri/renderD{render}", 226, render)

    def hwmon(self, pci: str, number: int, files: Mapping[str, str]) -> Path:
        """The hwmon device ``hwmon<number>`` of the PCI GPU at ``pci`` with these files
        (``power1_average``, ``energy1_input``...), as a DRM driver registers it under its device."""
        directory = self.root / "sys" / "devices" / "pci0000:00" / pci / "hwmon" / f"hwmon{number}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "name").write_text("amdgpu\n")
        for name, text in files.items():
            (directory / name).write_text(text)
        return directory

    def rapl(self, zone: int, name: str, energy_uj: int | str | None, max_uj: int | str) -> Path:
        """A powercap RAPL zone ``intel-rapl:<zone>`` as the kernel lists it (a link in
        ``sys/class/powercap`` into ``sys/devices/virtual/powercap/intel-rapl``), with its first
        subzone (``core``), which a reader of packages skips."""
        sys = self.root / "sys"
        control = sys / "devices" / "virtual" / "powercap" / "intel-rapl"
        directory = control / f"intel-rapl:{zone}"
        sub = directory / f"intel-rapl:{zone}:0"
        sub.mkdir(parents=True)
        (sub / "name").write_text("core\n")
        (sub / "energy_uj").write_text("5\n")
        (directory / "name").write_text(f"{name}\n")
        if energy_uj is not None:
            (directory / "energy_uj").write_text(f"{energy_uj}\n")
        (directory / "max_energy_range_uj").write_text(f"{max_uj}\n")
        links = sys / "class" / "powercap"
        links.mkdir(parents=True, exist_ok=True)
        for target in (directory, sub):
            link = links / target.name
            if not link.exists():
                link.symlink_to(os.path.relpath(target, links))
        if not (links / "intel-rapl").exists():
            (links / "intel-rapl").symlink_to(os.path.relpath(control, links))
        return directory

    def kfd_node(self, node: int, gpu_id: int, render: int) -> Path:
        """A KFD topology node (``gpu_id`` 0: a CPU node) and ``/dev/kfd``."""
        directory = self.root / "sys" / "class" / "kfd" / "kfd" / "topology" / "nodes" / str(node)
        directory.mkdir(parents=True)
        (directory / "gpu_id").write_text(f"{gpu_id}\n")
        properties = f"cpu_cores_count 0\nsimd_count 240\nmax_waves_per_simd 16\ndrm_render_minor {render}\n"
        (directory / "properties").write_text(properties if gpu_id else "cpu_cores_count 32\n")
        return self.node("kfd", KFD_MAJOR, 0)

    def kfd_vram(self, pid: int, gpu_id: int, size: int) -> None:
        directory = self.root / "sys" / "class" / "kfd" / "kfd" / "proc" / str(pid)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"vram_{gpu_id}").write_text(f"{size}\n")

    # -- processes ---------------------------------------------------------------------------

    def process(
        self,
        pid: int,
        comm: str,
        fds: Mapping[int, Path | str],
        fdinfo: Mapping[int, str] | None = None,
        nspid: Sequence[int] = (),
    ) -> Path:
        """``proc/<pid>`` with ``fd/N`` links (to a device or file of the fixture, or to a
        ``socket:[...]``-like name that resolves to nothing) and ``fdinfo/N``."""
        directory = self.root / "proc" / str(pid)
        (directory / "fd").mkdir(parents=True)
        (directory / "fdinfo").mkdir()
        (directory / "comm").write_text(f"{comm}\n")
        (directory / "status").write_text(
            f"Name:\t{comm}\nPid:\t{pid}\nNSpid:\t{' '.join(map(str, (pid, *nspid)))}\n"
        )
        log = self.root / "var" / "log" / f"{pid}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("")
        base: dict[int, Path | str] = {
            0: self.root / "dev" / "null",
            1: log,
            2: self.root / "dev" / "pts" / "0",
            3: "socket:[41]",
        }
        for fd, target in {**base, **fds}.items():
            (directory / "fd" / str(fd)).symlink_to(target)
            text = (fdinfo or {}).get(fd, "pos:\t0\nflags:\t02\nmnt_id:\t25\nino:\t1\n")
            (directory / "fdinfo" / str(fd)).write_text(text)
        return directory


def fdinfo_new(
    pdev: str, client: int, driver: str, regions: Mapping[str, tuple[int, int]], **extra: str
) -> str:
    """A DRM fdinfo of kernels 6.3+: ``drm-total-<region>`` and ``drm-resident-<region>`` per
    region, as (total, resident) in bytes, written in KiB as the kernel writes them."""
    lines = ["pos:\t0", "flags:\t02100002", "mnt_id:\t26", "ino:\t1037", f"drm-driver:\t{driver}"]
    lines += [f"drm-pdev:\t{pdev}", f"drm-client-id:\t{client}", "drm-engine-render:\t123456 ns"]
    for region, (total, resident) in regions.items():
        lines += [
            f"drm-total-{region}:\t{total // 1024} KiB",
            f"drm-resident-{region}:\t{resident // 1024} KiB",
        ]
    lines += [f"{key.replace('_', '-')}:\t{value}" for key, value in extra.items()]
    return "\n".join(lines) + "\n"


def fdinfo_old(pdev: str, client: int, regions: Mapping[str, int], evicted: int = 0) -> str:
    """An amdgpu fdinfo of kernels before 6.3: ``drm-memory-<region>`` in KiB and
    ``amd-evicted-vram``."""
    lines = ["pos:\t0", "flags:\t02100002", "mnt_id:\t26", "ino:\t1037", "drm-driver:\tamdgpu"]
    lines += [f"drm-pdev:\t{pdev}", f"drm-client-id:\t{client}"]
    lines += [f"drm-memory-{region}:\t{size // 1024} KiB" for region, size in regions.items()]
    lines += ["amd-memory-visible-vram:\t0 KiB", f"amd-evicted-vram:\t{evicted // 1024} KiB"]
    return "\n".join(lines) + "\n"


def engine(
    pid: int,
    engine_name: str = "vllm",
    *,
    workers: Sequence[int] = (),
    role: Role = "server",
    port: int | None = 8000,
    model: str = "/models/m",
) -> EngineProcess:
    """An engine record as a scan makes it (the GPU layer reads only its pid and workers)."""
    return EngineProcess(
        pid=pid,
        start_time=1000.0 + pid,
        ppid=1,
        engine=engine_name,
        model=model,
        served_model_names=(model,),
        host=None,
        port=port,
        effective_host="127.0.0.1",
        effective_port=port,
        role=role,
        base_url=f"http://127.0.0.1:{port}" if port else None,
        argv=(engine_name, model),
        exe=None,
        worker_pids=tuple(workers),
        supervisor=None,
        listen_ports=(),
    )
