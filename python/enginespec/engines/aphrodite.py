"""Aphrodite Engine: ``aphrodite run|serve MODEL`` and its OpenAI ``api_server`` module.

Facts are from Aphrodite v0.20.0 (``c0178f1d``), a vLLM derivative: aphrodite/entrypoints/cli/
(main.py, serve.py, run.py), aphrodite/entrypoints/openai/cli_args.py, aphrodite/engine/arg_utils.py.
"""

from __future__ import annotations

import enginespec.engines._libraries as _libraries
import enginespec.engines.vllm as vllm
from enginespec.definition.records import Flags, Launch, Package, Serving, Settings
from enginespec.definition.servedrecords import ControlRequest, ModelControl, ModelList
from enginespec.definition.signature import LaunchForm, Signature
from enginespec.spec import EngineSpec

# Aphrodite's EngineArgs and FrontendArgs are vLLM's (argparse BooleanOptionalAction, so `--no-X`
# too; aphrodite/engine/arg_utils.py, aphrodite/entrypoints/openai/cli_args.py), so its no-value
# flags are vLLM's: every one it has is among them. Its own are a processor-stats switch and, before
# v0.10, the Kobold API. A vLLM flag Aphrodite lacks is an argparse error there, never a value.
_BOOLEAN_FLAGS = vllm.BOOLEAN_FLAGS | frozenset(
    {
        "--enable-mm-processor-stats",
        "--launch-kobold-api",  # before v0.10
    }
)

SIGNATURE = Signature(
    engine="aphrodite",
    launch_forms=(
        # `aphrodite = aphrodite.entrypoints.cli.main:main` (pyproject.toml); `run` is a subclass of
        # `serve` kept for the legacy CLI, and the image's ENTRYPOINT is ["aphrodite", "run"]
        # (docker/Dockerfile). The positional model wins over --model
        # (aphrodite/entrypoints/cli/serve.py cmd).
        LaunchForm(executables=("aphrodite",), subcommand=("run",), positional_model=True),
        LaunchForm(executables=("aphrodite",), subcommand=("serve",), positional_model=True),
        LaunchForm(modules=("aphrodite.entrypoints.cli.main",), subcommand=("run",), positional_model=True),
        LaunchForm(modules=("aphrodite.entrypoints.cli.main",), subcommand=("serve",), positional_model=True),
        # The OpenAI server module takes --model only; before v0.10 it lived under
        # aphrodite.endpoints (the 2024 images' entrypoint, docker/Dockerfile at 61a4c8562).
        LaunchForm(
            modules=("aphrodite.entrypoints.openai.api_server", "aphrodite.endpoints.openai.api_server")
        ),
    ),
    # vLLM's FlexibleArgumentParser (aphrodite/utils/argparse_utils.py) reads `_` as `-`.
    underscore_is_dash=True,
    aliases={
        "-tp": "--tensor-parallel-size",
        "-pp": "--pipeline-parallel-size",
        "-dp": "--data-parallel-size",
        "-q": "--quantization",
        "-gmu": "--gpu-memory-utilization",
        "-n": "--nnodes",
        "-r": "--node-rank",
        "-asc": "--api-server-count",
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
        "-ep": "--enable-expert-parallel",
        "-sc": "--speculative-config",
        "-cc": "--compilation-config",
        "-ac": "--attention-config",
    },
    model_flags=("--model",),
    served_name_flags=("--served-model-name",),
    host_flags=("--host",),
    port_flags=("--port",),
    no_value_flags=_BOOLEAN_FLAGS,
    no_value_prefixes=("--no-",),
    # `list[str]` fields (nargs="+").
    multi_value_flags=frozenset(
        {
            "--served-model-name",
            "--api-key",
            "--lora-modules",
            "--allowed-media-domains",
            "--logits-processors",
            "--ignore-patterns",
            "--numa-bind-nodes",
            "--numa-bind-cpus",
            "--kv-cache-dtype-skip-layers",
            "--lora-target-modules",
            "--collect-detailed-traces",
            "--cudagraph-capture-sizes",
        }
    ),
    exit_flags=frozenset({"-h", "--help", "-v", "--version"}),
    # `--headless` starts engine cores for a multi-node data-parallel deployment, no API server.
    follower_flags=frozenset({"--headless"}),
    secret_flags=frozenset({"--api-key", "--hf-token"}),
    abbreviations=True,
    fold_workers=True,
    # FrontendArgs.host defaults to None: every interface.
    default_host="0.0.0.0",
    default_port=2242,
)


# A fork of vLLM (v0.6): the same KV-cache refusal (aphrodite/task_handler/worker.py
# raise_if_cache_size_invalid), then the Python layers.
FAILURES = vllm.KV_CACHE + _libraries.PYTHON_SERVER

SPEC = EngineSpec(
    id="aphrodite",
    aliases=("aphrodite-engine",),
    signature=SIGNATURE,
    launch=Launch(
        kind="console_script",
        executable="aphrodite",
        args=("run",),
        module_args=("-m", "aphrodite.entrypoints.cli.main", "run"),
        help_args=("--help=all",),
        help_timeout=180.0,
        # The image's ENTRYPOINT is ["aphrodite", "run"]: the model and flags follow the image name.
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
        # As in vLLM it derives from: --tool-call-parser is used only with --enable-auto-tool-choice.
        companion_flags={"--tool-call-parser": ("--enable-auto-tool-choice",)},
    ),
    # PyPI's aphrodite-engine wheels are CUDA builds (setup.py: APHRODITE_TARGET_DEVICE defaults to
    # cuda; CPU and ROCm only from source).
    package=Package(distributions=("aphrodite-engine",), accelerator="cuda"),
    # The port refuses until the API server is up; /health is 200 with an empty body, 503 once the
    # engine died (EngineDeadError; aphrodite/entrypoints/serve/instrumentator/health.py): the
    # default classify_health reads that.
    serving=Serving(api_key_flag="--api-key", api_key_env=("APHRODITE_API_KEY",), socket_flag="--uds"),
    # `--config FILE.yaml`: keys are flag names; the command line wins (FlexibleArgumentParser).
    settings=Settings(config_flag="--config"),
    # As vLLM's: /v1/models (the base models and adapters, an adapter with its `parent`;
    # aphrodite/entrypoints/openai/models/serving.py show_available_models) and sleep mode, whose
    # routes (/sleep?level=N, /wake_up, /is_sleeping) exist only with APHRODITE_SERVER_DEV_MODE=1
    # and sleep needs --enable-sleep-mode (aphrodite/entrypoints/serve/sleep/api_router.py
    # attach_router, aphrodite/engine/arg_utils.py, v0.20.0).
    models=ModelList(kind="openai", path="/v1/models", sleeping_path="/is_sleeping"),
    control=ModelControl(
        sleep=ControlRequest(
            path="/sleep?level=1",
            flags=("--enable-sleep-mode",),
            environment={"APHRODITE_SERVER_DEV_MODE": "1"},
        ),
        wake=ControlRequest(
            path="/wake_up", flags=("--enable-sleep-mode",), environment={"APHRODITE_SERVER_DEV_MODE": "1"}
        ),
    ),
    failures=FAILURES,
)
