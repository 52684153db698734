"""The runtimes' wordings a fourth holdout of unseen logs showed missing (each pattern cited in the
engine's file or engines/_libraries.py), in lines of the sources' formats, not the holdout's; and
the structure that carries them to every engine: each engine's vocabulary ends with the layers
every process passes through. Pure functions: no backend involved."""

from __future__ import annotations

import pytest

import enginespec
from enginespec import Memory, classify_failure
from enginespec.definition.registry import find_engine
from enginespec.engines import _libraries
from enginespec.failures import FailurePattern, Failures


@pytest.mark.parametrize("engine", enginespec.engine_ids())
def test_every_engine_reads_the_layers_under_it(engine: str) -> None:
    vocabulary = find_engine(engine).failures.patterns
    missing = [p.pattern for p in _libraries.BASE.patterns if p not in vocabulary]
    assert missing == []


def test_a_vocabulary_keeps_a_shared_pattern_once_where_it_comes_first() -> None:
    first = FailurePattern(kind="gpu_oom", pattern="a")
    second = FailurePattern(kind="other", pattern="b")
    joined = Failures(patterns=(first, second), wrappers=("w",)) + Failures(
        patterns=(second, first), wrappers=("w",)
    )
    assert joined.patterns == (first, second)
    assert joined.wrappers == ("w",)


@pytest.mark.parametrize(
    ("engine", "line", "kind", "figures"),
    [
        # a build without kernels for this GPU, through each layer (KoboldCpp, mistral.rs, vLLM)
        (
            "koboldcpp",
            "ERROR: ggml-cuda was compiled without support for the current GPU architecture.",
            "dependency_error",
            {},
        ),
        (
            "whisper-cpp",
            "CUDA error: no kernel image is available for execution on the device",
            "dependency_error",
            {},
        ),
        (
            "mistralrs",
            'Error: DriverError(CUDA_ERROR_NOT_FOUND, "named symbol not found")',
            "dependency_error",
            {},
        ),
        (
            "tei",
            'Error: DriverError(CUDA_ERROR_NO_BINARY_FOR_GPU, "no binary for GPU")',
            "dependency_error",
            {},
        ),
        ("vllm", "RuntimeError: HIP error: invalid device function", "dependency_error", {}),
        # cudarc's driver errors and its libraries
        ("mistralrs", 'Error: DriverError(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")', "gpu_oom", {}),
        (
            "tei",
            'Error: DriverError(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")',
            "driver_missing",
            {},
        ),
        (
            "mistralrs",
            "thread 'main' panicked at cudarc/src/lib.rs:98:5: "
            'Unable to dynamically load the "cuda" shared library',
            "driver_missing",
            {"missing": "cuda"},
        ),
        (
            "dynamo",
            'Unable to dynamically load the "nccl" shared library - searched for: ["libnccl.so"]',
            "dependency_error",
            {"missing": "nccl"},
        ),
        # the architectures a registry refuses (TensorRT-LLM's two loaders), a tokenizer of another
        # transformers, a config.json without model_type (mlx-lm), an old loader's missing tensor
        (
            "trtllm",
            "ValueError: Unknown architecture for AutoModelForCausalLM: FooForCausalLM",
            "unsupported_architecture",
            {},
        ),
        (
            "dynamo",
            "NotImplementedError: The given huggingface model architecture Bar is not supported in TRT-LLM "
            "yet",
            "unsupported_architecture",
            {},
        ),
        (
            "tgi",
            "ValueError: Non-consecutive added token '<pad>' found. Should have index 50 but has index 3 in "
            "saved vocabulary.",
            "unsupported_architecture",
            {},
        ),
        ("exo", "KeyError: 'model_type'", "unsupported_architecture", {}),
        (
            "max",
            "ValueError: Model architectures ['FooForCausalLM'] are not supported",
            "unsupported_architecture",
            {},
        ),
        ("localai", "error loading model: missing output.weight", "unsupported_architecture", {}),
        # vLLM's config reader that found neither format; mistral.rs's file not at the model id
        (
            "xinference",
            "ValueError: No supported config format found in org/missing-model",
            "model_not_found",
            {},
        ),
        ("mistralrs", 'File "config.json" not found at model id "org/model"', "model_not_found", {}),
        # holdout5's: the supervisors' own words (Lemonade, Docker Model Runner, Xinference)
        (
            "lemonade",
            "[Error] (Router) Argument '--ctx-size' is managed by Lemonade and cannot be overridden.",
            "bad_flag",
            {"flag": "--ctx-size"},
        ),
        (
            "lemonade",
            "[Server ERROR] Failed to load model: Download validation failed. Some files are incomplete or "
            "missing. Run the command again to resume.",
            "corrupt_model",
            {},
        ),
        (
            "docker-model-runner",
            "preload failed: status=500 body=failed to get args for llama.cpp: GGUF file required by "
            "llama.cpp backend",
            "unsupported_architecture",
            {},
        ),
        (
            "xinference",
            "RuntimeError: Failed to launch model, detail: [address=0.0.0.0:1234, pid=7] [Errno 2] No such "
            "file or directory",
            "model_not_found",
            {},
        ),
        # llama.cpp's projector, CPU backend and split files; Vulkan's allocation with its size
        (
            "docker-model-runner",
            "clip_init: load_hparams: unknown projector type: foo",
            "unsupported_architecture",
            {},
        ),
        (
            "llamacpp",
            "llama_model_load: error loading model: make_cpu_buft_list: no CPU backend found",
            "dependency_error",
            {},
        ),
        (
            "llamacpp",
            "error loading model: illegal split file idx: 1 (file: /m/x-00002-of-00002.gguf), model must be "
            "loaded with the first split",
            "other",
            {},
        ),
        (
            "llamacpp",
            "ggml_vulkan: Device memory allocation of size 1048576 failed.",
            "gpu_oom",
            {"requested": Memory(value=1048576, unit="B")},
        ),
        # whisper.cpp's loader; candle's tensor and hf-hub's refusal (TEI, mistral.rs)
        (
            "whisper-cpp",
            "whisper_init_from_file_with_params_no_state: failed to open '/m/x.bin'",
            "model_not_found",
            {},
        ),
        (
            "tei",
            "Could not start Candle backend: cannot find tensor bert.pooler.weight",
            "unsupported_architecture",
            {},
        ),
        (
            "mistralrs",
            'Could not get file "config.json" from API: RequestError(Status(401, Response[status: 401]))',
            "gated_or_auth",
            {},
        ),
        # transformers' config that is no JSON, any file a repository lacks, a registry keyed by class
        (
            "vllm",
            "OSError: It looks like the config file at '/m/config.json' is not a valid JSON file.",
            "corrupt_model",
            {},
        ),
        ("vllm", "OSError: /m does not appear to have a file named tokenizer.model.", "model_not_found", {}),
        ("lmdeploy", "KeyError: 'FooForConditionalGeneration'", "unsupported_architecture", {}),
        # SGLang's own ports, ExLlamaV2's extension, TensorRT-LLM's engine config of another release
        (
            "sglang",
            "ValueError: rpc_port at 31000 is not available in 30 seconds.",
            "port_in_use",
            {"port": 31000},
        ),
        ("tabbyapi", "NameError: name 'exllamav2_ext' is not defined", "dependency_error", {}),
        (
            "trtllm",
            "Internal: unexpected error when creating modelInstanceState: "
            "[json.exception.out_of_range.403] key 'x' not found",
            "corrupt_model",
            {},
        ),
        # holdout6's: Docker's port allocator, and a cause after `failed to start container X:`
        (
            "localai",
            "docker: Error response from daemon: driver failed programming external connectivity on "
            "endpoint x (ab12): Bind for 0.0.0.0:9090 failed: port is already allocated.",
            "port_in_use",
            {"port": 9090, "address": "0.0.0.0"},
        ),
        (
            "docker-model-runner",
            "Error: failed to start container x: listen tcp4 127.0.0.1:7000: bind: address already in use",
            "port_in_use",
            {"port": 7000, "address": "127.0.0.1"},
        ),
        # the driver older than the PTX; kernels for no arch of this GPU; NCCL's communicator
        (
            "mistralrs",
            'Error: DriverError(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "the provided PTX ...")',
            "driver_missing",
            {},
        ),
        (
            "koboldcpp",
            "x.cu:51: ERROR: CUDA kernel foo has no device code compatible with CUDA arch 600.",
            "dependency_error",
            {},
        ),
        (
            "ollama",
            "rocBLAS error: Could not initialize Tensile host: No devices found",
            "dependency_error",
            {},
        ),
        (
            "vllm",
            "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
            "other",
            {},
        ),
        # the loader: symbol versions, a library named missing in other words
        (
            "ollama",
            "/bin/x: /lib64/libc.so.6: version `GLIBC_2.34' not found (required by /bin/x)",
            "dependency_error",
            {},
        ),
        (
            "ollama",
            'msg="failed to initialize MLX: libfoo.dylib not found"',
            "dependency_error",
            {"missing": "libfoo.dylib"},
        ),
        ("lemonade", "Cannot find libs/bar.dll in lib folder", "dependency_error", {"missing": "bar.dll"}),
        (
            "xinference",
            "Failed to import diffusers.pipelines.x because of the following error",
            "dependency_error",
            {},
        ),
        # a backend's buffer with its size; a model's name not found; TabbyML's allocation words
        (
            "llamacpp",
            "ggml_backend_metal_buffer_from_ptr: error: failed to allocate buffer, size =   512.00 MiB",
            "gpu_oom",
            {"requested": Memory(value=512.0, unit="MiB")},
        ),
        (
            "lemonade",
            "(FLM) [ERROR]  Model not found: foo; Please check with `flm list`",
            "model_not_found",
            {},
        ),
        # the engines' own: Ollama's origins, vLLM's context over the model's and its swap, TGI's
        # prefill, llamafile's GPU module, stable-diffusion.cpp under Lemonade
        ("ollama", "panic: bad origin: origins must contain '*' or include http://", "bad_flag", {}),
        (
            "vllm",
            "ValueError: User-specified max_model_len (8192) is greater than the derived max_model_len "
            "(max_position_embeddings=4096 or model_max_length=None in model's config.json).",
            "bad_flag",
            {"max_model_len": 8192},
        ),
        (
            "vllm",
            "ValueError: Too large swap space. 8.00 GiB out of the 15.50 GiB total CPU memory is allocated",
            "cpu_oom",
            {"requested": Memory(value=8.0, unit="GiB"), "total": Memory(value=15.5, unit="GiB")},
        ),
        (
            "tgi",
            "RuntimeError: Not enough memory to handle 8192 prefill tokens. You need to decrease",
            "gpu_oom",
            {},
        ),
        (
            "llamafile",
            "fatal error: support for --gpu amd was explicitly requested, but it wasn't available",
            "dependency_error",
            {},
        ),
        (
            "lemonade",
            "[ERROR] stable-diffusion.cpp:525  - get sd version from file failed: '/m/x.pth'",
            "unsupported_architecture",
            {},
        ),
        # an exit code of 128 + n (LM Studio, Docker) and the faults Python reports
        (
            "lmstudio",
            "(Exit code: 132). Please check settings and try loading the model again.",
            "other",
            {"signal": "SIGILL"},
        ),
        ("docker-model-runner", "llama-server exited with code 132", "other", {"signal": "SIGILL"}),
    ],
)
def test_the_runtimes_wordings(engine: str, line: str, kind: str, figures: dict[str, object]) -> None:
    failure = classify_failure(engine, line)
    assert failure.kind == kind
    assert failure.cause_lines == (line,)
    for name, value in figures.items():
        assert getattr(failure.figures, name) == value


@pytest.mark.parametrize(
    ("line", "signal"),
    [
        ("model-runner-1 exited with code 137", "SIGKILL"),
        ("(Exit code: 139). Please check settings and try loading the model again.", "SIGSEGV"),
        ("Exit code: 134", "SIGABRT"),
        (
            "subprocess.CalledProcessError: Command '['llama-server']' died with <Signals.SIGBUS: 7>.",
            "SIGBUS",
        ),
        ("Fatal Python error: Segmentation fault", "SIGSEGV"),
        ("Windows fatal exception: access violation", "SIGSEGV"),
        ("OSError: exception: access violation reading 0x0000000000000010", "SIGSEGV"),
        ("[ERROR] llama-server process has terminated with exit code: -1073740791", "SIGABRT"),
        ("zsh: abort      ./llama-server -m x.gguf", "SIGABRT"),
        ("./run.sh: line 38: 4242 Abort trap: 6", "SIGABRT"),
    ],
)
def test_an_ending_stated_as_an_exit_code_or_a_fault(line: str, signal: str) -> None:
    failure = classify_failure("koboldcpp", f"loading model\n{line}")
    assert failure.kind == "killed"
    assert failure.cause_lines == (line,)
    assert failure.figures.signal == signal


def test_a_bare_exception_and_a_journald_prefix_are_read_as_statements() -> None:
    # `Exception: ...` raised as is; journald's prefix before `Error: ...`; a message that a
    # worker's traceback header follows on its line
    assert classify_failure("sglang", "Exception: Capture cuda graph failed: boom").cause_lines == (
        "Exception: Capture cuda graph failed: boom",
    )
    line = "nov 02 10:34:04 host ollama[2]: Error: could not create directory mkdir /x: read-only"
    assert classify_failure("ollama", line).cause_lines == (line,)
    worker = (
        "(W pid=2) ERROR 08-23 08:25:25 w.py:226] Exception in w: boom, Traceback (most recent call last):"
    )
    assert classify_failure("vllm", worker).cause_lines == (worker,)
    assert classify_failure("vllm", "Traceback (most recent call last):").kind == "exited"


def test_an_exit_code_below_128_plus_a_signal_is_no_ending() -> None:
    # exit code 1 (or 13, 1370) says nothing of a signal
    for line in ("(Exit code: 1). Please check settings", "exited with code 13", "exit code 1370"):
        assert classify_failure("lmstudio", line).figures.signal is None


def test_a_cause_beats_the_exit_code_it_ends_with() -> None:
    log = "CUDA error: out of memory\n  current device: 0, in function x at a.cu:1\nexited with code 134"
    failure = classify_failure("docker-model-runner", log)
    assert failure.kind == "gpu_oom"
    assert "exited with code 134" not in failure.cause_lines
    # how it ended stays a figure of the failure the cause decided
    assert failure.figures.signal == "SIGABRT"


def test_a_library_file_not_found_is_no_model_not_found() -> None:
    # KoboldCpp's BLAS fallback warning before the real cause
    log = (
        "Warning: OpenBLAS library file not found. Non-BLAS library will be used.\n"
        "OSError: /opt/k/koboldcpp.so: undefined symbol: ggml_foo"
    )
    failure = classify_failure("koboldcpp", log)
    assert failure.kind == "dependency_error"
    assert failure.cause_lines == ("OSError: /opt/k/koboldcpp.so: undefined symbol: ggml_foo",)
    assert classify_failure("llamacpp", "error: model file not found").kind == "model_not_found"


def test_the_supervisors_wrappers_only_carry_the_cause() -> None:
    # Lemonade's guesses after a runner's exit, KoboldCpp's line after a failed load
    guesses = (
        "[ERROR] This usually means:\n  - Missing required drivers or dependencies\n  - Incompatible model"
    )
    assert classify_failure("lemonade", guesses).kind == "exited"
    assert classify_failure("koboldcpp", "Error: Could not load text model: D:\\m\\x.gguf").kind == "exited"


def test_llama_servers_load_failure_lines_only_wrap_the_cause() -> None:
    wrappers = (
        "llama_init_from_gpt_params: error: failed to load model '/m/x.gguf'\n"
        '{"timestamp":1,"level":"ERROR","function":"load_model","line":1,"message":"unable to load model",'
        '"model":"/m/x.gguf"}'
    )
    assert classify_failure("llamacpp", wrappers).kind == "exited"
    failure = classify_failure(
        "llamacpp", "gguf_init_from_file: invalid magic characters 'abcd'\n" + wrappers
    )
    assert failure.kind == "corrupt_model"


def test_a_traceback_file_line_is_still_no_cause() -> None:
    log = 'Traceback (most recent call last):\n  File "x.py", line 3, in <module>\nValueError: boom'
    assert classify_failure("vllm", log).cause_lines == ("ValueError: boom",)
