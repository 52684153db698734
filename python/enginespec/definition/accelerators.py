"""Which accelerator, in one vocabulary: what a build computes on (``cuda``, ``rocm``, ``cpu``), the
subsets a record accepts, and who makes the GPUs each runs on. An install's choice, a recipe's
device variables, a package's requirement, the host's hardware and the GPU reading all name
accelerators with these words; here, below them all, because ``definition/`` (a package's
requirement) may import nothing of the host."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal

#: The GPU accelerators: NVIDIA's CUDA, AMD's ROCm (a recipe's ``accelerator``: which of
#: ``CUDA_VISIBLE_DEVICES`` and ``HIP_VISIBLE_DEVICES`` a launch sets).
GpuAccelerator = Literal["cuda", "rocm"]
#: What a build computes on: a GPU accelerator or the CPU.
Accelerator = Literal[GpuAccelerator, "cpu"]
#: What an install is asked to build for: an accelerator, or ``auto`` (the host's).
AcceleratorChoice = Literal["auto", Accelerator]
#: What a published build can require of the host (``Package.accelerator``): only CUDA-only
#: builds are published.
RequiredAccelerator = Literal["cuda"]
#: Who made a GPU, by its PCI vendor (``other``: any vendor not named), as the GPU reading reports
#: it; the order GPUs are listed in.
Vendor = Literal["nvidia", "amd", "intel", "other"]
#: The accelerator of each vendor whose GPUs have one, in the order a host's GPUs are preferred
#: (a host with an NVIDIA GPU and an AMD one installs for CUDA).
ACCELERATOR_OF: Final[Mapping[Vendor, GpuAccelerator]] = {"nvidia": "cuda", "amd": "rocm"}
