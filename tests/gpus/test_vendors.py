"""A GPU vendor is one module behind one protocol (``gpus/vendor.py``), asked by the reader from
its registry: a vendor the package has never heard of, registered by one line, has its devices in
the ledger and is attributed to the processes that hold them, through the public functions, with
no other module changed."""

from __future__ import annotations

from pathlib import Path

import pytest

import enginespec.gpus.reader as reader_module
from enginespec import gpu_ledger, with_gpus
from enginespec.gpus.drm import drm_client
from enginespec.gpus.vendor import Device, HostGpus, TreeGpus, VendorReading, number, read_text
from helpers.gpuhost import GIB, Host, engine, fdinfo_new

FAKE_MAJOR = 511


class FakeReading(VendorReading):
    def __init__(self, host: HostGpus, majors: frozenset[int]) -> None:
        self.root = host.door
        self.nodes = host.nodes
        self.majors = majors

    def opened(self, pid: int, fd: int, major: int, minor: int, tree: TreeGpus) -> None:
        tree.unknown.setdefault("other", "uses the fake accelerator: device unknown")
        text = read_text(self.root, "proc", str(pid), "fdinfo", str(fd))
        key, client = drm_client(text or "")
        device = self.nodes.get((major, minor))
        if device is not None and key is not None:
            tree.holding(device).clients.setdefault(key, client)


class FakeVendor:
    """An accelerator whose driver lists its boards in ``sys/class/fakeaccel/<minor>/`` (``name``,
    ``mem_total``, ``mem_used``), names its character devices ``fakeaccel`` in ``/proc/devices``
    and reports each client's memory in its fdinfo, as the kernel's accel drivers do."""

    def read(self, host: HostGpus, libraries: bool) -> FakeReading:
        majors = frozenset(host.majors.get("fakeaccel", ()))
        base = ("sys", "class", "fakeaccel")
        for board in sorted(host.door.kernel_directory(*base)):
            minor = int(board)
            device = Device(
                key=f"fake:{minor}",
                vendor="other",
                name=(read_text(host.door, *base, board, "name") or "").strip() or None,
                pci=None,
                index=minor,
                total=number(read_text(host.door, *base, board, "mem_total")),
                used=number(read_text(host.door, *base, board, "mem_used")),
            )
            host.devices[device.key] = device
            for major in majors:
                host.nodes[(major, minor)] = device.key
        return FakeReading(host, majors)


def fake_host(root: Path) -> tuple[Host, Path]:
    """A host with one fake board (minor 0) and nothing else."""
    host = Host(root)
    devices = host.root / "proc" / "devices"
    listed = devices.read_text().replace("\n\nBlock", f"\n{FAKE_MAJOR} fakeaccel\n\nBlock")
    devices.write_text(listed)
    board = host.root / "sys" / "class" / "fakeaccel" / "0"
    board.mkdir(parents=True)
    (board / "name").write_text("Fake NPU 9000\n")
    (board / "mem_total").write_text(f"{32 * GIB}\n")
    (board / "mem_used").write_text(f"{10 * GIB}\n")
    return host, host.node("fakeaccel0", FAKE_MAJOR, 0)


def test_a_registered_vendor_gives_its_devices_and_their_holders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, board = fake_host(tmp_path / "host")
    info = fdinfo_new("fake-0", 1, "fakeaccel", {"local": (3 * GIB, 3 * GIB)})
    host.process(100, "llama-server", {30: board}, fdinfo={30: info})
    host.process(900, "trainer", {30: board})  # no engine's
    host.node("fakeaccel7", FAKE_MAJOR, 7)  # a board the driver does not list
    host.process(200, "vllm", {30: host.root / "dev" / "fakeaccel7"})
    monkeypatch.setenv("ENGINESPEC_NVML_LIBRARY", str(tmp_path / "absent" / "libnvidia-ml.so.1"))
    server, unlisted = engine(100, "llamacpp", port=8080), engine(200)
    root = str(host.root)

    # Unregistered, the package knows nothing of it.
    assert [(p.gpus, p.gpus_unknown) for p in with_gpus([server, unlisted], root=root)] == [((), None)] * 2
    assert gpu_ledger([server], root=root) == ()

    monkeypatch.setattr(reader_module, "VENDORS", (*reader_module.VENDORS, FakeVendor()))  # its one line

    found, unknown = with_gpus([server, unlisted], root=root)
    assert [(u.device, u.index, u.vendor, u.name, u.memory_bytes, u.pids, u.source) for u in found.gpus] == [
        ("fake:0", 0, "other", "Fake NPU 9000", 3 * GIB, (100,), "fdinfo")
    ]
    assert found.gpus_unknown is None
    assert (unknown.gpus, unknown.gpus_unknown) == ((), "uses the fake accelerator: device unknown")
    (device,) = gpu_ledger([server], root=root)
    assert (device.device, device.name, device.memory_total_bytes, device.memory_used_bytes) == (
        "fake:0",
        "Fake NPU 9000",
        32 * GIB,
        10 * GIB,
    )
    assert device.engines == {server.instance_id: 3 * GIB}
    assert [(p.pid, p.name) for p in device.other_processes] == [(900, "trainer")]
    assert device.unattributed_bytes is None  # the trainer's bytes are unknown
