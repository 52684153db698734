"""Failure messages of the libraries the engines are built on, as :class:`Failures` an engine's
file adds after its own: Python's argparse and importer, PyTorch/CUDA, Hugging Face's hub and
transformers, uvicorn, and llama.cpp's GGML/GGUF loader (llama-server, llama-cpp-python, Ollama's
runner, KoboldCpp and llamafile all print it). Each regex is searched in one log line. And the
answers of llama-server's /health, which Ollama's runners give too."""

from __future__ import annotations

from pathlib import Path

from enginespec.definition import HealthRule
from enginespec.failures import FailurePattern, Failures

P = FailurePattern

#: argparse (CPython Lib/argparse.py ArgumentParser.error: `prog: error: message` after a usage).
ARGPARSE = Failures(
    patterns=(
        P(
            kind="bad_flag",
            pattern=r"(?:^|\s)\S+: error: (?:unrecognized arguments|argument \S+|the following arguments "
            r"are required|ambiguous option|invalid choice|one of the arguments)",
        ),
    )
)

#: uvicorn's bind error (uvicorn/server.py startup: `[Errno 98] error while attempting to bind on
#: address ('0.0.0.0', 8000): address already in use`) and Python's own OSError.
SOCKETS = Failures(
    patterns=(
        P(
            kind="port_in_use",
            pattern=r"error while attempting to bind on address \('(?P<host>[^']*)', (?P<port>\d+)\): "
            r"address already in use",
            hint="port {port} is taken: choose another port or stop the process holding it",
        ),
        P(kind="port_in_use", pattern=r"\[Errno (?:98|48|10048)\] [Aa]ddress already in use"),
        P(kind="port_in_use", pattern=r"\bEADDRINUSE\b|\bAddrInUse\b"),
    )
)

#: PyTorch's allocator (c10/cuda/CUDACachingAllocator.cpp: `CUDA out of memory. Tried to allocate
#: 896.00 MiB. GPU 0 has a total capacity of 93.09 GiB of which 739.81 MiB is free.`), CUDA and
#: HIP runtime errors, and the driver checks (torch/cuda/__init__.py: `Found no NVIDIA driver`,
#: c10/cuda/CUDAFunctions.cpp cudaGetDeviceCount errors 802/804).
TORCH = Failures(
    patterns=(
        P(
            kind="gpu_oom",
            pattern=r"(?:CUDA|HIP|XPU) out of memory\. Tried to allocate (?P<alloc_mib>[\d.]+) MiB\. "
            r"GPU (?P<device>\d+) has a total capacity of (?P<total_gib>[\d.]+) GiB of which "
            r"(?P<free_mib>[\d.]+) MiB is free",
        ),
        P(kind="gpu_oom", pattern=r"(?:CUDA|HIP|XPU) out of memory"),
        P(kind="gpu_oom", pattern=r"OutOfMemoryError"),
        P(kind="gpu_oom", pattern=r"CUDA error: out of memory|hipErrorOutOfMemory|cudaErrorMemoryAllocation"),
        P(
            kind="driver_missing",
            pattern=r"Found no NVIDIA driver on your system|No CUDA GPUs are available|"
            r"NVIDIA driver on your system is too old",
        ),
        P(kind="driver_missing", pattern=r"cudaGetDeviceCount\(\)|Error 80[234]: "),
        P(kind="driver_missing", pattern=r"\blibcuda\.so(?:\.\d+)*: cannot open shared object file"),
        P(kind="driver_missing", pattern=r"CUDA driver version is insufficient|no CUDA-capable device"),
        P(kind="other", pattern=r"CUDA error: an illegal memory access was encountered"),
    )
)

#: huggingface_hub (huggingface_hub/errors.py: GatedRepoError `Cannot access gated repo`,
#: RepositoryNotFoundError, HFValidationError `Repo id must be in the form ...`, the validator
#: transformers and the engines hit when a local path that does not exist is taken for a repo
#: id) and transformers (dynamic_module_utils / configuration_auto: `contains custom code which
#: must be executed`, `trust_remote_code=True`; `does not recognize this architecture`).
HUGGINGFACE = Failures(
    patterns=(
        P(
            kind="trust_remote_code",
            pattern=r"contains custom code which must be executed|requires you to execute the "
            r"(?:configuration|modeling) file in that repo|trust_remote_code=True",
            hint="the model ships its own code: start with --trust-remote-code if you trust it",
        ),
        P(kind="gated_or_auth", pattern=r"GatedRepoError|Cannot access gated repo|is gated\. You must be"),
        P(
            kind="gated_or_auth",
            pattern=r"(?:401|403) Client Error.*(?:Unauthorized|Forbidden)|Invalid user token",
        ),
        P(kind="model_not_found", pattern=r"HFValidationError: Repo id must be"),
        P(kind="model_not_found", pattern=r"RepositoryNotFoundError|Repository Not Found for url"),
        P(kind="model_not_found", pattern=r"does not appear to have a file named config\.json"),
        P(
            kind="model_not_found",
            pattern=r"No such file or directory: '[^']*(?:config\.json|\.safetensors|\.gguf)'",
        ),
        P(
            kind="unsupported_architecture",
            pattern=r"Transformers does not recognize this architecture|does not recognize this "
            r"architecture|model type `[^`]+` but Transformers",
        ),
        P(
            kind="corrupt_model",
            pattern=r"SafetensorError: Error while deserializing header|HeaderTooLarge|"
            r"MetadataIncompleteBuffer|invalid load key",
        ),
    )
)

#: Python's importer and packaging problems (an ImportError of the engine's own compiled module,
#: `undefined symbol` of a wheel built against another torch, a CUDA runtime library the wheel
#: links against, an incompatible pydantic).
PYTHON = Failures(
    patterns=(
        P(kind="dependency_error", pattern=r"\blibcudart\.so(?:\.\d+)*: cannot open shared object file"),
        P(kind="dependency_error", pattern=r"\blib\w+\.so(?:\.\d+)*: cannot open shared object file"),
        P(kind="dependency_error", pattern=r"(?:ModuleNotFoundError|ImportError): "),
        P(kind="dependency_error", pattern=r"undefined symbol: "),
        P(kind="dependency_error", pattern=r"PydanticImportError|pydantic\.errors\.\w*ImportError"),
        P(
            kind="dependency_error",
            pattern=r"requires \S+ (?:>=|==|<)\s?[\d.]+ but|is not installed\. Please install",
        ),
    )
)

#: llama.cpp's loader and backends (ggml/src/gguf.cpp `failed to open GGUF file`, `invalid magic
#: characters`; src/llama-model-loader.cpp `wrong number of tensors; expected N, got M`, `data is
#: not within the file bounds`; src/llama-model.cpp `unknown model architecture`;
#: ggml-cuda.cu `cudaMalloc failed: out of memory`; ggml-metal `kIOGPUCommandBufferCallbackError
#: OutOfMemory`), as of llama.cpp b6000; older builds print `error loading model:` before them.
GGML = Failures(
    patterns=(
        P(
            kind="gpu_oom",
            pattern=r"allocating (?P<alloc_mib>[\d.]+) MiB on device (?P<device>\d+): (?:cuda|hip)Malloc "
            r"failed: out of memory",
            hint="offload fewer layers (-ngl) or use a smaller context (-c) or quantization",
        ),
        P(kind="gpu_oom", pattern=r"(?:cuda|hip)Malloc failed: out of memory"),
        # ggml-cuda.cu ggml_cuda_error: `CUDA error: out of memory` (HIP builds say CUDA too).
        P(kind="gpu_oom", pattern=r"CUDA error: out of memory"),
        P(kind="gpu_oom", pattern=r"(?:failed|unable) to allocate (?:CUDA|ROCm|Vulkan|Metal|SYCL)\d* buffer"),
        P(kind="gpu_oom", pattern=r"kIOGPUCommandBufferCallbackErrorOutOfMemory|Insufficient Memory \("),
        P(kind="gpu_oom", pattern=r"ggml_metal\w*: error: command buffer \d+ failed with status 5"),
        P(kind="gpu_oom", pattern=r"ErrorOutOfDeviceMemory|ggml_vulkan: Device memory allocation .* failed"),
        P(
            kind="unsupported_architecture",
            pattern=r"unknown model architecture: '(?:[^']*)'",
            hint="this build does not know the model's architecture: use a newer llama.cpp",
        ),
        P(
            kind="unsupported_architecture",
            pattern=r"wrong number of tensors; expected (?P<expected_tensors>\d+), got (?P<got_tensors>\d+)",
            hint="the model is of a newer family than this build reads: use a newer llama.cpp",
        ),
        P(kind="unsupported_architecture", pattern=r"unknown pre-tokenizer type|unknown tokenizer: "),
        P(
            kind="corrupt_model",
            pattern=r"invalid magic(?: number| characters)?:? (?:'[^']*'|(?P<magic_hex>[0-9a-fA-F]{8})|\S+)",
        ),
        P(
            kind="corrupt_model",
            pattern=r"unknown \(magic, version\) combination: (?P<magic_hex>[0-9a-fA-F]{8}), "
            r"0*(?P<version>\d+)|is this really a GGML file\?",
        ),
        P(
            kind="corrupt_model",
            pattern=r"data is not within the file bounds|model is corrupted or incomplete",
        ),
        P(kind="corrupt_model", pattern=r"has wrong size in model file|tensor '[^']*' has wrong shape"),
        # gguf_init_from_reader (ggml/src/gguf.cpp of the llama.cpp llama-cpp-python 0.3.35 vendors)
        # says "failed to read header" and "number of tensors is N but must be in [0, M]".
        P(kind="corrupt_model", pattern=r"failed to read (?:key-value pairs|tensor info|(?:the )?header)"),
        P(kind="corrupt_model", pattern=r"number of tensors is -?\d+ but must be in \["),
        P(kind="model_not_found", pattern=r"failed to open GGUF file|failed to open '[^']*': No such file"),
        P(kind="model_not_found", pattern=r"(?:model|file) (?:'[^']*' )?(?:does not exist|not found)\b"),
    )
)

#: What the operating system says of a native process: the OOM killer, an allocation that failed
#: on the host, an instruction this CPU lacks (SIGILL; Windows STATUS_ILLEGAL_INSTRUCTION).
SYSTEM = Failures(
    patterns=(
        P(kind="cpu_oom", pattern=r"Out of memory: Kill(?:ed)? process|invoked oom-killer|\boom-kill:"),
        P(kind="cpu_oom", pattern=r"std::bad_alloc|(?:^|\s)MemoryError\b|Cannot allocate memory"),
        P(
            kind="other",
            pattern=r"Illegal instruction|0xc000001d|illegal hardware instruction",
            hint="this CPU lacks an instruction the build uses (AVX2, AVX-512): use a build for this CPU",
        ),
    )
)

#: The vocabulary of a Python engine built on PyTorch and Hugging Face, after its own patterns.
PYTHON_SERVER = ARGPARSE + SOCKETS + TORCH + HUGGINGFACE + SYSTEM + PYTHON
#: The vocabulary of an engine built on llama.cpp, after its own patterns.
LLAMA_CPP = SOCKETS + GGML + SYSTEM

#: llama-server's /health while the model loads: 503 {"error": {"message": "Loading model", ...}}
#: (every endpoint, llama.cpp 0c1e57098 tools/server/server-http.cpp middleware_server_state), in
#: older builds 503 {"status": "loading model"}; once ready 200 {"status": "ok"}
#: (tools/server/server-context.cpp get_health). Ollama reads exactly these of its runners
#: (v0.32.15 llm/llama_server.go getServerStatus).
LLAMA_SERVER_HEALTH = (
    HealthRule(status=503, contains="Loading model", state="loading", reason="loading model"),
    HealthRule(status=503, field="status", equals="loading model", state="loading", reason="loading model"),
    HealthRule(status=200, field="status", equals="ok", state="ready"),
)


def listed_flags(file_name: str) -> frozenset[str]:
    """The flags of a data file beside this module: one per line, ``#`` starting a comment."""
    text = Path(__file__).with_name(file_name).read_text(encoding="utf-8")
    return frozenset(flag for line in text.splitlines() if (flag := line.partition("#")[0].strip()))
