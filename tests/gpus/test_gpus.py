"""GPU attribution on fixture hosts (no GPU needed): directories laid out like ``/`` with the
drivers' files, real character devices (mknod) for the processes' fd links, DRM fdinfo of both
kernel generations, KFD files, and the test NVML library (helpers/nvml_fake.c) in each driver
generation's API. Engine trees are given as the records a scan makes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import enginespec.gpus.reader as gpus_module
from enginespec import (
    Config,
    EngineProcess,
    GpuDevice,
    GpuProcess,
    GpuUse,
    InvalidInputError,
    Scanner,
    gpu_ledger,
    with_gpus,
)
from enginespec.scanning.watch import changed_fields
from helpers.fixturehost import FixtureHost, Stat
from helpers.gpuhost import GIB, MIB, Host, build_nvml, engine, fdinfo_new, fdinfo_old
from helpers.procs import Procs

UUID0 = "GPU-6a1f6e4c-2f0b-4c1e-9d1a-0d7a4f1b0c01"
UUID1 = "GPU-6a1f6e4c-2f0b-4c1e-9d1a-0d7a4f1b0c02"
BUS0, BUS1 = "0000:17:00.0", "0000:65:00.0"


@pytest.fixture(scope="session")
def nvml_libraries(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    directory = tmp_path_factory.mktemp("nvml")
    return {api: build_nvml(directory, api) for api in (1, 2, 3, 35)}


@pytest.fixture
def host(tmp_path: Path) -> Host:
    return Host(tmp_path / "host")


@pytest.fixture
def no_nvml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ENGINESPEC_NVML_LIBRARY", str(tmp_path / "absent" / "libnvidia-ml.so.1"))


def use_nvml(monkeypatch: pytest.MonkeyPatch, host: Host, library: Path) -> None:
    monkeypatch.setenv("ENGINESPEC_NVML_LIBRARY", str(library))
    monkeypatch.setenv("ENGINESPEC_TEST_NVML_HOST", str(host.nvml_file()))


@pytest.fixture
def listed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The pids whose open files the GPU reading lists, in order."""
    pids: list[int] = []
    original = gpus_module._open_devices

    def recording(root: str, pid: int) -> object:
        pids.append(pid)
        return original(root, pid)

    monkeypatch.setattr(gpus_module, "_open_devices", recording)
    return pids


def two_nvidia(host: Host) -> tuple[Path, Path]:
    gpu0 = host.nvidia(BUS0, 0, "NVIDIA H100 80GB HBM3", UUID0)
    gpu1 = host.nvidia(BUS1, 1, "NVIDIA H100 80GB HBM3", UUID1)
    host.nvml_gpu(UUID0, BUS0, "NVIDIA H100 80GB HBM3", 80 * GIB, 70 * GIB)
    host.nvml_gpu(UUID1, BUS1, "NVIDIA H100 80GB HBM3", 80 * GIB, 70 * GIB)
    return gpu0, gpu1


def cuda_fds(host: Host, *gpus: Path) -> dict[int, Path | str]:
    """What a CUDA process holds: nvidiactl, nvidia-uvm, and one fd per GPU it uses."""
    fds: dict[int, Path | str] = {10: host.root / "dev" / "nvidiactl", 11: host.root / "dev" / "nvidia-uvm"}
    fds.update({20 + i: gpu for i, gpu in enumerate(gpus)})
    return fds


def summary(process: EngineProcess) -> list[tuple[str, int | None, int | None, tuple[int, ...], str]]:
    return [(u.device, u.index, u.memory_bytes, u.pids, u.source) for u in process.gpus]


def by_key(devices: tuple[GpuDevice, ...]) -> dict[str, GpuDevice]:
    return {d.device: d for d in devices}


# -- NVIDIA -------------------------------------------------------------------------------------


@pytest.mark.parametrize("api", [3, 35, 2, 1])
def test_vllm_tensor_parallel_2_api_enginecore_and_two_workers(
    host: Host, nvml_libraries: dict[int, Path], monkeypatch: pytest.MonkeyPatch, api: int
) -> None:
    """vLLM TP2: the API server and EngineCore hold no GPU, each worker holds one; NVML's bytes
    (read through whichever process-list API the driver has) are summed per GPU over the tree."""
    gpu0, gpu1 = two_nvidia(host)
    host.process(100, "vllm", {})
    host.process(101, "VLLM::EngineCor", {10: host.root / "dev" / "nvidiactl"})
    host.process(102, "VLLM::Worker_TP", cuda_fds(host, gpu0))
    host.process(103, "VLLM::Worker_TP", cuda_fds(host, gpu1))
    host.nvml_process("0", 102, 38 * GIB)
    host.nvml_process("1", 103, 37 * GIB)
    host.nvml_process("1", 999, 1 * GIB)  # another process on GPU 1
    use_nvml(monkeypatch, host, nvml_libraries[api])
    server = engine(100, workers=(101, 102, 103))
    (found,) = with_gpus([server], root=str(host.root))
    assert summary(found) == [(UUID0, 0, 38 * GIB, (102,), "nvml"), (UUID1, 1, 37 * GIB, (103,), "nvml")]
    assert found.gpus_unknown is None
    assert found.gpus[0].pci_bus_id == BUS0
    assert found.gpus[0].name == "NVIDIA H100 80GB HBM3"
    devices = by_key(gpu_ledger([server], root=str(host.root)))
    assert devices[UUID0].engines == {server.instance_id: 38 * GIB}
    assert devices[UUID0].memory_total_bytes == 80 * GIB
    assert devices[UUID0].unattributed_bytes == 32 * GIB
    assert [(p.pid, p.memory_bytes) for p in devices[UUID1].other_processes] == [(999, 1 * GIB)]
    assert devices[UUID1].unattributed_bytes == 32 * GIB


@pytest.mark.parametrize("api", [3, 1])
def test_the_engine_tree_scanned_from_the_fixture_host_holds_its_gpus(
    host: Host, nvml_libraries: dict[int, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, api: int
) -> None:
    """The same vLLM TP2 tree, now found by ``Scanner(root=ROOT)`` in the fixture's own ``proc``
    (argv, stat, children) rather than given: the scan's records carry the GPUs."""
    gpu0, gpu1 = two_nvidia(host)
    table = FixtureHost(host.root)
    tree = [
        (100, 1, ["vllm", "serve", "/models/m", "--port", "8000"], {}),
        (101, 100, ["VLLM::EngineCore"], {10: host.root / "dev" / "nvidiactl"}),
        (102, 101, ["VLLM::Worker_TP0"], cuda_fds(host, gpu0)),
        (103, 101, ["VLLM::Worker_TP1"], cuda_fds(host, gpu1)),
    ]
    for pid, ppid, argv, fds in tree:
        host.process(pid, argv[0][:15], fds)
        table.create(pid, argv, Stat(ppid=ppid))
    table.set_children(100, 100, [101])
    table.set_children(101, 101, [102, 103])
    host.nvml_process("0", 102, 38 * GIB)
    host.nvml_process("1", 103, 37 * GIB)
    use_nvml(monkeypatch, host, nvml_libraries[api])
    config = Config(
        data_dir=tmp_path, docker_socket=tmp_path / "none.sock", podman_socket=tmp_path / "none.sock"
    )
    (found,) = Scanner(root=host.root, config=config).scan()
    assert (found.pid, found.engine, found.model, sorted(found.worker_pids)) == (
        100,
        "vllm",
        "/models/m",
        [101, 102, 103],
    )
    assert summary(found) == [(UUID0, 0, 38 * GIB, (102,), "nvml"), (UUID1, 1, 37 * GIB, (103,), "nvml")]
    devices = by_key(gpu_ledger([found], root=str(host.root)))
    assert devices[UUID1].engines == {found.instance_id: 37 * GIB}


def test_without_nvml_the_set_is_known_and_the_bytes_are_not(host: Host, no_nvml: None) -> None:
    gpu0, gpu1 = two_nvidia(host)
    host.process(100, "vllm", {})
    host.process(102, "VLLM::Worker_TP", cuda_fds(host, gpu0))
    host.process(103, "VLLM::Worker_TP", cuda_fds(host, gpu1))
    server = engine(100, workers=(102, 103))
    (found,) = with_gpus([server], root=str(host.root))
    assert summary(found) == [(UUID0, 0, None, (102,), "fd"), (UUID1, 1, None, (103,), "fd")]
    devices = by_key(gpu_ledger([server], root=str(host.root)))
    assert devices[UUID0].engines == {server.instance_id: None}
    assert devices[UUID0].memory_total_bytes is None
    assert devices[UUID0].unattributed_bytes is None
    assert "NVML not loaded" in (devices[UUID0].problem or "")


def test_cuda_visible_devices_is_never_the_answer(host: Host, no_nvml: None) -> None:
    """The worker's environment says GPU 1; its fds say GPU 0 (CUDA's order is not NVML's)."""
    gpu0, _gpu1 = two_nvidia(host)
    directory = host.process(102, "VLLM::Worker_TP", cuda_fds(host, gpu0))
    (directory / "environ").write_bytes(b"CUDA_VISIBLE_DEVICES=1\0")
    (found,) = with_gpus([engine(102)], root=str(host.root))
    assert [u.device for u in found.gpus] == [UUID0]


def test_sglang_schedulers_each_on_a_gpu(
    host: Host, nvml_libraries: dict[int, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    gpu0, gpu1 = two_nvidia(host)
    host.process(200, "python3", {})
    host.process(201, "sglang::schedul", cuda_fds(host, gpu0))
    host.process(202, "sglang::schedul", cuda_fds(host, gpu1))
    host.process(203, "sglang::detoken", {})
    host.nvml_process("0", 201, 60 * GIB)
    host.nvml_process("1", 202, 61 * GIB)
    use_nvml(monkeypatch, host, nvml_libraries[3])
    (found,) = with_gpus([engine(200, "sglang", workers=(201, 202, 203), port=30000)], root=str(host.root))
    assert [(u.index, u.memory_bytes, u.pids) for u in found.gpus] == [
        (0, 60 * GIB, (201,)),
        (1, 61 * GIB, (202,)),
    ]


def test_an_ollama_runner_over_two_gpus_is_its_own_engine(
    host: Host, nvml_libraries: dict[int, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ollama's server only probes the GPUs (nvidiactl); its llama runner holds both."""
    gpu0, gpu1 = two_nvidia(host)
    host.process(300, "ollama", {10: host.root / "dev" / "nvidiactl"})
    host.process(301, "ollama", cuda_fds(host, gpu0, gpu1))
    host.nvml_process("0", 301, 20 * GIB)
    host.nvml_process("1", 301, 18 * GIB)
    use_nvml(monkeypatch, host, nvml_libraries[3])
    supervisor, runner = engine(300, "ollama", port=11434), engine(301, "ollama", role="runner", port=40123)
    found = with_gpus([supervisor, runner], root=str(host.root))
    assert found[0].gpus == ()
    assert [(u.index, u.memory_bytes) for u in found[1].gpus] == [(0, 20 * GIB), (1, 18 * GIB)]
    devices = by_key(gpu_ledger([supervisor, runner], root=str(host.root)))
    assert devices[UUID1].engines == {runner.instance_id: 18 * GIB}


def test_llama_server_split_by_layer_on_an_old_driver(
    host: Host, nvml_libraries: dict[int, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One process over two GPUs (``--split-mode layer``), a driver with only the v1 lists; a
    process in both the compute and graphics lists is counted once."""
    gpu0, gpu1 = two_nvidia(host)
    host.process(400, "llama-server", cuda_fds(host, gpu0, gpu1))
    host.nvml_process("0", 400, 9 * GIB)
    host.nvml_process("0", 400, 9 * GIB, kind="graphics")
    host.nvml_process("1", 400, 7 * GIB)
    use_nvml(monkeypatch, host, nvml_libraries[1])
    (found,) = with_gpus([engine(400, "llamacpp", port=8080)], root=str(host.root))
    assert [(u.index, u.memory_bytes, u.pids) for u in found.gpus] == [
        (0, 9 * GIB, (400,)),
        (1, 7 * GIB, (400,)),
    ]


def test_an_engine_in_a_container_is_matched_by_its_host_pid(
    host: Host, nvml_libraries: dict[int, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside its container the server is pid 1 (NSpid); NVML and the scan both give host pids.
    Its fd links name its own device node, which is the same device (st_rdev)."""
    gpu0, _ = two_nvidia(host)
    inside = host.node("container-1/nvidia0", 195, 0)  # another node of the same device
    host.process(4242, "python3", {20: inside}, nspid=(1,))
    host.nvml_process("0", 4242, 15 * GIB)
    host.nvml_process("0", 1, 3 * GIB)  # the host's pid 1 is not the container's
    use_nvml(monkeypatch, host, nvml_libraries[3])
    (found,) = with_gpus([engine(4242)], root=str(host.root))
    assert [(u.device, u.memory_bytes, u.pids) for u in found.gpus] == [(UUID0, 15 * GIB, (4242,))]
    assert gpu0.exists()


def test_an_orphaned_enginecore_holding_a_gpu_is_reclaimable(
    host: Host, nvml_libraries: dict[int, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    gpu0, _ = two_nvidia(host)
    host.process(500, "VLLM::EngineCor", cuda_fds(host, gpu0))
    host.nvml_process("0", 500, 71 * GIB)
    use_nvml(monkeypatch, host, nvml_libraries[3])
    orphan = engine(500, role="orphan")
    devices = by_key(gpu_ledger([orphan], root=str(host.root)))
    assert devices[UUID0].engines == {orphan.instance_id: 71 * GIB}
    assert devices[UUID0].reclaimable == (orphan.instance_id,)
    assert devices[UUID1].engines == {}
    assert devices[UUID1].reclaimable == ()


def test_a_process_that_is_no_engine_is_listed_with_its_name(
    host: Host, nvml_libraries: dict[int, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A training job on GPU 0: NVML lists it, its name is its comm; a scan never reads it."""
    gpu0, _ = two_nvidia(host)
    host.process(600, "vllm", cuda_fds(host, gpu0))
    host.process(700, "train.py\x1b[31m", cuda_fds(host, gpu0))
    host.process(701, "nvidia-persist", {10: host.root / "dev" / "nvidia0"})  # no context
    host.nvml_process("0", 600, 30 * GIB)
    host.nvml_process("0", 700, 25 * GIB)
    use_nvml(monkeypatch, host, nvml_libraries[3])
    server = engine(600)
    devices = by_key(gpu_ledger([server], root=str(host.root)))
    assert devices[UUID0].other_processes == (
        GpuProcess(pid=700, name="train.py\x1b[31m", memory_bytes=25 * GIB),
    )
    assert devices[UUID0].unattributed_bytes == 15 * GIB


def test_other_holders_without_nvml_are_found_from_their_open_files(host: Host, no_nvml: None) -> None:
    gpu0, _ = two_nvidia(host)
    host.process(600, "vllm", cuda_fds(host, gpu0))
    host.process(700, "python3", cuda_fds(host, gpu0))
    host.process(701, "bash", {})
    server = engine(600)
    devices = by_key(gpu_ledger([server], root=str(host.root)))
    assert [(p.pid, p.name, p.memory_bytes) for p in devices[UUID0].other_processes] == [
        (700, "python3", None)
    ]
    quick = by_key(gpu_ledger([server], root=str(host.root), all_processes=False))
    assert quick[UUID0].other_processes == ()


def test_mig_instances_are_devices_of_their_own(
    host: Host, nvml_libraries: dict[int, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """GPU 0 in MIG mode with two instances, one engine on each; both hold /dev/nvidia0, NVML
    tells the instances apart; the GPU sums them."""
    gpu0, _ = two_nvidia(host)
    mig1, mig2 = "MIG-11111111-2222-3333-4444-555555555555", "MIG-66666666-7777-8888-9999-000000000000"
    host.nvml_mig(0, 1, mig1, "NVIDIA H100 80GB HBM3 MIG 3g.40gb", 40 * GIB, 30 * GIB)
    host.nvml_mig(0, 2, mig2, "NVIDIA H100 80GB HBM3 MIG 3g.40gb", 40 * GIB, 20 * GIB)
    host.nvml_process("0/1", 800, 29 * GIB)
    host.nvml_process("0/2", 801, 19 * GIB)
    host.process(800, "llama-server", cuda_fds(host, gpu0))
    host.process(801, "vllm", cuda_fds(host, gpu0))
    use_nvml(monkeypatch, host, nvml_libraries[35])
    first, second = engine(800, "llamacpp", port=8080), engine(801)
    found = with_gpus([first, second], root=str(host.root))
    assert [(u.device, u.index, u.mig_index, u.memory_bytes) for u in found[0].gpus] == [
        (mig1, 0, 1, 29 * GIB)
    ]
    assert [(u.device, u.mig_index, u.pci_bus_id) for u in found[1].gpus] == [(mig2, 2, BUS0)]
    devices = by_key(gpu_ledger([first, second], root=str(host.root)))
    assert devices[mig1].parent == UUID0
    assert devices[mig1].unattributed_bytes == 1 * GIB
    assert devices[UUID0].engines == {first.instance_id: 29 * GIB, second.instance_id: 19 * GIB}


def test_bytes_nvml_cannot_give_are_none(
    host: Host, nvml_libraries: dict[int, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    gpu0, _ = two_nvidia(host)
    host.process(100, "vllm", {})
    host.process(102, "VLLM::Worker_TP", cuda_fds(host, gpu0))
    host.process(103, "VLLM::Worker_TP", cuda_fds(host, gpu0))
    host.nvml_process("0", 102, 5 * GIB)
    host.nvml_process("0", 103, None)
    use_nvml(monkeypatch, host, nvml_libraries[2])
    (found,) = with_gpus([engine(100, workers=(102, 103))], root=str(host.root))
    assert summary(found) == [(UUID0, 0, None, (102, 103), "nvml")]


def test_a_gpu_whose_processes_nvml_cannot_list_falls_back_to_the_fds(
    host: Host, nvml_libraries: dict[int, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """GPU 1's lists fail (no permission): the worker there is known from its fds, bytes unknown;
    GPU 0 still has NVML's bytes."""
    gpu0, gpu1 = two_nvidia(host)
    host.process(100, "vllm", {})
    host.process(102, "VLLM::Worker_TP", cuda_fds(host, gpu0))
    host.process(103, "VLLM::Worker_TP", cuda_fds(host, gpu1))
    host.nvml_process("0", 102, 38 * GIB)
    host.nvml_process("1", 103, 37 * GIB)
    host.nvml_fail("1", 4)
    use_nvml(monkeypatch, host, nvml_libraries[3])
    server = engine(100, workers=(102, 103))
    (found,) = with_gpus([server], root=str(host.root))
    assert summary(found) == [(UUID0, 0, 38 * GIB, (102,), "nvml"), (UUID1, 1, None, (103,), "fd")]
    devices = by_key(gpu_ledger([found], root=str(host.root)))
    assert devices[UUID1].memory_used_bytes == 70 * GIB
    assert devices[UUID1].unattributed_bytes is None
    assert devices[UUID1].problem == "NVML: nvmlDeviceGetComputeRunningProcesses: no permission"
    assert devices[UUID0].problem is None


def test_nvml_whose_driver_is_not_loaded_is_no_nvml(
    host: Host, nvml_libraries: dict[int, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    gpu0, _ = two_nvidia(host)
    host.process(102, "vllm", cuda_fds(host, gpu0))
    host.nvml_process("0", 102, 5 * GIB)
    library = tmp_path / "libnvidia-ml-unloaded.so"
    shutil.copy(nvml_libraries[3], library)  # its own file: NVML is loaded once per file
    use_nvml(monkeypatch, host, library)
    monkeypatch.setenv("ENGINESPEC_TEST_NVML_INIT", "9")
    (found,) = with_gpus([engine(102)], root=str(host.root))
    assert summary(found) == [(UUID0, 0, None, (102,), "fd")]
    (device, _other) = gpu_ledger([found], root=str(host.root))
    assert device.problem is not None
    assert "driver not loaded" in device.problem


def test_control_devices_are_not_gpus_and_uvm_alone_is_cuda_on_an_unknown_device(
    host: Host, no_nvml: None
) -> None:
    two_nvidia(host)
    host.process(100, "vllm", {10: host.root / "dev" / "nvidiactl", 11: host.root / "dev" / "nvidia-modeset"})
    host.process(101, "vllm", {11: host.root / "dev" / "nvidia-uvm"})
    host.node("nvidia7", 195, 7)  # a minor the driver does not list
    host.process(102, "vllm", {12: host.root / "dev" / "nvidia7"})
    control, uvm, unlisted = with_gpus([engine(100), engine(101), engine(102)], root=str(host.root))
    assert (control.gpus, control.gpus_unknown) == ((), None)
    assert uvm.gpus == ()
    assert uvm.gpus_unknown is not None
    assert "uses CUDA" in uvm.gpus_unknown
    assert unlisted.gpus == ()
    assert unlisted.gpus_unknown is not None


def test_only_links_into_dev_are_followed(host: Host, no_nvml: None) -> None:
    """A device node outside /dev is not followed (nor a file on a mount that could hang a stat);
    /dev/shm files are never device nodes."""
    two_nvidia(host)
    elsewhere = host.root / "mnt" / "nvidia0"
    elsewhere.parent.mkdir()
    os.mknod(elsewhere, 0o20666, os.makedev(195, 0))
    shm = host.root / "dev" / "shm"
    shm.mkdir()
    os.mknod(shm / "nvidia1", 0o20666, os.makedev(195, 1))
    host.process(100, "vllm", {20: elsewhere, 21: shm / "nvidia1"})
    (found,) = with_gpus([engine(100)], root=str(host.root))
    assert (found.gpus, found.gpus_unknown) == ((), None)


def test_a_gpu_without_a_uuid_is_keyed_by_its_bus(host: Host, no_nvml: None) -> None:
    gpu = host.nvidia("0000:b3:00.0", 0, "Tesla T4", None)
    host.process(100, "vllm", cuda_fds(host, gpu))
    (found,) = with_gpus([engine(100)], root=str(host.root))
    assert summary(found) == [("pci:0000:b3:00.0", 0, None, (100,), "fd")]


def test_an_nvidia_drm_node_is_the_same_gpu(host: Host, no_nvml: None) -> None:
    """nvidia-drm's render node leads to the GPU the driver's procfs lists: the same key."""
    host.nvidia(BUS0, 0, "NVIDIA L4", UUID0)
    render = host.drm(BUS0, "0x10de", "nvidia", 1, 129)
    host.process(100, "llama-server", {30: render})
    (found,) = with_gpus([engine(100, "llamacpp", port=8080)], root=str(host.root))
    assert summary(found) == [(UUID0, 0, None, (100,), "fd")]


# -- AMD and Intel ------------------------------------------------------------------------------

AMD0 = "0000:c3:00.0"


def amd_gpu(host: Host) -> Path:
    host.kfd_node(0, 0, 0)
    host.kfd_node(1, 51234, 128)
    return host.drm(AMD0, "0x1002", "amdgpu", 0, 128, product="AMD Instinct MI210", vram=(64 * GIB, 40 * GIB))


def test_rocm_compute_from_kfd_with_gtt_spill_from_old_fdinfo(host: Host, no_nvml: None) -> None:
    """A ROCm vLLM worker: VRAM from KFD's per-process file; the render node's fdinfo (before
    kernel 6.3) shows GTT use and evicted VRAM: spilled."""
    render = amd_gpu(host)
    kfd = host.root / "dev" / "kfd"
    info = fdinfo_old(AMD0, 7, {"vram": 2 * GIB, "gtt": 3 * GIB, "cpu": 0}, evicted=1 * GIB)
    host.process(100, "vllm", {})
    host.process(101, "VLLM::Worker_TP", {9: kfd, 30: render}, fdinfo={30: info})
    host.kfd_vram(101, 51234, 36 * GIB)
    (found,) = with_gpus([engine(100, workers=(101,))], root=str(host.root))
    (use,) = found.gpus
    assert (use.device, use.vendor, use.index, use.name) == (f"pci:{AMD0}", "amd", 0, "AMD Instinct MI210")
    assert (use.memory_bytes, use.spilled_bytes, use.source, use.pids) == (36 * GIB, 4 * GIB, "kfd", (101,))
    (device,) = gpu_ledger([found], root=str(host.root))
    assert (device.memory_total_bytes, device.memory_used_bytes) == (64 * GIB, 40 * GIB)
    assert device.unattributed_bytes == 4 * GIB


def test_amd_vulkan_engine_from_new_fdinfo_two_fds_of_one_client(host: Host, no_nvml: None) -> None:
    """llama-server's Vulkan backend on AMD (no KFD): bytes from fdinfo of kernels 6.3+; two
    fds of one DRM client (dup) and the same client inherited by a child count once."""
    render = amd_gpu(host)
    info = fdinfo_new(AMD0, 12, "amdgpu", {"vram": (9 * GIB, 8 * GIB), "gtt": (512 * MIB, 256 * MIB)})
    host.process(100, "llama-server", {30: render, 31: render}, fdinfo={30: info, 31: info})
    host.process(101, "llama-server", {30: render}, fdinfo={30: info})
    (found,) = with_gpus([engine(100, "llamacpp", workers=(101,), port=8080)], root=str(host.root))
    (use,) = found.gpus
    assert (use.memory_bytes, use.spilled_bytes, use.source, use.pids) == (
        8 * GIB,
        256 * MIB,
        "fdinfo",
        (100, 101),
    )


def test_intel_with_shared_buffers_and_two_clients(host: Host, no_nvml: None) -> None:
    """An Intel discrete GPU (xe): two DRM clients of one tree are summed, each once; a buffer
    shared with the desktop is in each client's figures, as the kernel's document says."""
    render = host.drm("0000:03:00.0", "0x8086", "xe", 0, 128)
    first = fdinfo_new("0000:03:00.0", 3, "xe", {"vram0": (4 * GIB, 4 * GIB), "system": (GIB, GIB)},
                       drm_shared_vram0="65536 KiB")  # fmt: skip
    second = fdinfo_new("0000:03:00.0", 4, "xe", {"vram0": (2 * GIB, 2 * GIB)})
    desktop = fdinfo_new(
        "0000:03:00.0", 5, "xe", {"vram0": (128 * MIB, 128 * MIB)}, drm_shared_vram0="65536 KiB"
    )
    host.process(100, "llama-server", {30: render, 31: render}, fdinfo={30: first, 31: second})
    host.process(900, "gnome-shell", {30: render}, fdinfo={30: desktop})
    server = engine(100, "llamacpp", port=8080)
    (found,) = with_gpus([server], root=str(host.root))
    (use,) = found.gpus
    assert (use.vendor, use.index, use.memory_bytes, use.spilled_bytes) == ("intel", 0, 6 * GIB, GIB)
    (device,) = gpu_ledger([server], root=str(host.root))
    assert [(p.pid, p.name, p.memory_bytes) for p in device.other_processes] == [
        (900, "gnome-shell", 128 * MIB)
    ]
    assert device.memory_used_bytes is None
    assert device.unattributed_bytes is None


def test_an_integrated_gpu_counts_system_memory_as_its_own(host: Host, no_nvml: None) -> None:
    render = host.drm("0000:00:02.0", "0x8086", "i915", 0, 128)
    info = fdinfo_new("0000:00:02.0", 9, "i915", {"system0": (3 * GIB, 2 * GIB), "stolen-system0": (0, 0)})
    host.process(100, "llama-server", {30: render}, fdinfo={30: info})
    (found,) = with_gpus([engine(100, "llamacpp", port=8080)], root=str(host.root))
    assert [(u.memory_bytes, u.spilled_bytes) for u in found.gpus] == [(2 * GIB, None)]


def test_drm_without_usage_stats_gives_the_device_not_the_bytes(host: Host, no_nvml: None) -> None:
    render = host.drm("0000:04:00.0", "0x1af4", "virtio-pci", 0, 128)
    host.process(100, "llama-server", {30: render})
    (found,) = with_gpus([engine(100, "llamacpp", port=8080)], root=str(host.root))
    assert [(u.vendor, u.memory_bytes, u.source) for u in found.gpus] == [("other", None, "fd")]


def test_kfd_alone_is_rocm_on_an_unknown_device(host: Host, no_nvml: None) -> None:
    amd_gpu(host)
    host.process(100, "vllm", {9: host.root / "dev" / "kfd"})
    (found,) = with_gpus([engine(100)], root=str(host.root))
    assert found.gpus == ()
    assert found.gpus_unknown is not None
    assert "ROCm" in found.gpus_unknown


# -- unreadable, unchanged ----------------------------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to read as another user")
def test_fds_another_user_cannot_read_make_the_set_unknown_with_the_reason(nobody_dir: Path) -> None:
    """Read as nobody: the server's fd directory is root's (0700), its worker's is readable."""
    host = Host(nobody_dir / "host")
    gpu0 = host.nvidia(BUS0, 0, "NVIDIA A100-SXM4-80GB", UUID0)
    (host.process(100, "vllm", cuda_fds(host, gpu0)) / "fd").chmod(0o700)
    host.process(101, "VLLM::Worker_TP", cuda_fds(host, gpu0))
    for path in (nobody_dir, *nobody_dir.rglob("*")):
        if not path.is_symlink() and not path.is_char_device():
            path.chmod(path.stat().st_mode | 0o555)
    (host.root / "proc" / "100" / "fd").chmod(0o700)
    # The interpreter may live where nobody cannot read (under /root): everything is imported
    # first, and the user is changed in-process.
    code = (
        "import json, os, sys; sys.path.insert(0, sys.argv[2]); from helpers.gpuhost import engine;"
        "from enginespec import with_gpus;"
        "os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534);"
        "(p,) = with_gpus([engine(100, workers=(101,))], root=sys.argv[1], nvml=False);"
        "print(json.dumps([[u.device for u in p.gpus], p.gpus_unknown]))"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code, str(host.root), str(Path(__file__).parents[1])],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    devices, unknown = json.loads(ran.stdout)
    assert devices == [UUID0]  # what the worker shows
    assert unknown == "cannot read /proc/100/fd: permission denied"


def test_an_unchanged_tree_gives_the_same_record_and_a_change_names_gpus(
    host: Host, nvml_libraries: dict[int, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a watch relies on: the same object while nothing changed; ``gpus`` in the fields of
    a change."""
    from enginespec.gpus.reader import GpuReader
    from enginespec.scanning.scanner import trees, with_held

    gpu0, _ = two_nvidia(host)
    host.process(102, "vllm", cuda_fds(host, gpu0))
    host.nvml_process("0", 102, 5 * GIB)
    use_nvml(monkeypatch, host, nvml_libraries[3])
    reader = GpuReader(str(host.root))
    processes = [engine(102)]
    first, views = with_held(processes, reader.read(trees(processes)), {})
    again, views = with_held(processes, reader.read(trees(processes)), views)
    assert again[0] is first[0]
    before = first[0]
    after = before.model_copy(update={"gpus": (before.gpus[0].model_copy(update={"memory_bytes": 6 * GIB}),)})
    assert changed_fields(before, after) == ("gpus",)


@pytest.mark.parametrize("nvml", [True, False])
def test_an_nvidia_holders_files_are_listed_again_less_often_while_nvml_answers(
    nvml: bool,
    host: Host,
    monkeypatch: pytest.MonkeyPatch,
    nvml_libraries: dict[int, Path],
    tmp_path: Path,
    listed: list[int],
) -> None:
    """A pid holding NVIDIA's devices has its open files listed again every 30 s, or every 120 s
    while NVML answers (its process lists say which GPUs the tree uses); memory every 2 s."""
    gpu0, _ = two_nvidia(host)
    host.process(102, "vllm", cuda_fds(host, gpu0))
    host.nvml_process("0", 102, 5 * GIB)
    if nvml:
        use_nvml(monkeypatch, host, nvml_libraries[3])
    else:
        monkeypatch.setenv("ENGINESPEC_NVML_LIBRARY", str(tmp_path / "absent" / "libnvidia-ml.so.1"))
    clock = [1000.0]
    monkeypatch.setattr(gpus_module, "time", type("Clock", (), {"monotonic": staticmethod(lambda: clock[0])}))
    reader = gpus_module.GpuReader(str(host.root))
    for seconds in (0, 31, 61, 91, 121):
        clock[0] = 1000.0 + seconds
        [(uses, _problem)] = reader.read([(102,)])
        assert [use.device for use in uses] == [UUID0]
        assert [use.memory_bytes for use in uses] == ([5 * GIB] if nvml else [None])
    assert len(listed) == (2 if nvml else 5), listed


def test_a_ledger_of_a_fixture_host_needs_its_engines(host: Host) -> None:
    with pytest.raises(InvalidInputError, match="processes"):
        gpu_ledger(root=str(host.root))


def test_models_are_frozen_and_typed() -> None:
    use = GpuUse(device=UUID0, index=0, vendor="nvidia", name=None, pci_bus_id=None, memory_bytes=None,
                 pids=(1,), source="fd")  # fmt: skip
    with pytest.raises(ValueError, match="frozen"):
        use.memory_bytes = 1  # type: ignore[misc]
    with pytest.raises(ValueError, match="vendor"):
        GpuUse.model_validate({**use.model_dump(), "vendor": "matrox"})


# -- the live host ------------------------------------------------------------------------------


def test_a_scan_reads_only_engine_trees_and_fills_no_gpus_here(procs: Procs, listed: list[int]) -> None:
    """Real processes on this host (which has no GPU): an engine's record says it holds none.
    Its open files were listed by the scan's backend, with its sockets (the read set's
    ``devices``): the GPU reading lists none of its own, and nothing of another process."""
    with open("/dev/zero", "rb") as zero:  # a character device the engine holds, of no GPU
        server = procs.start(["llama-server", "-m", "/m/gpus.gguf", "--port", "8131"], (zero.fileno(),))
    bystander = procs.start(["python3", "train.py", "--gpus", "0"])
    scanner = Scanner()
    found = {p.pid: p for p in scanner.scan()}
    mine = found[server.pid]
    assert (mine.gpus, mine.gpus_unknown) == ((), None)
    assert bystander.pid not in found
    assert listed == []
    assert scanner.scan()
    assert listed == []
    # Without the scan's listing, the reader lists the trees it is given, and those only.
    assert gpus_module.GpuReader("/").read([(server.pid,)]) == [((), None)]
    assert listed == [server.pid]


#: Imports everything, becomes nobody for good, then scans and prints the engine's GPU facts.
SCAN_AS_NOBODY = """
import ctypes, json, os, sys
import enginespec
enginespec.Scanner(listen_ports=False).scan()
os.setgroups([])
os.setresgid(65534, 65534, 65534)
os.setresuid(65534, 65534, 65534)
ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: its own /proc files are its own
found = {p.pid: p for p in enginespec.Scanner(listen_ports=False).scan()}
p = found.get(int(sys.argv[1]))
print(json.dumps(None if p is None else [list(p.gpus), p.gpus_unknown]))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a scan as another user")
def test_a_scan_by_another_user_says_why_the_gpus_are_unknown(procs: Procs) -> None:
    server = procs.start(["llama-server", "-m", "/m/root.gguf", "--port", "8132"])
    ran = subprocess.run(
        [sys.executable, "-c", SCAN_AS_NOBODY, str(server.pid)],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == [[], f"cannot read /proc/{server.pid}/fd: permission denied"]


# -- surfaces -----------------------------------------------------------------------------------


@pytest.fixture
def tp2_with_orphan(
    host: Host, nvml_libraries: dict[int, Path], monkeypatch: pytest.MonkeyPatch
) -> list[EngineProcess]:
    """vLLM TP2 on GPUs 0 and 1, an orphaned EngineCore on GPU 1, a job that is no engine."""
    gpu0, gpu1 = two_nvidia(host)
    host.process(100, "vllm", {})
    host.process(102, "VLLM::Worker_TP", cuda_fds(host, gpu0))
    host.process(103, "VLLM::Worker_TP", cuda_fds(host, gpu1))
    host.process(500, "VLLM::EngineCor", cuda_fds(host, gpu1))
    host.process(999, "train\x1b[2J", cuda_fds(host, gpu0))
    host.nvml_process("0", 102, 38 * GIB + 200 * MIB)
    host.nvml_process("1", 103, 38 * GIB)
    host.nvml_process("1", 500, 20 * GIB)
    host.nvml_process("0", 999, 1 * GIB)
    use_nvml(monkeypatch, host, nvml_libraries[3])
    records = [
        engine(100, workers=(102, 103)),
        engine(500, role="orphan", port=8001),
        engine(600, "llamacpp", port=8080),
    ]
    return with_gpus(records, root=str(host.root))


def test_ps_shows_the_gpus_and_bytes_only_when_an_engine_holds_one(
    tp2_with_orphan: list[EngineProcess],
) -> None:
    from enginespec.cli.pstable import Shown
    from enginespec.cli.pstable import table_lines as _table_lines

    header, *rows = _table_lines([Shown(p) for p in tp2_with_orphan], False, None)
    assert header.split()[-2:] == ["GPU", "AGE"]  # AGE is always the last without health
    column = header.index("GPU")
    assert rows[0][column:].startswith("0,1 76.2G")
    assert rows[1][column:].startswith("1 20.0G")
    assert rows[2][column:].split()[0] == "-"
    alone, *_ = _table_lines([Shown(tp2_with_orphan[2])], False, None)
    assert "GPU" not in alone.split()


def test_the_ledger_as_text_and_json(tp2_with_orphan: list[EngineProcess], host: Host) -> None:
    from enginespec.cli.inspecting import gpu_lines

    devices = gpu_ledger(tp2_with_orphan, root=str(host.root))
    server, orphan, _ = tp2_with_orphan
    hidden = engine(700, port=8002).model_copy(
        update={"gpus_unknown": "cannot read /proc/700/fd: permission denied"}
    )
    text = gpu_lines(devices, [*tp2_with_orphan, hidden])
    assert (
        text[-1] == f"{hidden.instance_id} pid 700: GPUs unknown: cannot read /proc/700/fd: permission denied"
    )
    assert text[0] == f"GPU 0  NVIDIA H100 80GB HBM3  {UUID0} {BUS0}  70.0G / 80.0G used"
    assert f"    38.2G  {server.instance_id} pid 100 /models/m" in text
    assert "     1.0G  pid 999 train\\x1b[2J (no engine)" in text
    assert f"    20.0G  {orphan.instance_id} pid 500 /models/m  orphan: reclaimable" in text
    assert "    30.8G  unattributed" in text
    again = [
        GpuDevice.model_validate(d)
        for d in json.loads(json.dumps([d.model_dump(mode="json") for d in devices]))
    ]
    assert tuple(again) == devices


def test_the_exporter_series(tp2_with_orphan: list[EngineProcess], host: Host) -> None:
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families
    from prometheus_client.registry import CollectorRegistry

    from enginespec.fleet.exporter import EngineCollector, Snapshot

    collector = EngineCollector()
    devices = gpu_ledger(tp2_with_orphan, root=str(host.root), all_processes=False, reread=False)
    collector.snapshot = Snapshot(processes=tp2_with_orphan, gpus=devices)
    registry = CollectorRegistry()
    registry.register(collector)
    series: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            series.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    server, orphan, _ = tp2_with_orphan

    def held(process: EngineProcess, gpu: str) -> tuple[tuple[str, str], ...]:
        # the identifying labels of every engine series, and the GPU (sorted, as the keys are)
        labels = {
            "engine_id": process.instance_id,
            "engine": process.engine,
            "model": "/models/m",
            "gpu": gpu,
        }
        return tuple(sorted(labels.items()))

    assert series["enginespec_engine_gpu_memory_bytes"] == {
        held(server, "0"): 38 * GIB + 200 * MIB,
        held(server, "1"): 38 * GIB,
        held(orphan, "1"): 20 * GIB,
    }
    assert series["enginespec_gpu_memory_total_bytes"] == {
        (("gpu", "0"),): 80 * GIB,
        (("gpu", "1"),): 80 * GIB,
    }
    assert series["enginespec_gpu_memory_used_bytes"] == {
        (("gpu", "0"),): 70 * GIB,
        (("gpu", "1"),): 70 * GIB,
    }
    assert series["enginespec_gpu_memory_unattributed_bytes"] == {
        (("gpu", "0"),): 70 * GIB - 39 * GIB - 200 * MIB,
        (("gpu", "1"),): 12 * GIB,
    }


def test_the_gpus_command_on_this_host(tmp_path: Path) -> None:
    """This host has no GPU: said so, and an empty JSON list."""
    text = subprocess.run([sys.executable, "-m", "enginespec.cli", "gpus"], capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    listed = subprocess.run([sys.executable, "-m", "enginespec.cli", "gpus", "--json"], capture_output=True,
                            text=True, timeout=120, check=True)  # fmt: skip
    if json.loads(listed.stdout) == []:
        # said on stderr, as `ps` says it finds nothing: stdout holds only what was found
        assert text.stderr.splitlines() == ["no GPUs found on this host"]
        assert all("GPUs unknown" in line for line in text.stdout.splitlines())  # another session's engine
    else:  # a host with a GPU: one GPU line per device
        assert text.stdout.startswith("GPU ")
