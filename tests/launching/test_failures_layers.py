"""The engine-agnostic layers of the failure vocabulary (every layer's way of saying the same
cause, with its figures and units), the precedence of a cause over its consequence, the hints
that read the argv, and hostile figures."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import enginespec
from enginespec import ArgvHint, FailureFigures, FailurePattern, Failures, Memory, classify_failure
from enginespec.engines import _gpulayers, _libraries

#: An engine this project does not describe yet, made of the shared layers only: what a new
#: engine (LM Studio, mistral.rs, LocalAI, ...) gets before it brings its own messages.
NEW_ENGINE = enginespec.get_engine_spec("llamacpp").model_copy(
    update={
        "failures": _libraries.ARGPARSE
        + _libraries.CLAP
        + _libraries.GO_FLAGS
        + _libraries.SOCKETS
        + _gpulayers.TORCH
        + _libraries.LOADER
        + _libraries.SYSTEM
        + _libraries.PYTHON
        + _libraries.ENDINGS
    }
)


@pytest.mark.parametrize(
    ("line", "port", "address"),
    [
        # CPython asyncio, as uvicorn logs it (Linux, IPv6 tuple, Windows with a localised reason)
        (
            "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): "
            "address already in use",
            8000,
            "0.0.0.0",
        ),
        (
            "ERROR:    [Errno 98] error while attempting to bind on address ('::', 8000, 0, 0): "
            "address already in use",
            8000,
            "::",
        ),
        (
            "ERROR:    [Errno 10048] error while attempting to bind on address ('127.0.0.1', 8502): "
            "通常每个套接字地址(协议/网络地址/端口)只允许使用一次。",
            8502,
            "127.0.0.1",
        ),
        # Go's net: Linux, Windows in English and localised, IPv6
        ("Error: listen tcp 127.0.0.1:11434: bind: address already in use", 11434, "127.0.0.1"),
        (
            "Error: listen tcp 0.0.0.0:11434: bind: Only one usage of each socket address "
            "(protocol/network address/port) is normally permitted.",
            11434,
            "0.0.0.0",
        ),
        ("Error: listen tcp [::]:11434: bind: Adresse déjà utilisée", 11434, "::"),
        # Node, PyTorch's TCPStore, llama-server's and llamafile's cpp-httplib
        ("Error: listen EADDRINUSE: address already in use :::1234", 1234, "::"),
        (
            "RuntimeError: The server socket has failed to listen on any local network address. The server "
            "socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).",
            29500,
            "::",
        ),
        ("main: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080", 8080, "127.0.0.1"),
        ("couldn't bind to server socket: hostname=127.0.0.1 port=8888", 8888, "127.0.0.1"),
    ],
)
def test_address_in_use_through_every_layer(line: str, port: int, address: str) -> None:
    failure = classify_failure(NEW_ENGINE, f"INFO: starting\n{line}\n")
    assert failure.kind == "port_in_use"
    assert failure.cause_lines == (line,)
    assert (failure.figures.port, failure.figures.address) == (port, address)
    assert failure.hint is not None
    assert str(port) in failure.hint


@pytest.mark.parametrize(
    "line",
    [
        "OSError: [Errno 98] Address already in use",
        "OSError: [WinError 10048] Only one usage of each socket address (protocol/network address/port) "
        "is normally permitted",
        'Error: Os { code: 98, kind: AddrInUse, message: "Address already in use" }',
        "thread 'main' panicked at 'error binding to 0.0.0.0:80: Address already in use (os error 98)'",
    ],
)
def test_address_in_use_without_the_port(line: str) -> None:
    assert classify_failure(NEW_ENGINE, line).kind == "port_in_use"


def test_a_bind_failure_that_is_no_port_in_use() -> None:
    absent = classify_failure(
        NEW_ENGINE,
        "ERROR:    [Errno 99] error while attempting to bind on address ('::1', 8000, 0, 0): cannot assign "
        "requested address",
    )
    assert (absent.kind, absent.figures.port, absent.figures.address) == ("other", 8000, "::1")
    assert absent.hint is not None
    assert "::1" in absent.hint
    denied = classify_failure(NEW_ENGINE, "Error: listen tcp 0.0.0.0:80: bind: permission denied")
    assert (denied.kind, denied.figures.port) == ("other", 80)


@pytest.mark.parametrize(
    ("line", "requested", "free", "total", "device"),
    [
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.47 GiB. GPU 0 has a total "
            "capacity "
            "of 79.11 GiB of which 1.25 GiB is free.",
            Memory(value=1.47, unit="GiB"),
            Memory(value=1.25, unit="GiB"),
            Memory(value=79.11, unit="GiB"),
            "0",
        ),
        (
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.70 GiB. GPU 1 has a total "
            "capacty of 6.00 GiB of which 0 bytes is free.",
            Memory(value=1.7, unit="GiB"),
            Memory(value=0, unit="B"),
            Memory(value=6.0, unit="GiB"),
            "1",
        ),
        (
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 128.00 MiB (GPU 0; 15.77 GiB "
            "total capacity; 15.37 GiB already allocated; 13.62 MiB free; 15.40 GiB reserved in total by "
            "PyTorch)",
            Memory(value=128.0, unit="MiB"),
            Memory(value=13.62, unit="MiB"),
            Memory(value=15.77, unit="GiB"),
            "0",
        ),
    ],
)
def test_pytorch_out_of_memory_with_units(
    line: str, requested: Memory, free: Memory, total: Memory, device: str
) -> None:
    failure = classify_failure(NEW_ENGINE, line)
    assert failure.kind == "gpu_oom"
    assert (failure.figures.requested, failure.figures.free, failure.figures.total) == (
        requested,
        free,
        total,
    )
    assert failure.figures.device == device


def test_memory_figures_of_the_engines_own_messages() -> None:
    trt = classify_failure(
        "trtllm",
        "[TRT] [E] [virtualMemoryBuffer.cpp::resizePhysical::151] Error Code 2: OutOfMemory (Requested size "
        "was 16654532608 bytes.)",
    )
    assert (trt.kind, trt.figures.requested) == ("gpu_oom", Memory(value=16654532608, unit="B"))
    assert trt.figures.requested is not None
    assert trt.figures.requested.bytes == 16654532608
    ggml = classify_failure(
        "llamacpp",
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 279356.51 MiB on device 0: cudaMalloc "
        "failed: out of memory",
    )
    assert (ggml.figures.requested, ggml.figures.device) == (Memory(value=279356.51, unit="MiB"), "0")
    assert ggml.numbers["alloc_mib"] == 279356.51  # the old name stays
    ollama = classify_failure(
        "ollama", "Error: model requires more system memory (5.3 GiB) than is available (4.4 GiB)"
    )
    assert (ollama.kind, ollama.figures.requested, ollama.figures.free) == (
        "cpu_oom",
        Memory(value=5.3, unit="GiB"),
        Memory(value=4.4, unit="GiB"),
    )


def test_a_driver_library_missing_is_no_broken_package() -> None:
    """The loader's message before llama-cpp-python's wrapper of it: libcuda comes with the driver."""
    wrapped = (
        "RuntimeError: Failed to load shared library '/venv/lib/python3.11/site-packages/llama_cpp/"
        "libllama.so': libcuda.so.1: cannot open shared object file: No such file or directory"
    )
    driver = classify_failure("llamacpp-python", wrapped)
    assert (driver.kind, driver.figures.missing) == ("driver_missing", "libcuda.so.1")
    runtime = classify_failure(
        "llamacpp-python", wrapped.replace("libcuda.so.1", "libcudart.so.12"), exit_code=1
    )
    assert (runtime.kind, runtime.figures.missing) == ("dependency_error", "libcudart.so.12")
    module = classify_failure("tabbyapi", "ModuleNotFoundError: No module named 'exllamav2'")
    assert (module.kind, module.figures.missing) == ("dependency_error", "exllamav2")


@pytest.mark.parametrize("order", ["cause first", "consequence first"])
def test_the_cause_beats_its_consequence_in_either_order(order: str) -> None:
    cause = "ERROR:root:Model type mistral3 not supported."
    consequence = "ModuleNotFoundError: No module named 'mlx_lm.models.mistral3'"
    lines = [cause, consequence] if order == "cause first" else [consequence, cause]
    failure = classify_failure("mlx", "\n".join(lines))
    assert (failure.kind, failure.cause_lines) == ("unsupported_architecture", (cause,))


def test_a_stated_signal_is_an_ending_not_a_cause() -> None:
    crash = classify_failure(
        "ollama", "Error: llama runner process has terminated: signal: segmentation fault (core dumped)"
    )
    assert (crash.kind, crash.figures.signal) == ("killed", "SIGSEGV")
    assert crash.cause_lines
    # a cause the vocabulary knows wins
    oom = classify_failure(
        "ollama",
        "CUDA error: out of memory\n  current device: 0, in function ggml_cuda_pool_malloc_vmm\n"
        "Error: llama runner process has terminated: signal: aborted (core dumped)",
    )
    assert (oom.kind, oom.figures.device, oom.cause_lines) == ("gpu_oom", "0", ("CUDA error: out of memory",))
    # an exception it does not know is still a cause, before the shell's report of the kill
    warmup = classify_failure("sglang", "AssertionError: res=<Response [502]>, res.text=''\nKilled")
    assert (warmup.kind, warmup.cause_lines) == (
        "other",
        ("AssertionError: res=<Response [502]>, res.text=''",),
    )
    # the kernel's count of an OOM kill beats a bare `Killed`
    assert classify_failure("sglang", "Killed", signal=9, oom_kill=True).kind == "cpu_oom"
    shell = classify_failure("sglang", "loading\nKilled", signal=9)
    assert (shell.kind, shell.figures.signal, shell.signal) == ("killed", "SIGKILL", 9)


def test_illegal_instruction_names_the_signal() -> None:
    windows = classify_failure("koboldcpp", "OSError: [WinError -1073741795] Windows Error 0xc000001d")
    assert (windows.kind, windows.figures.signal) == ("other", "SIGILL")
    assert windows.hint is not None
    assert "CPU" in windows.hint
    go = classify_failure("ollama", "Error: llama runner process has terminated: signal: illegal instruction")
    assert (go.kind, go.figures.signal) == ("other", "SIGILL")


@pytest.mark.parametrize(
    ("engine", "line", "flag"),
    [
        ("vllm", "vllm: error: unrecognized arguments: --temperature 0.8", "--temperature"),
        ("vllm", "api_server.py: error: argument --dtype: invalid choice: 'fp4'", "--dtype"),
        ("tgi", "error: unexpected argument '--tokenizer-config-path' found", "--tokenizer-config-path"),
        ("ollama", "Error: unknown flag: --verbosee", "--verbosee"),
        ("llamacpp", "error: invalid argument: --tools", "--tools"),
        ("llamafile", "/x/llava.llamafile: --host unknown argument", "--host"),
    ],
)
def test_the_rejected_flag_is_named(engine: str, line: str, flag: str) -> None:
    failure = classify_failure(engine, line)
    assert (failure.kind, failure.figures.flag) == ("bad_flag", flag)


def test_kv_cache_figures_and_the_context_lines_around_the_refusal() -> None:
    log = (
        "INFO 01-11 15:51:18 llm_engine.py:275] # GPU blocks: 229, # CPU blocks: 512\n"
        "ValueError: The model's max seq len (4096) is larger than the maximum number of tokens that can be "
        "stored in KV cache (3664). Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when "
        "initializing the engine."
    )
    failure = classify_failure("vllm", log)
    figures = failure.figures
    assert (figures.kv_cache_blocks, figures.kv_cache_tokens, figures.max_model_len) == (229, 3664, 4096)
    # the context line is no cause
    assert len(failure.cause_lines) == 1
    assert "KV cache (3664)" in failure.cause_lines[0]
    # a context line alone decides nothing
    assert classify_failure("vllm", "INFO 01-11 15:51:18 llm_engine.py:275] # GPU blocks: 0").kind == "exited"


VLLM_V1_KV = (
    "ValueError: To serve at least one request with the model's max seq len (131072), (16.00 GiB KV cache "
    "is needed, which is larger than the available KV cache memory (0.71 GiB). Based on the available "
    "memory, the estimated maximum model length is 5632. Try increasing `gpu_memory_utilization` or "
    "decreasing `max_model_len` when initializing the engine."
)


@pytest.mark.parametrize(
    ("argv", "names", "not_names"),
    [
        (
            ["vllm", "serve", "m", "--max-model-len", "131072"],
            "--gpu-memory-utilization",
            "--kv-cache-memory",
        ),
        (["vllm", "serve", "m", "--kv-cache-memory-bytes", "2G"], "--kv-cache-memory-bytes", "raise --gpu"),
        (["vllm", "serve", "m", "--kv-cache-memory-bytes=2G"], "--kv-cache-memory-bytes", "raise --gpu"),
        (["vllm", "serve", "m", "--kv-cache-memory", "2G"], "--kv-cache-memory", "raise --gpu"),
    ],
)
def test_the_kv_cache_hint_fits_the_argv(argv: list[str], names: str, not_names: str) -> None:
    failure = classify_failure("vllm", VLLM_V1_KV, argv=argv)
    assert failure.kind == "kv_cache_too_small"
    assert failure.figures.max_model_len_fits == 5632
    assert failure.figures.kv_cache_needed == Memory(value=16.0, unit="GiB")
    assert failure.hint is not None
    assert "5632" in failure.hint
    assert names in failure.hint
    assert not_names not in failure.hint


def test_a_wrapped_kv_message_keeps_its_figures() -> None:
    log = (
        "(EngineCore pid=316) ValueError: To serve at least one request with the model's max seq len "
        "(100000), (4.26 GiB KV cach\ne is needed, which is larger than the available KV cache memory "
        "(4.25 GiB). Based on "
        "the avai"
    )
    figures = classify_failure("vllm", log).figures
    assert (figures.max_model_len, figures.kv_cache_needed, figures.kv_cache_available) == (
        100000,
        Memory(value=4.26, unit="GiB"),
        Memory(value=4.25, unit="GiB"),
    )


def test_a_warning_the_engine_survives_is_no_cause() -> None:
    """vLLM 0.6 warns that vllm._C did not import (no driver in reach) and starts on its platform."""
    log = (
        "WARNING 10-10 10:22:58 _custom_ops.py:18] Failed to import from vllm._C with "
        "ImportError('libcuda.so.1: "
        "cannot open shared object file: No such file or directory')\n"
        "INFO:     Uvicorn running on http://0.0.0.0:19000 (Press CTRL+C to quit)"
    )
    assert classify_failure("vllm", log).kind == "exited"


def test_chained_tracebacks_give_their_root() -> None:
    log = (
        "Traceback (most recent call last):\n"
        '  File "/x.py", line 1, in <module>\n'
        "KeyError: 'rope_theta'\n"
        "\n"
        "The above exception was the direct cause of the following exception:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "/y.py", line 2, in <module>\n'
        "RuntimeError: the model could not be built\n"
        "Exception ignored in: <function Llama.__del__ at 0x7f>\n"
        "Traceback (most recent call last):\n"
        '  File "/z.py", line 3, in __del__\n'
        "AttributeError: 'Llama' object has no attribute 'ctx'\n"
    )
    failure = classify_failure("aphrodite", log)
    assert (failure.kind, failure.cause_lines) == ("other", ("KeyError: 'rope_theta'",))


@pytest.mark.parametrize(
    "line",
    [
        "main: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 99999999",
        "main: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: " + "9" * 4000,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate " + "9" * 4000 + " GiB",
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating " + "9" * 3000 + ".5 MiB on device 0: "
        "cudaMalloc failed: out of memory",
        "Error: listen tcp " + "a" * 3000 + ":8080: bind: address already in use",
    ],
)
def test_hostile_figures_are_left_out_not_raised(line: str) -> None:
    """A figure no valid value (a port over 65535, a size that overflows, a 3000-character
    address) is not given; the class still is."""
    failure = classify_failure(NEW_ENGINE if "listen" in line or "torch" in line else "llamacpp", line)
    assert failure.kind in ("port_in_use", "gpu_oom")
    assert failure.figures.port in (None, 8080)
    assert failure.figures.address in (None, "127.0.0.1")
    assert failure.figures.requested is None
    # no hint repeats a figure that was left out
    assert "9999" not in (failure.hint or "")


def test_figures_and_patterns_are_validated() -> None:
    with pytest.raises(ValidationError, match="ending"):
        FailurePattern(kind="gpu_oom", role="ending", pattern=r"signal: x")
    with pytest.raises(ValidationError):
        ArgvHint(flag="kv-cache", hint="x")
    with pytest.raises(ValidationError):
        FailureFigures(port=70000)
    with pytest.raises(ValidationError):
        FailureFigures(signal="segv")
    with pytest.raises(ValidationError):
        Memory(value=float("inf"), unit="GiB")
    figures = FailureFigures(requested=Memory(value=1.5, unit="GiB"))
    with pytest.raises(ValidationError):
        figures.port = 1  # type: ignore[misc]
    assert str(figures.requested) == "1.5 GiB"


def test_a_plugin_pattern_names_its_figures_the_shared_way() -> None:
    spec = enginespec.get_engine_spec("llamacpp").model_copy(
        update={
            "failures": Failures(
                patterns=(
                    FailurePattern(
                        kind="gpu_oom",
                        pattern=r"VRAM short by (?P<requested>\d+ MiB) on card (?P<device>\d+)",
                        hint="{requested} more on card {device}",
                    ),
                )
            )
        }
    )
    failure = classify_failure(spec, "boom: VRAM short by 512 MiB on card 1")
    assert (failure.figures.requested, failure.figures.device, failure.hint) == (
        Memory(value=512, unit="MiB"),
        "1",
        "512 MiB more on card 1",
    )


@pytest.mark.parametrize(
    ("engine", "log", "kind", "cause", "signal"),
    [
        # a Windows crash status is how Go's os/exec reports a runner that crashed: no wrapper
        (
            "ollama",
            "Error: llama runner process has terminated: exit status 0xc000001d",
            "other",
            "Error: llama runner process has terminated: exit status 0xc000001d",
            "SIGILL",
        ),
        (
            "ollama",
            "Error: llama runner process has terminated: exit status 0xc0000409",
            "killed",
            "Error: llama runner process has terminated: exit status 0xc0000409",
            "SIGABRT",
        ),
        (
            "ollama",
            'msg="error loading llama server" error="llama runner process has terminated: '
            'exit status 3221225477"',
            "killed",
            'msg="error loading llama server" error="llama runner process has terminated: '
            'exit status 3221225477"',
            "SIGSEGV",
        ),
        # a plain exit status says nothing of why
        ("ollama", "Error: llama runner process has terminated: exit status 1", "exited", None, None),
        # TGI's launcher numbers the signal: 4 is SIGILL, 9 a kill whose cause is above (if any)
        (
            "tgi",
            "ERROR shard-manager: text_generation_launcher: Shard process was signaled to shutdown "
            "with signal 4 rank=0",
            "other",
            "ERROR shard-manager: text_generation_launcher: Shard process was signaled to shutdown "
            "with signal 4 rank=0",
            "SIGILL",
        ),
        (
            "tgi",
            "ERROR text_generation_launcher: Shard process was signaled to shutdown with signal 9\n"
            "Error: ShardCannotStart",
            "killed",
            "ERROR text_generation_launcher: Shard process was signaled to shutdown with signal 9",
            "SIGKILL",
        ),
    ],
)
def test_a_crash_status_is_its_signal(
    engine: str, log: str, kind: str, cause: str | None, signal: str | None
) -> None:
    failure = classify_failure(engine, log)
    assert failure.kind == kind
    assert failure.cause_lines == ((cause,) if cause else ())
    assert failure.figures.signal == signal


@pytest.mark.parametrize(
    ("engine", "line", "kind"),
    [
        # the CUDA runtime's words for a driver too old, through ggml as through PyTorch
        (
            "llamacpp",
            "ggml_cuda_init: failed to initialize CUDA: CUDA driver version is insufficient for CUDA "
            "runtime version",
            "driver_missing",
        ),
        (
            "ollama",
            "ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected",
            "driver_missing",
        ),
        (
            "vllm",
            "RuntimeError: CUDA driver version is insufficient for CUDA runtime version",
            "driver_missing",
        ),
        # safetensors' header errors, with or without the exception's name
        (
            "vllm",
            "ERROR 02-26 05:28:06 engine.py:400] Error while deserializing header: "
            "InvalidHeaderDeserialization",
            "corrupt_model",
        ),
        (
            "sglang",
            "safetensors_rust.SafetensorError: Error while deserializing header: HeaderTooSmall",
            "corrupt_model",
        ),
        # vLLM's rewrap of a model it cannot resolve; mlx-vlm's loader; Ollama's model store
        (
            "vllm",
            "ValueError: Invalid repository ID or local directory specified: '/models/x'.",
            "model_not_found",
        ),
        ("mlx-vlm", "ERROR:root:No safetensors found in /models/llava", "model_not_found"),
        ("ollama", "Error: mkdir /usr/share/ollama/.ollama/models: permission denied", "model_not_found"),
        # the kernel's OOM killer in 2.6's words (mm/oom_kill.c) as in today's
        ("llamacpp", "kernel: Out of Memory: Killed process 4242 (llama-server).", "cpu_oom"),
        ("llamacpp", "kernel: Out of memory: Killed process 4242 (llama-server) total-vm:1kB", "cpu_oom"),
    ],
)
def test_engine_and_runtime_wordings(engine: str, line: str, kind: str) -> None:
    failure = classify_failure(engine, f"starting\n{line}\n")
    assert failure.kind == kind
    assert failure.cause_lines == (line,)


def test_a_source_line_behind_a_log_prefix_is_no_cause() -> None:
    """A traceback quoted through docker compose and vLLM's logger: the `raise` line names the
    error, the exception line states it."""
    raised = (
        'vllm-1  | ERROR 11-18 18:07:28 engine.py:366]     raise ValueError("Model path does not exist: "'
    )
    stated = (
        "vllm-1  | ERROR 11-18 18:07:28 engine.py:366] ValueError: No available memory for the cache blocks."
    )
    log = (
        'vllm-1  | ERROR 11-18 18:07:28 engine.py:366]   File "/x/worker.py", line 493, in check\n'
        f"{raised}\n{stated}\n"
    )
    failure = classify_failure("vllm", log)
    assert failure.cause_lines == (stated,)
    prefixed = (
        "(VllmWorkerProcess pid=7) ERROR 03-02 19:49:43 [multiproc_worker_utils.py:242]     "
        "raise RuntimeError(x)"
    )
    assert classify_failure("vllm", f"{prefixed}\n").cause_lines == ()


@pytest.mark.parametrize(
    "line",
    [
        # CPython 3.10 on (checked with 3.11.7), and 3.8/3.9's bare name
        "importlib.metadata.PackageNotFoundError: No package metadata was found for flashinfer",
        "importlib.metadata.PackageNotFoundError: flashinfer",
    ],
)
def test_a_missing_distribution_is_named_in_either_wording(line: str) -> None:
    failure = classify_failure("sglang", f"{line}\n")
    assert failure.kind == "dependency_error"
    assert failure.figures.missing == "flashinfer"


_WRAPPED_TORCH_OOM = (
    "tabbyapi-1  | ERROR:    torch.OutOfMemoryError: CUDA out of memory.\n"
    "tabbyapi-1  | Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 14.58 GiB of which\n"
    "tabbyapi-1  | 5.56 MiB is free. Including non-PyTorch memory, this process has 14.57 GiB\n"
)
_FRACTION_OOM = (
    "torch.OutOfMemoryError: Allocation on device 1 would exceed allowed memory. (out of memory)\n"
    "Currently allocated     : 9.43 GiB\n"
    "Requested               : 640.00 MiB\n"
    "Device limit            : 11.59 GiB\n"
    "Free (according to CUDA): 7.12 MiB\n"
)


@pytest.mark.parametrize(
    ("engine", "log", "kind", "cause", "figures"),
    [
        # SGLang's own registry refusal (python/sglang/srt/models/registry.py)
        (
            "sglang",
            "ValueError: Model architectures ['FooForCausalLM'] are not supported for now. Supported "
            "architectures: dict_keys(['LlamaForCausalLM'])",
            "unsupported_architecture",
            0,
            {},
        ),
        # PyTorch's refusal under a memory fraction: its figures on the lines after it, or on the
        # one line a Rust panic makes of it
        (
            "vllm",
            _FRACTION_OOM,
            "gpu_oom",
            0,
            {"device": "1", "requested": (640, "MiB"), "free": (7.12, "MiB")},
        ),
        (
            "tgi",
            "thread 'main' panicked at 'Unable to warmup model: Generation(\"Allocation on device 0 would "
            "exceed allowed memory. (out of memory)\\nCurrently allocated     : 1.00 GiB\\nRequested"
            "               : 2.50 GiB\\nDevice limit            : 22.20 GiB\\nFree (according to CUDA): "
            "1.00 MiB\")', router/src/main.rs:216:18",
            "gpu_oom",
            0,
            {"device": "0", "requested": (2.5, "GiB"), "free": (1, "MiB")},
        ),
        # the allocator's message wrapped by a terminal behind a compose prefix
        (
            "tabbyapi",
            _WRAPPED_TORCH_OOM,
            "gpu_oom",
            0,
            {"device": "0", "requested": (20, "MiB"), "total": (14.58, "GiB"), "free": (5.56, "MiB")},
        ),
        # ggml's CPU buffer (bytes); llama_file reading past the end of a truncated file
        (
            "llamacpp",
            "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 8589934624",
            "cpu_oom",
            0,
            {"requested": (8589934624, "B")},
        ),
        ("llamacpp-python", "error loading model: unexpectedly reached end of file", "corrupt_model", 0, {}),
        # Windows' STATUS_DLL_NOT_FOUND as Go's os/exec reports a runner's end, unsigned
        (
            "ollama",
            'msg="error loading llama server" error="llama runner process has terminated: exit status '
            '3221225781"',
            "dependency_error",
            0,
            {},
        ),
        # an APE file the system hands to WINE's run-detectors
        ("llamafile", "run-detectors: unable to find an interpreter for ./m", "dependency_error", 0, {}),
        # TensorRT-LLM: an engine file this runtime cannot deserialize; the executor's memory
        (
            "trtllm",
            "[TensorRT-LLM][ERROR] Assertion failed: Failed to deserialize cuda engine. (/x/r.cpp:70)",
            "corrupt_model",
            0,
            {},
        ),
        (
            "trtllm",
            "[TRT-LLM] [E] Failed to initialize executor on rank 0: Executor creation failed due to "
            "insufficient GPU memory.\n\nThe following component could not be created: KV cache\n"
            "Total GPU memory (GiB): 79.11\nFree GPU memory before component creation attempt (GiB): 3.25\n",
            "gpu_oom",
            0,
            {"total": (79.11, "GiB"), "free": (3.25, "GiB")},
        ),
        # MLX's strict weight load, through mlx-lm and mlx-vlm
        ("mlx", "ValueError: Missing 2 parameters: \nlm_head.weight.", "unsupported_architecture", 0, {}),
        (
            "mlx-vlm",
            "ValueError: Received 4 parameters not in model: \nx.",
            "unsupported_architecture",
            0,
            {},
        ),
        # ExLlamaV2's key check: its `raise` line quotes `{prefix}` and is no cause
        (
            "tabbyapi",
            'ERROR:        raise ValueError(f" ## Could not find {prefix}.* in model")\n'
            "ERROR:    ValueError:  ## Could not find lm_head.* in model",
            "unsupported_architecture",
            1,
            {},
        ),
        # gguf-py given a quantization type it does not know
        (
            "aphrodite",
            "ValueError: 30 is not a valid GGMLQuantizationType",
            "unsupported_architecture",
            0,
            {},
        ),
        # clap's message with the quotes a forum retypes; PyInstaller naming a .so on Linux
        ("tgi", "error: unexpected argument \u2018--foo\u2019 found", "bad_flag", 0, {"flag": "--foo"}),
        (
            "koboldcpp",
            "pyimod03_ctypes.PyInstallerImportError: Failed to load dynlib/dll "
            "'/tmp/_MEIx/koboldcpp_vulkan.so'. Most likely this dynlib/dll was not found when the "
            "application was frozen.",
            "dependency_error",
            0,
            {"missing": "koboldcpp_vulkan.so"},
        ),
    ],
)
def test_more_engine_and_runtime_wordings(
    engine: str, log: str, kind: str, cause: int, figures: dict[str, object]
) -> None:
    """The layers and engine messages a third holdout of unseen logs showed missing: the class,
    the cause line (the ``cause``-th line of the log), and the figures with their units."""
    failure = classify_failure(engine, log)
    assert failure.kind == kind
    assert failure.cause_lines[0] == log.split("\n")[cause]
    for name, value in figures.items():
        given = getattr(failure.figures, name)
        if isinstance(value, tuple):
            assert given == Memory(value=value[0], unit=value[1]), name
        else:
            assert given == value, name


@pytest.mark.parametrize(
    ("engine", "line", "kind", "figures"),
    [
        # mistral.rs's GGUF loader and candle's GGUF reader
        (
            "mistralrs",
            "called `Result::unwrap()` on an `Err` value: Unknown GGUF architecture `foo`",
            "unsupported_architecture",
            {},
        ),
        ("mistralrs", 'Error: path: "/m/x.gguf" unknown dtype for tensor 21', "unsupported_architecture", {}),
        # LocalAI: a Go backend's stat of the model file; a backend not installed
        (
            "localai",
            "[whisper] Fails: rpc error: code = Unknown desc = stat /models/x: no such file or directory",
            "model_not_found",
            {},
        ),
        (
            "localai",
            'ERROR Backend not found backend="llama-cpp" error=backend not found: llama-cpp',
            "dependency_error",
            {"missing": "llama-cpp"},
        ),
        # LocalAI and LM Studio relay llama.cpp's loader and mlx-lm's messages
        (
            "localai",
            "llama_model_load: error loading model: unknown model architecture: 'x'",
            "unsupported_architecture",
            {},
        ),
        (
            "lmstudio",
            "error loading model: error loading model architecture: unknown model architecture: 'x'",
            "unsupported_architecture",
            {},
        ),
        (
            "lmstudio",
            "Error when loading model: ValueError: Model type foo not supported.",
            "unsupported_architecture",
            {},
        ),
    ],
)
def test_the_2026_engines_wordings(engine: str, line: str, kind: str, figures: dict[str, object]) -> None:
    """The messages a fourth holdout of unseen logs showed the new engines lacking."""
    failure = classify_failure(engine, line)
    assert failure.kind == kind
    assert failure.cause_lines == (line,)
    for name, value in figures.items():
        assert getattr(failure.figures, name) == value


def test_lm_studios_dialog_only_wraps_the_cause() -> None:
    log = (
        "🥲 Failed to load the model\n\nError loading model.\n\n"
        "error loading model: unable to allocate Vulkan0 buffer"
    )
    failure = classify_failure("lmstudio", log)
    assert failure.kind == "gpu_oom"
    assert failure.cause_lines == ("error loading model: unable to allocate Vulkan0 buffer",)
    assert (
        classify_failure("lmstudio", "🥲 Failed to load the model\n\nError loading model.").kind == "exited"
    )
