"""AMD's GPUs as ROCm sees them, from its KFD: the topology's GPU nodes, numbered as ROCm numbers
them and joined to their DRM render nodes, the compute memory each process holds on each
(``/sys/class/kfd/kfd/proc/<pid>/vram_<gpu_id>``), and ``/dev/kfd``, which says a process uses
ROCm."""

from __future__ import annotations

from collections.abc import Mapping

from enginespec._host.root import HostRoot
from enginespec.gpus.drm import DRM_MAJOR
from enginespec.gpus.vendor import HostGpus, TreeGpus, VendorReading, number, read_text

_UNKNOWN = "uses ROCm (holds /dev/kfd): device unknown"


class AmdReading(VendorReading):
    def __init__(self, root: HostRoot, kfd: frozenset[int], gpu_ids: Mapping[int, str]) -> None:
        self.root = root
        self.majors = kfd
        #: KFD's ``gpu_id`` of each GPU -> the device's key
        self.gpu_ids = gpu_ids

    def opened(self, pid: int, fd: int, major: int, minor: int, tree: TreeGpus) -> None:
        tree.unknown.setdefault("amd", _UNKNOWN)
        directory = ("sys", "class", "kfd", "kfd", "proc", str(pid))
        for name in self.root.kernel_directory(*directory):
            gpu_id = number(name[5:]) if name.startswith("vram_") else None
            key = self.gpu_ids.get(gpu_id) if gpu_id is not None else None
            size = number(read_text(self.root, *directory, name)) if key is not None else None
            if key is not None and size is not None:
                tree.holding(key).account(pid, size, "kfd")


def read(host: HostGpus, libraries: bool) -> AmdReading:
    """ROCm's GPUs (KFD topology nodes with a ``gpu_id``), numbered as ROCm numbers them."""
    base = ("sys", "class", "kfd", "kfd", "topology", "nodes")
    gpu_ids = {}
    index = 0
    for node in sorted(host.door.kernel_directory(*base), key=lambda name: number(name) or 0):
        gpu_id = number(read_text(host.door, *base, node, "gpu_id"))
        if not gpu_id:
            continue  # a CPU node
        text = read_text(host.door, *base, node, "properties") or ""
        properties = dict(
            line.split(None, 1) for line in text.splitlines()
            if len(line.split(None, 1)) == 2
        )  # fmt: skip
        key = host.nodes.get((DRM_MAJOR, number(properties.get("drm_render_minor")) or -1))
        if key is not None:
            gpu_ids[gpu_id] = key
            host.devices[key].index = index
        index += 1
    return AmdReading(host.door, frozenset(host.majors.get("kfd", ())), gpu_ids)
