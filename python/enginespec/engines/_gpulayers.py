"""Failure messages of the GPU runtimes under the engines, as :class:`Failures` that
:mod:`enginespec.engines._libraries` composes into every engine's vocabulary: PyTorch's allocator
and the CUDA and HIP runtimes' words (out of memory, no device, no driver), the kernels a build
lacks for this GPU, and the CUDA driver API's errors by their names (Rust's cudarc). Each regex is
searched in one log line; its named groups are the figures."""

from __future__ import annotations

from enginespec.failures import FailurePattern, Failures

P = FailurePattern

#: A figure of memory as logs write it: ``448.00 MiB``, ``1.47 GiB``, ``69568823808 bytes``.
MEM = r"\d[\d,]*(?:\.\d+)? ?(?:[KMGT]i?B|B|bytes)"

#: PyTorch's allocator (c10/cuda/CUDACachingAllocator.cpp, found by the code search: since 2.1
#: `"CUDA out of memory. Tried to allocate ", format_size(alloc_size), ". GPU ", device, " has a
#: total capacity of ", ..., " of which ", ..., " is free. "`; the XPU allocator says the same with
#: `XPU`),
#: 2.0 `... GPU 0 has a total capacty of ...` (sic), before `Tried to allocate 128.00 MiB (GPU 0; 15.77
#: GiB total capacity; 15.37 GiB already allocated; 13.62 MiB free; ...)`), the CUDA and HIP
#: runtimes' own words (cudaGetErrorString: `out of memory`, `no CUDA-capable device is
#: detected`, `CUDA driver version is insufficient for CUDA runtime version`, `API call is not
#: supported in the installed CUDA driver`, `no kernel image is available for execution on the
#: device`: the runtime's own strings, closed source, seen in logs; TensorRT-LLM's
#: tensorrt_llm/common/cudaUtils.h check (found by the code search: `[TensorRT-LLM][ERROR] CUDA
#: runtime error in %s: %s`) and TurboMind's `CUDA runtime error: out of memory`), ggml-cuda's
#: error report (`CUDA error: out of memory` then `current device: 0, in function ...`), and the
#: driver checks (c10/cuda/CUDAFunctions.cpp device_count, found by the code search: `Found no
#: NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver
#: from http://www.nvidia.com/Download/index.aspx`; torch/cuda/__init__.py `No CUDA GPUs are
#: available`, ROCm builds `No HIP GPUs are available`, cudaGetDeviceCount errors 802/804: from
#: memory of PyTorch 2.x, not checked here).
#: The CUDA runtime's and HIP's own words for a driver that is missing, too old, or sees no
#: device (cudaGetErrorString of cudaErrorInsufficientDriver `CUDA driver version is insufficient
#: for CUDA runtime version`, cudaErrorNoDevice `no CUDA-capable device is detected`,
#: cudaErrorNotSupported's `API call is not supported in the installed CUDA driver`; HIP's
#: hipErrorNoDevice, `no ROCm-capable device is detected`): whichever program prints them,
#: PyTorch's c10 or ggml-cuda.cu ggml_cuda_init (`%s: failed to initialize CUDA: %s`, llama.cpp
#: b4000 to b6000).
CUDA_NO_DRIVER = (
    r"CUDA driver version is insufficient|no CUDA-capable device|API call is not supported in "
    r"the installed CUDA driver|hipErrorNoDevice|no ROCm-capable device"
)
#: The same for an engine on ggml, after ggml's own causes (a CPU fallback may follow it).
CUDA_DRIVER = Failures(patterns=(P(kind="driver_missing", pattern=CUDA_NO_DRIVER),))

TORCH = Failures(
    patterns=(
        P(
            kind="gpu_oom",
            pattern=r"(?:CUDA|HIP|XPU) out of memory\. Tried to allocate (?P<alloc_mib>[\d.]+) MiB\. "
            r"GPU (?P<device>\d+) has a total capacity of (?P<total_gib>[\d.]+) GiB of which "
            r"(?P<free_mib>[\d.]+) MiB is free",
        ),
        P(
            kind="gpu_oom",
            pattern=rf"out of memory\. Tried to allocate (?P<requested>{MEM})\.? GPU (?P<device>\d+) has a "
            rf"total capaci?ty of (?P<total>{MEM}) of which (?P<free>{MEM}) is free",
        ),
        P(
            kind="gpu_oom",
            pattern=rf"out of memory\. Tried to allocate (?P<requested>{MEM}) \(GPU (?P<device>\d+); "
            rf"(?P<total>{MEM}) total capacity; {MEM} already allocated; (?P<free>{MEM}) free",
        ),
        # The allocator's refusal under a memory fraction (found by the exact-string search in a
        # copy of c10/cuda/CUDACachingAllocator.cpp: TORCH_CHECK_WITH(OutOfMemoryError, ...,
        # "Allocation on device ", device, " would exceed allowed memory. (out of memory)",
        # "\nCurrently allocated     : ", ..., "\nRequested               : ", ...,
        # "\nFree (according to CUDA): ", ...)): on one line when a Rust panic quotes it
        # with its newlines escaped (TGI's router), else the figures on the lines after it
        P(
            kind="gpu_oom",
            pattern=rf"Allocation on device (?P<device>\d+) would exceed allowed memory\. \(out of memory\)"
            rf"(?:.*?Requested\s*: (?P<requested>{MEM}))?(?:.*?Free \(according to CUDA\): (?P<free>{MEM}))?",
        ),
        P(kind="gpu_oom", role="context", pattern=rf"^\s*Requested\s+: (?P<requested>{MEM})"),
        P(kind="gpu_oom", role="context", pattern=rf"Free \(according to CUDA\): (?P<free>{MEM})"),
        # The allocator's message wrapped over lines (a terminal's or rich's width): its figures
        # wherever the break falls
        P(
            kind="gpu_oom",
            role="context",
            pattern=rf"Tried to allocate (?P<requested>{MEM})\.? GPU (?P<device>\d+) has a total "
            rf"capaci?ty of (?P<total>{MEM})",
        ),
        P(kind="gpu_oom", role="context", pattern=rf"(?:^|\s)(?P<free>{MEM}) is free\."),
        P(
            kind="gpu_oom",
            pattern=rf"(?:CUDA|HIP|XPU) out of memory\. Tried to allocate (?P<requested>{MEM})\.?"
            r"(?: GPU (?P<device>\d+))?",
        ),
        P(kind="gpu_oom", pattern=r"(?:CUDA|HIP|XPU) out of memory"),
        P(kind="gpu_oom", pattern=r"OutOfMemoryError"),
        P(
            kind="gpu_oom",
            pattern=r"CUDA (?:runtime )?error:? (?:in .*?: )?out of memory|hipErrorOutOfMemory|"
            r"cudaErrorMemoryAllocation",
        ),
        P(
            kind="driver_missing",
            pattern=r"Found no NVIDIA driver on your system|No (?:CUDA|HIP) GPUs are available|"
            r"NVIDIA driver on your system is too old",
        ),
        P(kind="driver_missing", pattern=r"cudaGetDeviceCount\(\)|Error 80[234]: "),
        P(kind="driver_missing", pattern=CUDA_NO_DRIVER),
        P(kind="other", pattern=r"CUDA error: an illegal memory access was encountered"),
        # NCCL's communicator that could not be set up (torch's ProcessGroupNCCL: `NCCL error:
        # unhandled system error (run with NCCL_DEBUG=INFO for details)`, from memory of PyTorch
        # 2.x): a fault of the host (shared memory, network, peer access), neither memory nor install
        P(
            kind="other",
            pattern=r"NCCL error:? (?:in: \S+, )?unhandled (?:system|cuda) error",
            hint="NCCL could not set up the GPUs' communication (NCCL_DEBUG=INFO says why): shared memory "
            "(a container's --shm-size or --ipc=host), the network, or peer access between the GPUs",
        ),
    )
)

#: A build with no kernel for this GPU's architecture, as each layer says it: the CUDA runtime's
#: cudaErrorNoKernelImageForDevice (`no kernel image is available for execution on the device`)
#: and cudaErrorInvalidDeviceFunction (`invalid device function`, HIP's too), ggml-cuda's
#: bad_arch() (`ERROR: ggml-cuda was compiled without support for the current GPU
#: architecture.`, ggml/src/ggml-cuda/common.cuh, found by the exact-string search), the driver
#: API's CUDA_ERROR_NOT_FOUND and CUDA_ERROR_NO_BINARY_FOR_GPU by their cuGetErrorString names
#: (`named symbol not found`: a kernel missing from the module loaded for this GPU; `no binary for
#: GPU`; cudarc's `DriverError(CUDA_ERROR_NOT_FOUND, "named symbol not found")` under candle and
#: mistral.rs: seen in logs only, https://github.com/EricLBuehler/mistral.rs/issues/654) and
#: HIP's hipErrorNoBinaryForGpu; ggml-cuda's no_device_code (`ERROR: CUDA kernel %s has no device
#: code compatible with CUDA arch %d. ggml-cuda.cu was compiled for: %s`, ggml-cuda/common.cuh,
#: found by the exact-string search); rocBLAS's `Could not initialize Tensile host: No devices
#: found` (its Tensile kernels have none for this GPU; seen in logs only:
#: https://github.com/Jeffser/Alpaca/issues/585).
GPU_KERNELS = Failures(
    patterns=(
        P(
            kind="dependency_error",
            pattern=r"no kernel image is available for execution on the device|compiled without support for "
            r"the current GPU architecture|\bnamed symbol not found|CUDA_ERROR_NO_BINARY_FOR_GPU|"
            r"no binary for GPU|hipErrorNoBinaryForGpu|(?:CUDA|HIP|hip) error: invalid device function|"
            r"has no device code compatible with (?:CUDA|HIP) arch|Could not initialize Tensile host",
            hint="this build has no kernels for this GPU's architecture: install a build made for it",
        ),
    )
)

#: The CUDA driver API's errors by their CUresult names, as Rust's cudarc prints them
#: (`DriverError(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")`, candle, mistral.rs, TEI), and
#: cudarc's panic when it cannot open a library (`Unable to dynamically load the "cuda" shared
#: library`, cudarc src/lib.rs, found by the exact-string search): libcuda comes with the driver,
#: the others (nvrtc, cublas, nccl) with the CUDA toolkit or a wheel.
CUDA_DRIVER_API = Failures(
    patterns=(
        P(kind="gpu_oom", pattern=r"\bCUDA_ERROR_OUT_OF_MEMORY\b"),
        P(
            kind="driver_missing",
            pattern=r"\bCUDA_ERROR_(?:NO_DEVICE|INSUFFICIENT_DRIVER|SYSTEM_DRIVER_MISMATCH)\b|Unable to "
            r'dynamically load the "(?P<missing>cuda)" shared library',
        ),
        # CUDA_ERROR_UNSUPPORTED_PTX_VERSION (`the provided PTX was compiled with an unsupported
        # toolchain.`): kernels compiled by a CUDA toolkit newer than the driver takes
        P(
            kind="driver_missing",
            pattern=r"\bCUDA_ERROR_UNSUPPORTED_PTX_VERSION\b|cudaErrorUnsupportedPtxVersion|"
            r"the provided PTX was compiled with an unsupported toolchain",
            hint="the driver is older than the CUDA toolkit the build was compiled with: update the driver, "
            "or use a build for this driver",
        ),
        P(
            kind="dependency_error",
            pattern=r'Unable to dynamically load the "(?P<missing>[\w-]+)" shared library',
            hint="the {missing} library is missing: install the CUDA runtime the build links against",
        ),
    )
)
