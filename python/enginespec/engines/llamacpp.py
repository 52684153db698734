"""llama.cpp's ``llama-server``."""

from __future__ import annotations

import re
from collections.abc import Sequence

import enginespec.engines._libraries as _libraries
from enginespec._host.shapes import TYPE_SIZES
from enginespec.definition.forks import Fork
from enginespec.definition.modelrecords import (
    Fitting,
    LedgerDevice,
    LoggedMemory,
    MemoryEstimate,
    ModelFacts,
    Placement,
)
from enginespec.definition.records import (
    Flags,
    HealthRule,
    IdentityProbe,
    LatencyMetric,
    LatencyMetrics,
    Launch,
    LoadMetrics,
    Package,
    Serving,
    Settings,
    SourceBuild,
)
from enginespec.definition.servedrecords import ControlRequest, ModelControl, ModelList
from enginespec.definition.signature import Evidence, LaunchForm, Signature
from enginespec.failures import FailurePattern, Failures
from enginespec.models.facts import argv_number
from enginespec.models.files import ModelError
from enginespec.models.fit import CONTEXT_STEP, MARGIN_BYTES, gib, known_memory, with_flag
from enginespec.process.argv import flag_value
from enginespec.spec import EngineSpec

SIGNATURE = Signature(
    engine="llamacpp",
    launch_forms=(
        LaunchForm(executables=("llama-server",)),
        # Renamed builds kept side by side (llama-swap's configs name them by build or backend:
        # `llama-server-b5678`, `llama-server-cuda`).
        LaunchForm(executable_prefixes=("llama-server-",)),
        # Builds before the June 2024 rename (ggml-org/llama.cpp#7809) called the server `server`
        # (`./server`, `server.exe`): a name far too common to trust alone, so only with a GGUF
        # model and a flag only llama.cpp has.
        LaunchForm(
            executables=("server",),
            evidence=Evidence(
                model_suffixes=(".gguf",),
                any_flags=("--n-gpu-layers", "--ctx-size", "--mlock", "--parallel"),
            ),
        ),
        # The unified `llama` binary (app/llama.cpp, ggml-org/llama.cpp#23459): `llama serve` (alias
        # `llama server`) runs llama-server's own main on the arguments that follow.
        LaunchForm(executables=("llama",), subcommand=("serve",)),
        LaunchForm(executables=("llama",), subcommand=("server",)),
        # The RPC backend a multi-host llama-server offloads layers to (`llama-server --rpc
        # host:50052`): it holds its machine's GPU and serves no HTTP API; its `-H`/`-p` are its RPC
        # socket's, `-d` its devices (tools/rpc/rpc-server.cpp of the llama.cpp that
        # llama-cpp-python 0.3.35 vendors). Its own parser (rpc_server_params_parse) takes the
        # next argument as the value of -H/--host and -p/--port and exits when there is none: the
        # listen address is what an operator needs to see (still no HTTP API, never probed).
        LaunchForm(
            executables=("rpc-server",),
            role="follower",
            facts=False,
            host_flags=("-H", "--host"),
            port_flags=("-p", "--port"),
            # rpc_server_params' defaults (tools/rpc/rpc-server.cpp lines 173-174, same release)
            listen_default=("127.0.0.1", 50052),
        ),
    ),
    # Short and long spellings of the same option (llama.cpp 0c1e57098, common/arg.cpp).
    # `-md`/`--model-draft`, `-hfd`, `-mm`/`--mmproj` are other models and are deliberately absent.
    # Every `--` option's `_` is read as `-` (common_params_parse_ex).
    underscore_is_dash=True,
    aliases={
        "-m": "--model",
        "-hf": "--hf-repo",
        "-hfr": "--hf-repo",
        "-dr": "--docker-repo",
        "-mu": "--model-url",
        "-a": "--alias",
        "-c": "--ctx-size",
        "-ngl": "--n-gpu-layers",
        "--gpu-layers": "--n-gpu-layers",
        "-np": "--parallel",
        "-ctk": "--cache-type-k",
        "-ctv": "--cache-type-v",
        "-fa": "--flash-attn",
        "-hft": "--hf-token",
    },
    model_flags=("--model", "--hf-repo", "--docker-repo", "--model-url"),
    served_name_flags=("--alias",),
    # `--alias a,b` gives the model several names (llama.cpp 0c1e57098, common/arg.cpp splits it).
    served_name_separator=",",
    host_flags=("--host",),
    port_flags=("--port",),
    exit_flags=frozenset(
        {"-h", "--help", "--usage", "--version", "--list-devices", "--completion-bash", "-cl", "--cache-list"}
    ),
    secret_flags=frozenset({"--api-key", "--hf-token"}),
    default_host="127.0.0.1",
    default_port=8080,
)


# `llama-server --version` prints on stderr: `version: 0.5.0-dev (build 1, commit 0c1e570)`
# (llama.cpp 0c1e57098, common/build-info.cpp.in), older builds `version: 9439 (47f6423ed)`
# (e3a74b299, common/arg.cpp). Without git, build 0 and commit `unknown` (cmake/build-info.cmake).
_VERSION_LINE = re.compile(r"version:\s*(\S+)(?:\s+\(([^)]*)\))?")
_NEW_DETAILS = re.compile(r"build (\d+), commit ([0-9A-Za-z]+)")
_OLD_DETAILS = re.compile(r"[0-9a-f]{4,40}")
_RELEASE = re.compile(r"(\d+(?:\.\d+)*)(-dev)?")


def pep440_version(release: str, build: str | None, commit: str | None) -> str:
    """llama.cpp's version, build number and commit in one PEP 440 version, so that two builds
    compare unequal: ``0.5.0-dev`` build 1 commit ``0c1e570`` is ``0.5.0.dev0+b1.g0c1e570``, the
    old ``9439 (47f6423ed)`` is ``9439+g47f6423ed`` (the local label's ``g<commit>``, as
    setuptools-scm writes it, is what a source build is compared by)."""
    match = _RELEASE.fullmatch(release)
    version = (match.group(1) + (".dev0" if match.group(2) else "")) if match else release
    local = [f"b{build}"] if build is not None else []
    if commit and commit != "unknown":
        local.append(f"g{commit.lower()}")
    return version + ("+" + ".".join(local) if local else "")


class LlamaCppSpec(EngineSpec):
    def parse_version(self, output: str) -> str | None:
        match = _VERSION_LINE.search(output)
        if not match:
            return None
        release, details = match.group(1), match.group(2) or ""
        new = _NEW_DETAILS.fullmatch(details)
        if new:
            return pep440_version(release, new.group(1), new.group(2))
        return pep440_version(release, None, details if _OLD_DETAILS.fullmatch(details) else None)

    def estimate_memory(self, facts: ModelFacts, argv: Sequence[str]) -> MemoryEstimate:
        return estimate_memory(facts, argv)

    def logged_memory(self, log: str) -> LoggedMemory:
        return logged_memory(log)

    def fit(self, facts: ModelFacts, argv: Sequence[str], devices: Sequence[LedgerDevice]) -> Fitting:
        return fit_rule(facts, argv, devices)


# Why a start failed: llama-server's own messages, checked in llama.cpp 4227c9be (the commit
# llama-cpp-python 0.3.16 vendors): common/arg.cpp common_params_parse `error: invalid argument:
# %s`, `expected value for argument`, `error while handling argument "%s": %s`, `error while
# handling environment variable "%s": %s`; tools/server/server.cpp `couldn't bind HTTP server
# socket, hostname: %s, port: %d`, `exiting due to model loading error`, `failed to load model,
# '%s'`. The older parser's `error: unknown argument: %s` (gpt_params_parse) is in no source
# checked here: seen in logs only, https://github.com/meta-llama/llama/issues/308 (./main) and
# https://github.com/ggml-org/llama.vscode/issues/37. Then the GGML loader's.
P = FailurePattern

FAILURES = (
    _libraries.LLAMA_ARGS
    + Failures(
        patterns=(
            P(
                kind="bad_flag",
                pattern=r"^\s*error: (?:invalid argument|unknown argument|expected value for argument)|"
                r"error while handling (?:argument|environment variable)",
            ),
            P(
                kind="port_in_use",
                pattern=r"couldn't bind HTTP server socket, hostname: (?P<host>\S+), port: (?P<port>\d+)",
                hint="port {port} is taken: choose another --port or stop the process holding it",
            ),
        )
    )
    + _libraries.LLAMA_CPP
).model_copy(
    update={
        # the consequences of a load failure its loader stated above them: `failed to load model`,
        # also with the path (the older server's `llama_init_from_gpt_params: error: failed to load
        # model 'PATH'`), and the older server's JSON log line `"message":"unable to load model"`
        "wrappers": (
            r"exiting due to model loading error",
            r"failed to load model(?:,? '[^']*')?\s*$",
            r'"message":\s*"unable to load model"',
        )
    }
)

SPEC = LlamaCppSpec(
    id="llamacpp",
    aliases=("llama.cpp", "llama-server"),
    signature=SIGNATURE,
    launch=Launch(kind="binary", executable="llama-server"),
    flags=Flags(
        fields={
            "max_model_len": ("--ctx-size",),
            "gpu_layers": ("--n-gpu-layers",),
            "max_num_seqs": ("--parallel",),
            # one KV-cache type for both halves of the cache
            "kv_cache_dtype": ("--cache-type-k", "--cache-type-v"),
            "reasoning_parser": ("--reasoning-format",),
            "chat_template": ("--chat-template-file",),
        },
        # Repeated options (--lora a --lora b), never argparse-style nargs (llama.cpp 0c1e57098,
        # common/arg.cpp; other list options there also take one comma-separated value).
        list_style="repeat",
    ),
    # No wheel ships llama-server: a configured command, or a cmake build of llama.cpp's tree (its
    # root holds ggml/; llama-cpp-python's sdist vendors it under vendor/llama.cpp). Only the server;
    # no libcurl (models are given as paths); portable CPU code.
    package=Package(
        source_build=SourceBuild(
            marker="ggml",
            cmake_options=(
                "-DLLAMA_CURL=OFF",
                "-DLLAMA_BUILD_TESTS=OFF",
                "-DLLAMA_BUILD_EXAMPLES=OFF",
                "-DLLAMA_BUILD_SERVER=ON",
                "-DGGML_NATIVE=OFF",
            ),
            # CMakeLists.txt: `if (NOT DEFINED LLAMA_BUILD_COMMIT)` takes git's otherwise
            commit_variable="LLAMA_BUILD_COMMIT",
        )
    ),
    serving=Serving(
        # GET /props answers {"build_info": "b<build>-<commit>", ...} (0c1e57098,
        # tools/server/server-context.cpp, the props handler; server.cpp before): the release, asked once.
        version_path="/props",
        version_key="build_info",
        # the same answer: only llama-server (and its forks) says its build there
        identity=IdentityProbe(path="/props", status=200, contains='"build_info"'),
        api_key_flag="--api-key",
        api_key_env=("LLAMA_API_KEY",),
        # one value, a comma-separated list of keys (common/arg.cpp `--api-key`, parse_csv_row at
        # 0c1e57098; a single key before): the first is sent
        api_key_separator=",",
        # A --host ending in `.sock` is a unix socket (llama.cpp 0c1e57098, tools/server/server-http.cpp).
        socket_host=True,
        # Ollama and llama-swap start llama-server children on loopback ports; a llama-server in
        # router mode (given no model; llama.cpp 0c1e57098, tools/server/server-models.cpp) starts
        # one per model.
        # a router's children (tools/server/server-models.cpp server_models::load, in
        # llama-cpp-python 0.3.35's vendored tree) have LLAMA_SERVER_ROUTER_PORT in their
        # environment, whoever their parent is
        supervisor_markers={"LLAMA_SERVER_ROUTER_PORT": "llama-server"},
        supervisors={"ollama": "ollama", "llama-swap": "llama-swap"},
        nested_supervisor="llama-server",
        health_rules=(
            *_libraries.LLAMA_SERVER_HEALTH,
            HealthRule(status=200, state="unknown", reason="unexpected /health body"),
        ),
    ),
    # Every option has an environment twin; the command line wins (llama.cpp 0c1e57098,
    # common/arg.cpp set_env and common_params_parse_ex).
    settings=Settings(
        environment={
            "LLAMA_ARG_MODEL": "model",
            "LLAMA_ARG_MODEL_URL": "model",
            "LLAMA_ARG_HF_REPO": "model",
            "LLAMA_ARG_DOCKER_REPO": "model",
            "LLAMA_ARG_ALIAS": "served_model_name",
            "LLAMA_ARG_HOST": "host",
            "LLAMA_ARG_PORT": "port",
        }
    ),
    failures=FAILURES,
    # `/metrics` only with `--metrics` (else HTTP 501; tools/server/server-context.cpp, the
    # metrics handler, and README "GET /metrics"): `requests_processing` and `requests_deferred`
    # gauges, `prompt_tokens_total` and `tokens_predicted_total` counters. Older builds (2024)
    # also had `llamacpp:kv_cache_usage_ratio`; current ones have no KV gauge (`/slots` then).
    # A request's generated tokens are added when its slot is reset, at its end
    # (server-context.cpp, `callback_on_reset` -> `metrics_on_prediction`, in the llama.cpp that
    # llama-cpp-python 0.3.35 vendors), so a long generation moves no token counter:
    # `n_decode_total` (one per `llama_decode`, `metrics_post_decode`) shows that it works.
    # Router mode (no model in argv; ggml-org/llama.cpp PR #17470, Dec 2025): GET /models lists
    # every model it knows with `status.value` one of downloading, downloaded, unloaded, loading,
    # loaded, sleeping (tools/server/server-models.h server_model_status_to_string; `sleeping`
    # from PR #20849, Mar 2026), a failed load `unloaded` with `exit_code` and `failed`, and the
    # child's argv in `status.args` (its `--port`). A server started with a model is `fixed`.
    models=ModelList(kind="llamacpp_router", path="/models", runners=True, argv_model_fixed=True),
    # Router mode's management API (tools/server/server-models.cpp: POST /models/load and
    # /models/unload, body {"model": NAME}, answer {"success": true}); its sleep is its own, by
    # --sleep-idle-seconds (PR #18228), with no request to ask for it.
    control=ModelControl(
        load=ControlRequest(path="/models/load", body={"model": "{model}"}),
        unload=ControlRequest(path="/models/unload", body={"model": "{model}"}),
    ),
    load=LoadMetrics(
        kind="prometheus",
        enable_flag="--metrics",
        requests_running=("llamacpp:requests_processing",),
        requests_waiting=("llamacpp:requests_deferred",),
        kv_cache_usage=("llamacpp:kv_cache_usage_ratio",),
        prompt_tokens=("llamacpp:prompt_tokens_total",),
        generated_tokens=("llamacpp:tokens_predicted_total",),
        progress=("llamacpp:n_decode_total",),
        # Counters only (tools/server/server-task.cpp to_metrics, the llama.cpp llama-cpp-python
        # 0.3.35 vendors; filled by server-context.cpp metrics_on_prediction when a request
        # ends): tokens_predicted_seconds_total, the generation time of finished requests (from
        # the prompt's end to their last token, server-common.h t_gen_us), over
        # tokens_predicted_total, their generated tokens (the first, which comes with the prompt,
        # included), is the mean time per output token. No request count, so no time to first
        # token, queue time or end to end.
        latency=LatencyMetrics(
            time_per_output_token=LatencyMetric(
                seconds_total=("llamacpp:tokens_predicted_seconds_total",),
                count_total=("llamacpp:tokens_predicted_total",),
                note="llama-server's is of the requests finished in the window, over all their "
                "generated tokens (the first included: a request of n tokens has n - 1 intervals)",
            ),
        ),
        note="llama-server counts a request's generated tokens when it ends: tokens per second is "
        "of the requests finished between two readings",
    ),
    # ik_llama.cpp (ikawrakow/ik_llama.cpp at 8337e4cd3) keeps `llama-server` and its address,
    # model and alias options; its own options are in no mainline parser (none of them in the
    # common/arg.cpp llama-cpp-python 0.3.35 vendors): common/common.cpp `-mla/--mla-use`,
    # `-amb/--attention-max-batch`, `-ser/--smart-expert-reduction`, `-rtr/--run-time-repack`,
    # `-ger/--grouped-expert-routing`, `-muge/--merge-up-gate-experts`, `-khad/--k-cache-hadamard`,
    # `-gr/--graph-reuse`, `-no-fmoe/--no-fused-moe`, and `-fmoe/--fused-moe` until 41d6c42b9
    # (#863, 2025-10-25) made it the default. A clone's directory is `ik_llama.cpp`.
    forks=(
        Fork(
            name="ik_llama.cpp",
            flags=(
                *("-mla", "--mla-use", "-amb", "--attention-max-batch", "-ser", "--smart-expert-reduction"),
                *("-rtr", "--run-time-repack", "-ger", "--grouped-expert-routing", "-muge"),
                *("--merge-up-gate-experts", "-khad", "--k-cache-hadamard", "-gr", "--graph-reuse"),
                *("-no-fmoe", "--no-fused-moe", "-fmoe", "--fused-moe"),
            ),
            directories=("ik_llama.cpp",),
        ),
    ),
)


# -- memory: llama.cpp's own rules, as in the llama.cpp that llama-cpp-python 0.3.35 vendors --------

#: `-ctk`/`-ctv` names (common/arg.cpp kv_cache_types) -> ggml type ids.
CACHE_TYPES = {
    "f32": 0,
    "f16": 1,
    "bf16": 30,
    "q8_0": 8,
    "q4_0": 2,
    "q4_1": 3,
    "iq4_nl": 20,
    "q5_0": 6,
    "q5_1": 7,
}
_PAD = 256
_LOG_BUFFER = re.compile(
    r"(?P<device>[\w.\-]+) (?P<what>model|KV|compute) buffer size =\s*(?P<mib>\d+(?:\.\d+)?) MiB"
)


def _pad(value: int, to: int = _PAD) -> int:
    return -(-value // to) * to


def _row_bytes(cache_type: int, values: int) -> int:
    block, size = TYPE_SIZES[cache_type]
    return values // block * size


def _number(argv: Sequence[str], *flags: str) -> str | None:
    for flag in flags:
        value = flag_value(argv, SIGNATURE, flag)
        if value is not None:
            return value
    return None


def _present(argv: Sequence[str], *flags: str) -> bool:
    return any(token.partition("=")[0] in flags for token in argv)


def estimate_memory(facts: ModelFacts, argv: Sequence[str], devices: Sequence[str] = ()) -> MemoryEstimate:
    """Weights by device and the KV cache llama-server allocates for ``facts`` with ``argv``.

    KV cache (src/llama-context.cpp, src/llama-kv-cache.cpp, src/llama-kv-cache-iswa.cpp,
    tools/server/server.cpp): ``-c`` (0: the trained context) is padded to 256; it is shared by
    the ``-np`` slots (default: auto, 4 slots on one unified cache): unified (``-kvu``), one
    stream of ``n_ctx`` cells; else each slot its own stream of ``pad(n_ctx / np, 256)`` cells.
    Each layer holds K and V rows of ``kv_heads x head_dim`` values per cell in the ``-ctk`` and
    ``-ctv`` types (q8_0: 34 bytes per 32 values); sliding-window layers only
    ``pad(min(cells, window x (np if unified else 1) + ubatch), 256)`` cells unless ``--swa-full``;
    an MLA GGUF caches K only. Weights: ``token_embd`` stays on the CPU, the last ``-ngl``
    layers go to the devices (split by ``-ts`` for ``-sm layer``, the default; every device a
    share of each layer for ``-sm row``; the main one for ``-sm none``), the output head with
    them when ``-ngl`` exceeds the layer count."""
    notes: list[str] = []

    def integer(value: str | None, default: int, flag: str) -> int:
        # llama.cpp's own parser takes a 32-bit int (std::stoi): anything else is a problem of
        # this estimate, never a 400-digit context multiplied into float arithmetic
        if value is None:
            return default
        return int(argv_number(flag, value, -(1 << 31), (1 << 31) - 1, integer=True))

    ctx = integer(_number(argv, "--ctx-size"), 0, "--ctx-size")
    if ctx <= 0:
        if facts.context_length is None:
            raise ModelError("--ctx-size is 0 (the trained context) and the model does not say it")
        ctx = facts.context_length
    parallel = integer(_number(argv, "--parallel"), -1, "--parallel")
    unified = _present(argv, "-kvu", "--kv-unified")
    if parallel < 0:
        parallel, unified = 4, True
        notes.append("-np not given: llama-server's auto, 4 slots on one unified cache")
    if parallel == 0:
        raise ModelError("--parallel 0: no slot")
    n_ctx = _pad(ctx)
    if unified:
        per_seq, streams = n_ctx, 1
    else:
        per_seq, streams = _pad(n_ctx // parallel), parallel
        n_ctx = per_seq * parallel
    types = []
    for flags in (("-ctk", "--cache-type-k"), ("-ctv", "--cache-type-v")):
        name = (_number(argv, *flags) or "f16").lower()
        if name not in CACHE_TYPES:
            raise ModelError(f"{flags[1]} {name!r}: not one of {', '.join(CACHE_TYPES)}")
        types.append(name)
    attention = facts.attention
    kv_bytes = 0
    if attention is None:
        notes.append("the model does not give its attention layout: no KV cache estimate")
    else:
        ubatch = integer(_number(argv, "-ub", "--ubatch-size"), 512, "--ubatch-size")
        swa_full = _present(argv, "--swa-full")
        k_row = _row_bytes(CACHE_TYPES[types[0]], attention.kv_heads * attention.head_dim_k)
        v_row = _row_bytes(CACHE_TYPES[types[1]], attention.kv_heads * attention.head_dim_v)
        full = attention.layers - attention.sliding_layers
        kv_bytes = full * (k_row + v_row) * per_seq * streams
        if attention.sliding_layers:
            window = attention.sliding_window or 0
            cells = (
                per_seq if swa_full else _pad(min(per_seq, window * (parallel if unified else 1) + ubatch))
            )
            kv_bytes += attention.sliding_layers * (k_row + v_row) * cells * streams
    weights, kv_cache = _placement(facts, argv, devices, kv_bytes, notes)
    return MemoryEstimate(
        engine="llamacpp",
        rule="llama.cpp vendored by llama-cpp-python 0.3.35: src/llama-context.cpp, src/llama-kv-cache.cpp",
        context=n_ctx,
        context_per_sequence=per_seq,
        sequences=parallel,
        cache_type_k=types[0],
        cache_type_v=types[1],
        weights=weights,
        kv_cache=kv_cache,
        notes=tuple(notes),
    )


def _placement(
    facts: ModelFacts, argv: Sequence[str], devices: Sequence[str], kv_bytes: int, notes: list[str]
) -> tuple[dict[str, int], dict[str, int]]:
    """(weights by device, KV cache by device): layers offloaded by -ngl, split by -ts/-sm."""
    layers = list(facts.layer_bytes)
    input_bytes, output_bytes = facts.input_bytes or 0, facts.output_bytes or 0
    if not devices:
        return {"CPU": input_bytes + sum(layers) + output_bytes}, {"CPU": kv_bytes}
    n_layer = len(layers)
    ngl_text = _number(argv, "--n-gpu-layers")
    if ngl_text in (None, "auto", "all", "-1"):
        ngl = n_layer + 1
        notes.append("-ngl auto: every layer counted on the devices (llama-server may fit fewer)")
    else:
        ngl = int(argv_number("--n-gpu-layers", ngl_text, -(1 << 31), (1 << 31) - 1, integer=True))
    mode = (_number(argv, "-sm", "--split-mode") or "layer").lower()
    split_text = _number(argv, "-ts", "--tensor-split")
    shares = [1.0] * len(devices)
    if split_text:
        # each share finite and at most 2**31 (llama.cpp's floats): `1e400` makes no inf/inf
        given = [argv_number("--tensor-split", x, 0, 1 << 31) for x in re.split(r"[,/]", split_text)]
        shares = [*given, *[0.0] * len(devices)][: len(devices)]
    main = integer_or(_number(argv, "-mg", "--main-gpu"), 0) % len(devices)
    if mode == "none" or sum(shares) <= 0:
        shares = [1.0 if i == main else 0.0 for i in range(len(devices))]
    total = sum(shares)
    cumulative, running = [], 0.0
    for share in shares:
        running += share / total
        cumulative.append(running)
    start = max(n_layer - ngl, 0)
    weights = {"CPU": input_bytes, **{d: 0 for d in devices}}
    kv = {"CPU": 0, **{d: 0 for d in devices}}
    per_layer_kv = kv_bytes // n_layer if n_layer else 0
    for il, nbytes in enumerate(layers):
        if il < start:
            weights["CPU"] += nbytes
            kv["CPU"] += per_layer_kv
            continue
        if mode == "row":
            for device, share in zip(devices, shares, strict=True):
                weights[device] += int(nbytes * share / total)
        position = (il - start) / max(n_layer - start, 1)
        device = devices[next((i for i, c in enumerate(cumulative) if position < c), len(devices) - 1)]
        if mode != "row":
            weights[device] += nbytes
        kv[device] += per_layer_kv
    if ngl > n_layer:
        # the output layer goes where layer n_layer would (row mode: the main device)
        last = next((i for i, c in enumerate(cumulative) if c >= 1.0 - 1e-9), len(devices) - 1)
        weights[devices[main if mode == "row" else last]] += output_bytes
    else:
        weights["CPU"] += output_bytes
    return weights, kv


def integer_or(value: str | None, default: int) -> int:
    try:
        return int(argv_number("", value, -(1 << 31), (1 << 31) - 1, integer=True)) if value else default
    except ModelError:
        return default


def logged_memory(log: str) -> LoggedMemory:
    """The `model`, `KV` and `compute buffer size = N MiB` lines of llama-server's start-up log
    (src/llama-model.cpp, src/llama-kv-cache.cpp, src/llama-context.cpp), by buffer name
    (`CPU_Mapped`, `CUDA0`...), summed per name."""
    found: dict[str, dict[str, int]] = {"model": {}, "KV": {}, "compute": {}}
    for match in _LOG_BUFFER.finditer(log[-(4 << 20) :]):
        table = found[match["what"]]
        table[match["device"]] = table.get(match["device"], 0) + round(float(match["mib"]) * (1 << 20))
    return LoggedMemory(
        engine="llamacpp", weights=found["model"], kv_cache=found["KV"], compute=found["compute"]
    )


def fit_rule(facts: ModelFacts, argv: Sequence[str], devices: Sequence[LedgerDevice]) -> Fitting:
    """Each device on which llama-server, started with ``argv``, holds the model's weights, its KV
    cache and a working margin (:func:`estimate_memory` with every layer offloaded there); where
    the cache is what does not fit, with the largest context (a multiple of 256) that does."""
    usable, refusals = known_memory(devices)
    placements = []
    ctx_flags = ("-c", "--ctx-size")
    for device in usable:
        free = device.free_bytes or 0
        changed: list[str] = []
        current = list(argv)
        estimate = estimate_memory(facts, current, devices=[device.device])
        need = estimate.weights.get(device.device, 0) + estimate.kv_cache.get(device.device, 0) + MARGIN_BYTES
        if need > free:
            # a smaller context: the largest multiple of 256 whose cache fits beside the weights
            weights = estimate.weights.get(device.device, 0) + MARGIN_BYTES
            per_cell = estimate.kv_cache.get(device.device, 0) / max(estimate.context or 1, 1)
            cells = int((free - weights) / per_cell) // CONTEXT_STEP * CONTEXT_STEP if per_cell else 0
            if cells >= CONTEXT_STEP * (estimate.sequences or 1):
                current = with_flag(current, "-c", str(cells), ctx_flags)
                changed.append(f"-c {estimate.context} -> {cells}")
                estimate = estimate_memory(facts, current, devices=[device.device])
                need = estimate.weights[device.device] + estimate.kv_cache[device.device] + MARGIN_BYTES
        if need > free:
            weights = estimate.weights.get(device.device, 0)
            refusals.append(
                f"{device.free_said()}: {device.holders()} (the weights alone need {gib(weights)})"
            )
            continue
        placements.append(
            Placement(
                devices=(device.device,),
                environment={
                    "CUDA_VISIBLE_DEVICES": str(device.index if device.index is not None else device.device)
                },
                settings={
                    "-ngl": str(len(facts.layer_bytes) + 1),
                    "-c": str(estimate.context),
                    "-np": str(estimate.sequences),
                },
                needed_bytes={device.device: need},
                free_bytes={device.device: free},
                changed=tuple(changed),
            )
        )
    return Fitting(
        placements=tuple(placements),
        refusals=tuple(refusals),
        notes=(f"{gib(MARGIN_BYTES)} kept per device for llama.cpp's compute buffer",),
    )
