"""Failure messages of the layers the engines are built on, as :class:`Failures` an engine's file
adds after its own. Each regex is searched in one log line; its named groups are the figures
(``enginespec.failures.FailureFigures``). The layers are engine-agnostic: any engine whose log
passes through them (including engines not yet described here) is read the same way.

The argument parsers (Python's argparse, Rust's clap, Go's pflag/cobra, llama.cpp's common
arguments), the sockets layer (CPython's asyncio and socket, uvicorn, Rust's std, Go's net, Node,
PyTorch's TCPStore, cpp-httplib as llama-server and llamafile report it), CUDA/HIP/PyTorch
(out of memory, no device, no driver, no kernel for this GPU), the dynamic loader (a driver
library missing versus a runtime library missing), Hugging Face's hub and transformers,
llama.cpp's GGML/GGUF loader (llama-server, llama-cpp-python, Ollama's runner, KoboldCpp and
llamafile all print it), the operating system (the OOM killer, a host allocation, an instruction
the CPU lacks), Python's importer, and how a process ended (a signal a parent or a shell
reports). And the answers of llama-server's /health, which Ollama's runners give too.

The order of the composites (``PYTHON_SERVER``, ``LLAMA_CPP``) is the precedence of a cause over
its consequence: what the hardware and the loader say (out of memory, no driver library) comes
before the import error or the load failure it causes, and a statement that a process was
killed comes last (role ``ending``: it decides only when nothing else does)."""

from __future__ import annotations

from pathlib import Path

from enginespec.definition.records import HealthRule
from enginespec.engines._gpulayers import (
    CUDA_DRIVER,
    CUDA_DRIVER_API,
    GPU_KERNELS,
    TORCH,
)
from enginespec.failures import FailurePattern, Failures

P = FailurePattern


#: argparse (CPython 3.11 Lib/argparse.py, checked: ArgumentParser.error `%(prog)s: error:
#: %(message)s` after a usage; `unrecognized arguments: %s`, `the following arguments are required:
#: %s`, `ambiguous option: %(option)s could match ...`, `invalid choice: %(value)r ...`, `one of the
#: arguments %s is required`; ArgumentError's `argument %s: ...`).
ARGPARSE = Failures(
    patterns=(
        P(kind="bad_flag", pattern=r"(?:^|\s)\S+: error: unrecognized arguments: (?P<flag>\S+)"),
        P(kind="bad_flag", pattern=r"(?:^|\s)\S+: error: argument (?P<flag>-[^\s/:]+)"),
        P(
            kind="bad_flag",
            pattern=r"(?:^|\s)\S+: error: (?:unrecognized arguments|argument \S+|the following arguments "
            r"are required|ambiguous option|invalid choice|one of the arguments)",
        ),
    )
)

#: clap, Rust's argument parser (TGI's launcher, mistral.rs): clap_builder/src/error/format.rs
#: (clap 4) `error: unexpected argument '--x' found`, `error: invalid value 'v' for '--x <X>'`,
#: `error: a value is required for '--x <X>' but none was supplied` (from memory of clap 4's
#: source, not checked here; the first is in the unseen corpus's TGI logs); clap 2/3 `error:
#: Found argument '--x' which wasn't expected, or isn't valid in this context` (found quoted in
#: clap 2/3 programs' tests by the code search, not in clap's own source).
CLAP = Failures(
    patterns=(
        # also with the typographic quotes (U+2018, U+2019) a forum or an editor retypes, seen in
        # logs only: https://github.com/huggingface/text-generation-inference/issues/1903
        P(
            kind="bad_flag",
            pattern=r"error: unexpected argument ['\u2018](?P<flag>[^'\u2018\u2019\s]+)[^'\u2019]*"
            r"['\u2019] found",
        ),
        P(kind="bad_flag", pattern=r"error: invalid value '[^']*' for '(?P<flag>-[^'\s]+)"),
        P(kind="bad_flag", pattern=r"error: a value is required for '(?P<flag>-[^'\s]+)"),
        P(kind="bad_flag", pattern=r"error: Found argument '(?P<flag>[^']+)' which wasn't expected"),
    )
)

#: Go's pflag under cobra (Ollama's CLI): spf13/pflag flag.go `unknown flag: --%s`,
#: `unknown shorthand flag: %q in -%s` (the latter found in pflag's flag.go by the code search).
GO_FLAGS = Failures(
    patterns=(P(kind="bad_flag", pattern=r"\bunknown (?:shorthand )?flag: ['\"]?(?P<flag>-{0,2}[^'\"\s]+)"),)
)

#: llama.cpp's common argument parser (common/arg.cpp common_params_parse at llama.cpp 4227c9be:
#: `error: invalid argument: %s`, `error while handling argument "%s": %s`; older builds' `error:
#: unknown argument: %s`, seen in logs only: https://github.com/meta-llama/llama/issues/308), and
#: llamafile's, whose source no store here has: seen in logs only (v0.9 `error: unknown argument:
#: %s`, `error: invalid parameter for argument: %s`, https://github.com/mozilla-ai/llamafile/issues/673;
#: its v2 server `%s: %s unknown argument`, https://github.com/mozilla-ai/llamafile/issues/759).
LLAMA_ARGS = Failures(
    patterns=(
        P(
            kind="bad_flag",
            pattern=r"error: (?:invalid|unknown) argument: (?P<flag>\S+)",
            hint="{flag} is no argument of this build: remove it, or use a newer build (see --help)",
        ),
        P(kind="bad_flag", pattern=r"error while handling argument \"(?P<flag>[^\"]+)\""),
        P(kind="bad_flag", pattern=r"error: invalid parameter for argument: (?P<flag>\S+)"),
        P(kind="bad_flag", pattern=r"^\S+: (?P<flag>-{1,2}[\w-]+) unknown argument"),
    )
)

_PORT_HINT = "port {port} is taken: choose another port or stop the process holding it"
_NO_ADDRESS_HINT = "{address} is no address of this host: bind 0.0.0.0, 127.0.0.1 or one of its own"
_PRIVILEGED_HINT = "binding port {port} is not allowed for this user: use a port above 1023"
_WINDOWS_DENIED_HINT = (
    "Windows refuses this port (reserved: `netsh interface ipv4 show excludedportrange protocol=tcp`, "
    "or held exclusively by another program): choose another port"
)

#: Binding the engine's port, through every layer that reports it:
#: CPython's asyncio (Lib/asyncio/base_events.py create_server, checked in 3.11: `error while
#: attempting to bind on address %r: %s` with the errno, what uvicorn 0.35 logs; the strerror is localised on
#: Windows), CPython's socket (`OSError: [Errno 98] Address already in use`, macOS errno 48,
#: Windows `[WinError 10048]`), Rust's std (library/std/src/io/error.rs Display, found by the code
#: search: `write!(fmt, "{detail} (os error {code})")`, so `Address already in use (os error 98)`), Go's net
#: (src/net/net.go OpError.Error: `listen tcp 127.0.0.1:11434:
#: bind: address already in use`, the reason localised on Windows: `Only one usage of each socket
#: address ...`; Go's source not checked here), Node (`listen EADDRINUSE: address already in use
#: :::8080`, seen in logs only), PyTorch's TCPStore (torch/csrc/distributed/c10d/socket.cpp,
#: found by the code search: `The server socket has failed to bind to {} {}.` with the address
#: and `(errno: 98 - Address already in use)`), and cpp-httplib as llama-server reports it
#: (tools/server/server.cpp at llama.cpp 4227c9be: `couldn't bind HTTP server socket, hostname:
#: %s, port: %d`; httplib gives no errno: a port in use is by far the usual cause) and llamafile
#: 0.6 (`couldn't bind to server socket: hostname=%s port=%d`, seen in logs only:
#: https://github.com/mozilla-ai/llamafile/issues/96).
SOCKETS = Failures(
    patterns=(
        P(
            kind="port_in_use",
            pattern=r"error while attempting to bind on address \('(?P<host>[^']*)', (?P<port>\d+)"
            r"(?:, \d+, \d+)?\): (?:address already in use|only one usage of each socket address)",
            hint=_PORT_HINT,
        ),
        P(
            kind="port_in_use",
            pattern=r"\[Errno (?:98|48|10048)\] error while attempting to bind on address "
            r"\('(?P<address>[^']*)', (?P<port>\d+)",
            hint=_PORT_HINT,
        ),
        P(
            kind="port_in_use",
            pattern=r"\[(?:Errno|WinError) (?:98|48|10048)\] (?:[Aa]ddress already in use|Only one)",
        ),
        P(kind="port_in_use", pattern=r"[Aa]ddress already in use \(os error (?:98|48|10048)\)"),
        P(
            kind="port_in_use",
            pattern=r"\blisten (?:tcp[46]?|unix) \[?(?P<address>[^\s\]]*?)\]?:(?P<port>\d+): bind: "
            r"(?!permission denied|cannot assign requested address|can't assign requested address|An attempt "
            r"was made)",
            hint=_PORT_HINT,
        ),
        P(
            kind="port_in_use",
            pattern=r"listen EADDRINUSE: address already in use \[?(?P<address>[^\s\]]*?)\]?:(?P<port>\d+)",
            hint=_PORT_HINT,
        ),
        P(
            kind="port_in_use",
            pattern=r"failed to bind to \[?(?P<address>[^\s\]]*?)\]?:(?P<port>\d+) "
            r"\(errno: (?:98|48|10048)\b",
            hint="port {port} (the distributed rendezvous, MASTER_PORT) is taken: choose another one "
            "or stop the process holding it",
        ),
        P(
            kind="port_in_use",
            pattern=r"couldn't bind (?:HTTP server socket|to server socket)[,:] "
            r"hostname[:=] ?(?P<address>[^\s,]+),? "
            r"port[:=] ?(?P<port>\d+)",
            hint=_PORT_HINT,
        ),
        P(kind="port_in_use", pattern=r"\bEADDRINUSE\b|\bAddrInUse\b"),
        # Docker's port allocator (moby's portallocator, from memory, not checked here: `Bind for
        # %s:%d failed: port is already allocated`): a published port another container or
        # process holds
        P(
            kind="port_in_use",
            pattern=r"Bind for \[?(?P<address>[^\s\]]*?)\]?:(?P<port>\d+) failed: port is already allocated",
            hint=_PORT_HINT,
        ),
        P(
            kind="other",
            pattern=r"\[Errno (?:99|49|10049)\] error while attempting to bind on address "
            r"\('(?P<address>[^']*)', (?P<port>\d+)",
            hint=_NO_ADDRESS_HINT,
        ),
        P(
            kind="other",
            pattern=r"\blisten tcp[46]? \[?(?P<address>[^\s\]]*?)\]?:(?P<port>\d+): bind: "
            r"(?:cannot|can't) assign requested address",
            hint=_NO_ADDRESS_HINT,
        ),
        P(
            kind="other",
            pattern=r"\[Errno 13\] error while attempting to bind on address "
            r"\('(?P<address>[^']*)', (?P<port>\d+)",
            hint=_PRIVILEGED_HINT,
        ),
        P(
            kind="other",
            pattern=r"\blisten tcp[46]? \[?(?P<address>[^\s\]]*?)\]?:(?P<port>\d+): bind: permission denied",
            hint=_PRIVILEGED_HINT,
        ),
        # Windows' WSAEACCES (10013) as Go's net and CPython word it: a port Windows keeps for
        # itself (an excluded range of Hyper-V or WinNAT) or one held exclusively by another
        P(
            kind="other",
            pattern=r"\blisten tcp[46]? \[?(?P<address>[^\s\]]*?)\]?:(?P<port>\d+): bind: "
            r"An attempt was made to access a socket in a way forbidden",
            hint=_WINDOWS_DENIED_HINT,
        ),
        P(kind="other", pattern=r"\[WinError 10013\]", hint=_WINDOWS_DENIED_HINT),
    )
)

#: Rust's model loading: candle's VarBuilder (candle-nn var_builder.rs, from memory of 0.8, not
#: checked here: Error::CannotFindTensor `cannot find tensor {path}`: the weights do not have a
#: tensor of the name this implementation's architecture needs) and the hf-hub crate's download
#: failures as mistral.rs prints them (mistralrs-core src/pipeline/macros.rs get_paths!, found
#: by the code search: `Could not get file {file:?} from API: {e:?}`, with hf-hub's
#: `RequestError(Status(403, ...))`).
RUST_MODELS = Failures(
    patterns=(
        P(
            kind="unsupported_architecture",
            pattern=r"\bcannot find tensor [\w.]+",
            hint="the model's weights are not named as this engine's implementation of its architecture "
            "needs (another variant, or an architecture it does not support)",
        ),
        P(kind="gated_or_auth", pattern=r"RequestError\(Status\((?:401|403),"),
        P(kind="model_not_found", pattern=r"RequestError\(Status\(404,"),
    )
)

#: The dynamic loader: glibc's dlerror (elf/dl-load.c _dl_map_object, found by the code search:
#: `_dl_signal_error (errno, name, NULL, N_("cannot open shared object file"))`, read as
#: `libcuda.so.1: cannot open shared object file: No such file or directory`), Python's ctypes on
#: Windows (`Could not find module '...\\nvcuda.dll'`: not found by the code search, seen in
#: logs), PyInstaller's pyimod03_ctypes PyInstallerImportError (found by the code search: `Failed
#: to load dynlib/dll %r. Most likely this dynlib/dll was not found when the application was
#: frozen.`, KoboldCpp's builds). A library of the GPU
#: driver (libcuda, libnvidia-ml, nvcuda.dll: installed with the driver, not with any Python
#: package) missing is ``driver_missing``; any other library (the CUDA runtime libcudart, cuBLAS,
#: a wheel's own) ``dependency_error``.
LOADER = Failures(
    patterns=(
        P(
            kind="driver_missing",
            pattern=r"(?P<missing>\b(?:libcuda|libnvidia-ml)\.so(?:\.\d+)*)"
            r"(?:: cannot open shared object file| not found\b)",
            hint="{missing} comes with the GPU driver: install the driver, or run where it is visible "
            "(in a container: the NVIDIA container toolkit)",
        ),
        P(
            kind="driver_missing",
            pattern=r"Could not find module '(?:[^']*[\\/])?(?P<missing>nvcuda\.dll)'",
            hint="{missing} comes with the GPU driver: install the NVIDIA driver",
        ),
        P(
            kind="dependency_error",
            pattern=r"(?P<missing>\blib[\w.+-]*?\.so(?:\.\d+)*): cannot open shared object file",
            hint="{missing} is missing: install the runtime the build links against, or a build for this "
            "system",
        ),
        # a library named missing in other words (Ollama's MLX runner `failed to initialize MLX:
        # libmlxc.dylib not found`, onnxruntime-genai's `Cannot find libs/onnxruntime.dll in lib
        # folder`: seen in logs only, https://github.com/ollama/ollama/issues/15471 and
        # https://github.com/lemonade-sdk/lemonade/issues/434)
        P(
            kind="dependency_error",
            pattern=r"(?<![\w.+-])(?P<missing>[\w.+-]+\.(?:dylib|dll|so(?:\.\d+)*)) not found\b|"
            r"Cannot find (?:[^\s'\"]*[\\/])?(?P<library>[\w.+-]+\.(?:dylib|dll|so(?:\.\d+)*))\b",
            hint="a library the program loads is missing: install the runtime it needs, or a complete build",
        ),
        # the loader's symbol versions (glibc's `version `GLIBC_2.27' not found (required by X)`):
        # a build for a newer C or C++ runtime than this system has
        P(
            kind="dependency_error",
            pattern=r": version `[^']+' not found \(required by ",
            hint="this system's C/C++ runtime is older than the build needs: a newer system, or a build "
            "made for it",
        ),
        P(
            kind="dependency_error",
            pattern=r"Failed to load dynlib/dll '(?:[^']*[\\/])?"
            r"(?P<missing>[^'\\/]+\.(?:dll|dylib|so(?:\.\d+)*))'",
        ),
        P(
            kind="dependency_error",
            pattern=r"Could not find module '(?:[^']*[\\/])?(?P<missing>[^'\\/]+\.dll)'",
        ),
        # Windows' loader: STATUS_DLL_NOT_FOUND (0xC0000135 in the SDK's ntstatus.h, from memory,
        # not checked here) as the exit status Go's os/exec reports (Ollama's runner), unsigned
        # or signed; seen in logs only: https://github.com/ollama/ollama/issues/5669
        P(
            kind="dependency_error",
            pattern=r"\bexit status (?:0xc0000135|3221225781)\b|(?:^|\s)-1073741515\b",
            hint="a DLL the program links was not found (STATUS_DLL_NOT_FOUND): install the runtime it "
            "needs (the Visual C++ redistributable, the GPU runtime) or a build for this system",
        ),
    )
)

#: huggingface_hub (checked in 0.34.0: utils/_http.py hf_raise_for_status `Cannot access gated
#: repo for url %s.`, `Repository Not Found for url: %s.`; errors.py GatedRepoError,
#: RepositoryNotFoundError; utils/_validators.py HFValidationError `Repo id must be in the form
#: 'repo_name' or 'namespace/repo_name'`, `Repo id must use alphanumeric chars ...`, the validator
#: transformers and the engines hit when a local path that does not exist is taken for a repo
#: id; hf_api.py `Invalid user token.`) and transformers (checked in 4.55.0:
#: dynamic_module_utils.py `The repository %s contains custom code which must be executed ...
#: trust_remote_code=True`; models/auto/configuration_auto.py `... has model type `%s` but
#: Transformers does not recognize this architecture`; `does not appear to have a file named`).
#: Seen in logs only, from older releases: transformers' `Loading X requires you to execute the
#: configuration file in that repo` (https://github.com/vllm-project/vllm/issues/6215) and `is
#: gated. You must be authenticated` (https://github.com/huggingface/optimum-neuron/issues/535).
HUGGINGFACE = Failures(
    patterns=(
        P(
            kind="trust_remote_code",
            pattern=r"contains custom code which must be executed|requires you to execute the "
            r"(?:configuration|modeling) file in that repo|trust_remote_code=True",
            hint="the model ships its own code: start with --trust-remote-code if you trust it",
        ),
        P(kind="gated_or_auth", pattern=r"GatedRepoError|Cannot access gated repo|is gated\. You must be"),
        # requests' Response.raise_for_status (`%s Client Error: %s for url: %s`, found by the code
        # search): `401 Client Error: Unauthorized for url: ...`; huggingface_hub's `Invalid user token.`
        P(
            kind="gated_or_auth",
            pattern=r"(?:401|403) Client Error.*(?:Unauthorized|Forbidden)|Invalid user token",
        ),
        P(kind="model_not_found", pattern=r"HFValidationError: Repo id must be"),
        P(kind="model_not_found", pattern=r"RepositoryNotFoundError|Repository Not Found for url"),
        P(kind="model_not_found", pattern=r"does not appear to have a file named \S+"),
        P(
            kind="model_not_found",
            pattern=r"No such file or directory: '[^']*(?:config\.json|\.safetensors|\.gguf)'",
        ),
        P(
            kind="unsupported_architecture",
            pattern=r"Transformers does not recognize this architecture|does not recognize this "
            r"architecture|model type `[^`]+` but Transformers",
        ),
        # gguf-py's GGMLQuantizationType (an IntEnum) given a type id it does not know: Python's
        # enum says `%r is not a valid %s` (CPython 3.11.7, checked by running it); the GGUF was
        # made by a newer llama.cpp than the reader (seen in logs only:
        # https://github.com/dphnAI/sonar/issues/448)
        P(
            kind="unsupported_architecture",
            pattern=r"(?<!\d)\d+ is not a valid GGMLQuantizationType",
            hint="the GGUF uses a quantization type newer than this engine's GGUF reader: upgrade the "
            "engine (and its gguf package) or use another quantization",
        ),
        # transformers' configuration_utils.py _get_config_dict (from memory of 4.4x, not checked
        # here): `It looks like the config file at '{file}' is not a valid JSON file.` (an empty or
        # truncated config.json, an error page saved as one)
        P(kind="corrupt_model", pattern=r"It looks like the config file at '[^']*' is not a valid JSON file"),
        # a model registry looked up by the architecture's class name the config gives, and the name
        # not in it (LMDeploy's TurboMind: `KeyError: 'Qwen2ForCausalLM'`, seen in logs only:
        # https://github.com/InternLM/lmdeploy/issues/1963)
        P(
            kind="unsupported_architecture",
            pattern=r"KeyError: '[A-Z]\w*(?:ForCausalLM|ForConditionalGeneration|LMHeadModel)'",
            hint="this engine release has no implementation of the model's architecture: upgrade, or use "
            "another engine",
        ),
        # transformers' slow tokenizer load (tokenization_utils_base.py _from_pretrained, found by
        # the exact-string search: `Non-consecutive added token '{token}' found. Should have index
        # {len(tokenizer)} but has index {index} in saved vocabulary.`): a tokenizer saved by
        # another transformers release than the one reading it
        P(
            kind="unsupported_architecture",
            pattern=r"Non-consecutive added token '.*' found",
            hint="the model's tokenizer was saved by another transformers release: upgrade the engine (or "
            "its transformers), or use a tokenizer saved for it",
        ),
        # a model registry's refusal of the architecture the config names, in the words the engines
        # share: TensorRT-LLM's `Unknown architecture for AutoModelForCausalLM: X`
        # (tensorrt_llm/_torch/models/modeling_auto.py) and `The given huggingface model
        # architecture X is not supported in TRT-LLM yet` (tensorrt_llm/models/automodel.py), both
        # found by the exact-string search; SGLang's and vLLM's `Model architectures [...] are not
        # supported for now` (their own files)
        P(
            kind="unsupported_architecture",
            pattern=r"\bUnknown architecture for \w+: \w+|"
            r"\b[Mm]odel architectures? \[?[\w'\", ]*\]? (?:is|are) not supported\b",
        ),
        P(
            kind="corrupt_model",
            # safetensors bindings/python/src/lib.rs (0.4): `Error while deserializing header:
            # {e:?}` of SafeTensorError (HeaderTooLarge, InvalidHeaderDeserialization, ...),
            # with or without the exception's name before it
            pattern=r"Error while deserializing header: \w+|HeaderTooLarge|MetadataIncompleteBuffer|"
            r"invalid load key",
        ),
    )
)

#: Python's importer and packaging problems (what CPython 3.11.7 itself prints, checked by running
#: it: `ModuleNotFoundError: No module named 'x'`, `ImportError: cannot import name 'y' from 'x'
#: (path)`, `importlib.metadata.PackageNotFoundError: No package metadata was found for x`, which
#: 3.8 and 3.9 wrote as the name alone; `undefined symbol` (the loader's) of a wheel built against another
#: torch; an
#: incompatible pydantic; a requirement the engine checks). After the loader and the model's
#: own layers: an import error is often the consequence of what they say (mlx-lm imports
#: `mlx_lm.models.<type>` for a model type it does not know).
PYTHON = Failures(
    patterns=(
        P(kind="dependency_error", pattern=r"ModuleNotFoundError: No module named '(?P<missing>[\w.]+)'"),
        P(
            kind="dependency_error",
            pattern=r"ImportError: cannot import name '[^']+' from '(?P<missing>[\w.]+)'",
        ),
        # 3.8 and 3.9 say the name alone; 3.10 on `No package metadata was found for NAME`
        P(
            kind="dependency_error",
            pattern=r"PackageNotFoundError: (?:No package metadata was found for )?(?P<missing>[\w.-]+)",
        ),
        P(kind="dependency_error", pattern=r"(?:ModuleNotFoundError|ImportError): "),
        # transformers' and diffusers' lazy modules (utils/import_utils.py _LazyModule._get_module,
        # from memory: `Failed to import {module} because of the following error (look up to see
        # its traceback):` and the error on the next line)
        P(
            kind="dependency_error",
            pattern=r"Failed to import (?P<missing>[\w.]+) because of the following error",
        ),
        P(kind="dependency_error", pattern=r"undefined symbol: "),
        P(kind="dependency_error", pattern=r"PydanticImportError|pydantic\.errors\.\w*ImportError"),
        P(
            kind="dependency_error",
            pattern=r"requires \S+ (?:>=|==|<)\s?[\d.]+ but|is not installed\. Please install",
        ),
    )
)

#: llama.cpp's loader and backends. Checked with git grep: ggml v0.21.0 (ggml-org/ggml, the
#: upstream of llama.cpp's ggml/): src/gguf.cpp `failed to open GGUF file '%s' (%s)`, `invalid
#: magic characters: '%c%c%c%c'`, `failed to read header`, `failed to read key-value pairs`,
#: `failed to read tensor info`, `number of tensors is %d but must be in [0, %zu]`;
#: src/ggml-cuda/ggml-cuda.cu `allocating %.2f MiB on device %d: cudaMalloc failed: %s`, `CUDA
#: error: %s` then `  current device: %d, in function %s at %s:%d`; src/ggml-alloc.c `failed to
#: allocate %s buffer of size %zu`; src/ggml-metal/ggml-metal-context.m `error: command buffer %d
#: failed with status %d` (5: the command buffer errored); src/ggml-vulkan/ggml-vulkan.cpp
#: `ggml_vulkan: Device memory allocation of size N failed.`. llama.cpp e54d41be (vendored by
#: Ollama v0.12.0): src/llama-model.cpp `unknown model architecture: '%s'`, `unable to allocate
#: %s buffer`; src/llama-model-loader.cpp `wrong number of tensors; expected %d, got %d`,
#: `tensor '%s' not found`, `tensor '%s' has wrong shape`, `tensor '%s' data is not within the
#: file bounds, model is corrupted or incomplete`; src/llama-vocab.cpp `unknown tokenizer: '%s'`;
#: src/llama-mmap.cpp `failed to open %s: %s`; src/llama.cpp `error loading model: %s`. llama.cpp
#: ba1cb19c (Ollama v0.5.7, whose llama/patches/0002-pretokenizer.patch removes it) `unknown
#: pre-tokenizer type: '%s'`. Seen in logs only (in no source checked here): macOS Metal's own
#: `Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)`
#: (https://github.com/mozilla-ai/llamafile/issues/881), Vulkan-Hpp's `ErrorOutOfDeviceMemory`
#: (in no log or source here: kept as the exception's name vk::OutOfDeviceMemoryError that
#: ggml-vulkan.cpp v0.21.0 throws), and the pre-GGUF loader's `unknown (magic, version)
#: combination: %08x, %08x; is this really a GGML file?`
#: (https://github.com/abetlen/llama-cpp-python/issues/902), `invalid magic number`
#: (https://github.com/PromtEngineer/localGPT/issues/438), `has wrong size in model file`
#: (https://github.com/LostRuins/koboldcpp/issues/98).
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
        # ggml_cuda_error's next line: `  current device: 0, in function ... at ggml-cuda.cu:N`
        P(kind="gpu_oom", role="context", pattern=r"current device: (?P<device>\d+)"),
        P(kind="gpu_oom", pattern=r"(?:failed|unable) to allocate (?:CUDA|ROCm|Vulkan|Metal|SYCL)\d* buffer"),
        P(kind="gpu_oom", pattern=r"kIOGPUCommandBufferCallbackErrorOutOfMemory|Insufficient Memory \("),
        # a backend's buffer it could not allocate, with its size (ggml-metal's
        # ggml_backend_metal_buffer_from_ptr `error: failed to allocate buffer, size = %8.2f MiB`,
        # from memory of llama.cpp b2000, not checked here); TabbyML's supervisor's own words for
        # its llama-server's (seen in logs only: https://github.com/TabbyML/tabby/issues/4293)
        P(
            kind="gpu_oom",
            pattern=r"ggml_backend_(?:metal|cuda|vk|sycl)\w*: error: failed to allocate buffer, size = +"
            r"(?P<requested_mib>[\d.]+) MiB|CUDA memory allocation error",
        ),
        P(kind="gpu_oom", pattern=r"ggml_metal\w*: error: command buffer \d+ failed with status 5"),
        P(
            kind="gpu_oom",
            pattern=r"ggml_vulkan: Device memory allocation of size (?P<requested_bytes>\d+) failed|"
            r"ErrorOutOfDeviceMemory|ggml_vulkan: Device memory allocation .* failed",
        ),
        # the CPU backend's buffer (ggml-backend's ggml_backend_cpu_buffer_type_alloc_buffer:
        # `%s: failed to allocate buffer of size %zu`, bytes; not in the ggml checked above, seen in
        # logs only: https://github.com/mozilla-ai/llamafile/issues/541): host memory
        P(
            kind="cpu_oom",
            pattern=r"cpu_buffer_type_alloc_buffer: failed to allocate buffer of size "
            r"(?P<requested_bytes>\d+)",
            hint="the host could not allocate a buffer: a smaller context (-c), model or quantization, or "
            "more RAM",
        ),
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
        # src/llama-model.cpp create_tensor: a tensor this build's graph of the architecture
        # needs is not in the file: a model of a newer layout than the build (phi-2 on llamafile 0.6)
        P(
            kind="unsupported_architecture",
            pattern=r"create_tensor: tensor '[^']*' not found",
            hint="the model's layout is newer than this build: use a newer build",
        ),
        # the same before GGUF, when the file is of another family than the loader's (seen in logs
        # only: `error loading model: missing tok_embeddings.weight` for a gpt_bigcode file,
        # https://github.com/mudler/LocalAI/issues/568)
        P(
            kind="unsupported_architecture",
            pattern=r"error loading model: missing [\w.]+\.weight\b|tensor '[^']*' is missing from model",
            hint="the model is of an architecture this build does not read: use a build (or engine) made "
            "for it",
        ),
        # the multimodal projector's type this build's mtmd does not know (the vendored llama.cpp of
        # llama-cpp-python 0.3.35: tools/mtmd/clip.cpp `%s: unknown projector type: %s`, its models'
        # GGML_ABORT("... unknown projector type"))
        P(
            kind="unsupported_architecture",
            pattern=r"(?i:unknown projector type)",
            hint="this build does not know the model's multimodal projector: use a newer llama.cpp",
        ),
        # the same release: src/llama-model.cpp and llama-model-loader.cpp `no CPU backend found` (the
        # CPU backend's library of a build with loadable backends did not load); and a split GGUF
        # given by another part than its first (`illegal split file idx: %d (file: %s), model must be
        # loaded with the first split`)
        P(
            kind="dependency_error",
            pattern=r"\bno CPU backend found\b",
            hint="llama.cpp's CPU backend library (libggml-cpu-*) did not load: install a build with the "
            "backend for this CPU, or put its libraries beside the program",
        ),
        P(
            kind="other",
            pattern=r"illegal split file idx: \d+ \(file: .*\), model must be loaded with the first split",
            hint="give the first part of the split model (its -00001-of-N file)",
        ),
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
        # llama_file's read past the end (src/llama-mmap.cpp `unexpectedly reached end of file`,
        # from memory, not checked here; seen in logs only:
        # https://github.com/wombyz/gpt4all_langchain_chatbots/issues/9): a truncated file
        P(kind="corrupt_model", pattern=r"unexpectedly reached end of file"),
        P(kind="corrupt_model", pattern=r"has wrong size in model file|tensor '[^']*' has wrong shape"),
        # gguf_init_from_reader (ggml/src/gguf.cpp of the llama.cpp llama-cpp-python 0.3.35 vendors)
        # says "failed to read header" and "number of tensors is N but must be in [0, M]".
        P(kind="corrupt_model", pattern=r"failed to read (?:key-value pairs|tensor info|(?:the )?header)"),
        P(kind="corrupt_model", pattern=r"number of tensors is -?\d+ but must be in \["),
        P(kind="model_not_found", pattern=r"failed to open GGUF file|failed to open '[^']*': No such file"),
        # llama.cpp before GGUF (llama_file: `failed to open %s: %s`)
        P(kind="model_not_found", pattern=r"\bfailed to open \S.*: No such file or directory"),
        # (not a library's file: KoboldCpp's `Warning: OpenBLAS library file not found. Non-BLAS
        # library will be used.` is a fallback, no failure)
        P(
            kind="model_not_found",
            pattern=r"(?:[Mm]odel|(?<!library )file) (?:'[^']*' )?(?:does not exist|not found)\b",
        ),
    )
)

#: What the operating system says of a native process: the kernel's OOM killer (its own
#: `Out of memory: Killed process`, `invoked oom-killer`; systemd's src/core/service.c, found by
#: the code search: `Failed with result '%s'.` with service_result_to_string's `oom-kill`, and `A
#: process of this unit has been killed by the OOM killer`, seen in logs), an allocation that
#: failed on the host, an instruction this CPU lacks (SIGILL; a shell's `Illegal instruction`, Go's
#: `signal: illegal instruction`, Windows' STATUS_ILLEGAL_INSTRUCTION 0xC000001D, which Python
#: reports as `[WinError -1073741795]`).
#: An exit code as a shell, Docker (`exited with code 137`), Kubernetes or LM Studio (`(Exit code:
#: 132)`) reports it: 128 + n is death by signal n (POSIX shells' convention).
_EXIT_CODE = r"\b(?i:exit(?:ed with)? code):? "

SYSTEM = Failures(
    patterns=(
        # Linux mm/oom_kill.c: `Out of memory: Killed process %d (%s)` (v5), `Out of memory: Kill
        # process %d (%s) score %d or sacrifice child` (v3, v4), 2.6's `Out of Memory: Killed
        # process %d (%s).` (found by the code search): all three
        P(kind="cpu_oom", pattern=r"Out of [Mm]emory: Kill(?:ed)? process|invoked oom-killer|\boom-kill:"),
        P(kind="cpu_oom", pattern=r"Failed with result 'oom-kill'|killed by the OOM killer"),
        P(kind="cpu_oom", pattern=r"std::bad_alloc|(?:^|\s)MemoryError\b|Cannot allocate memory"),
        P(
            kind="other",
            pattern=r"(?P<signal>(?i:illegal (?:hardware )?instruction)|0xc000001d|-1073741795|3221225501)|"
            rf"{_EXIT_CODE}(?P<signal_exit_code>132)\b",
            hint="this CPU lacks an instruction the build uses (AVX2, AVX-512): use a build for this CPU",
        ),
    )
)

#: How a process ended, as its parent or a shell states it: Go's os/exec (os/exec_posix.go
#: ProcessState.String, found by the code search: `"signal: " + status.Signal().String()`, then
#: ` (core dumped)`: `signal: killed`, `signal: segmentation fault (core dumped)`; Ollama wraps it as `llama
#: runner
#: process has terminated: signal: ...`), bash's report of a child's death (`Killed`,
#: `Segmentation fault (core dumped)`, `Aborted (core dumped)`). The consequence of a cause the
#: log may state above (role ``ending``): it makes the failure ``killed``, with the signal, only
#: when nothing else is recognised. A SIGKILL is the OOM killer's signal but not only its: the
#: kernel's own message or the cgroup's count says it was (``cpu_oom``).
ENDINGS = Failures(
    patterns=(
        P(
            kind="other",
            role="ending",
            pattern=r"\bsignal: (?P<signal>killed|segmentation fault|aborted|bus error|"
            r"floating point exception|"
            r"terminated|interrupt|hangup)",
            hint="the process was killed by {signal}: SIGKILL is most often the kernel's OOM killer "
            "(dmesg), SIGSEGV and SIGABRT a crash (see the lines before)",
        ),
        P(
            kind="other",
            role="ending",
            pattern=r"(?:^|: line \d+: +\d+ )"
            r"(?P<signal>Killed|Segmentation fault|Aborted|Bus error|Abort trap)"
            r"(?: \(core dumped\)|: \d+)?(?::?\s|:?$)",
            hint="the process was killed by {signal} (see the lines before)",
        ),
        # zsh's report of a child's death (`zsh: abort      ./prog`, `zsh: killed`, `zsh: segmentation
        # fault`, zsh's Src/signames: the signal's lower-case message)
        P(
            kind="other",
            role="ending",
            pattern=r"^zsh: "
            r"(?P<signal>abort|killed|segmentation fault|bus error|illegal hardware instruction)\s",
            hint="the process was killed by {signal} (see the lines before)",
        ),
        # 128 + n as the exit code: SIGABRT, SIGBUS, SIGFPE, SIGKILL, SIGSEGV, SIGTERM
        P(
            kind="other",
            role="ending",
            pattern=rf"{_EXIT_CODE}(?P<signal_exit_code>13[4-79]|143)\b",
            hint="the process was killed by {signal} (see the lines before)",
        ),
        # Python's subprocess (`died with <Signals.SIGKILL: 9>.`, CalledProcessError.__str__ in
        # CPython 3.11 Lib/subprocess.py); faulthandler's `Fatal Python error: Segmentation fault`
        # and `Windows fatal exception: access violation`; ctypes' OSError for a fault in the
        # library it called (`exception: access violation reading 0x...`, Modules/_ctypes/callproc.c
        # SetException, from memory of CPython 3.11, not checked here; KoboldCpp on Windows)
        P(
            kind="other",
            role="ending",
            pattern=r"<Signals\.(?P<signal>SIG[A-Z]+): \d+>|(?:Fatal Python error|Windows fatal exception|"
            r"OSError: exception): (?P<signal_words>Segmentation fault|Aborted|Bus error|access violation)\b",
            hint="the process crashed ({signal}): see the lines before",
        ),
        # Go's os/exec on Windows: a crash's NTSTATUS as the exit status (`exit status
        # 0xc0000005`: an access violation; 0xc0000409: the fail-fast of abort()), as Ollama
        # reports its runner's end, or an exit code printed signed (Lemonade's `process has
        # terminated with exit code: -1073740791`)
        P(
            kind="other",
            role="ending",
            pattern=r"\b(?:exit status|(?i:exit(?:ed with)? code):?) "
            r"(?P<signal>0xc0000005|0xc0000409|3221225477|3221226505|-1073741819|-1073740791)(?![\w-])",
            hint="the process crashed ({signal}): see the lines before",
        ),
    )
)

#: MLX's nn.Module.load_weights(strict=True) (python/mlx/nn/layers/base.py at ml-explore/mlx
#: 004c1d8e: `Received {num_extra} parameters not in model: \n{extras}.`, `Missing {num_missing}
#: parameters: \n{missing}.`): the checkpoint's weights are not the ones this release's class of
#: the model has (a checkpoint of a newer layout, or of another variant).
MLX_WEIGHTS = Failures(
    patterns=(
        P(
            kind="unsupported_architecture",
            pattern=r"Received \d+ parameters not in model|Missing \d+ parameters: ",
            hint="the model's weights do not match this release's implementation of it: upgrade, or use "
            "a conversion made for this release",
        ),
    )
)

#: What every engine's process passes through whatever it is built on (the sockets, the GPU's
#: kernels and driver, the dynamic loader, the operating system, how it ended): every engine's
#: vocabulary holds these, after its own patterns (tests/launching/test_failures_runtimes.py
#: checks it; a composite keeps a pattern once, where it comes first, so a supervisor composing
#: its runners' vocabularies has them after the first runner's own).
BASE = SOCKETS + GPU_KERNELS + CUDA_DRIVER_API + LOADER + CUDA_DRIVER + SYSTEM + ENDINGS
#: The vocabulary of a Python engine built on PyTorch and Hugging Face, after its own patterns.
PYTHON_SERVER = ARGPARSE + SOCKETS + TORCH + GPU_KERNELS + LOADER + HUGGINGFACE + SYSTEM + PYTHON + BASE
#: The vocabulary of an engine built on llama.cpp, after its own patterns.
LLAMA_CPP = SOCKETS + GGML + GPU_KERNELS + LOADER + CUDA_DRIVER + SYSTEM + BASE
#: The vocabulary of a native server on candle or cudarc (mistral.rs, text-embeddings-inference),
#: after its own patterns and its argument parser's.
NATIVE_SERVER = SOCKETS + RUST_MODELS + CUDA_DRIVER_API + BASE

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
