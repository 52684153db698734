"""MLX: ``mlx_lm.server`` (console script and module) and ``mlx_lm server``."""

from __future__ import annotations

import enginespec.engines._libraries as _libraries
from enginespec.definition.records import Flags, HealthRule, Launch, Package, Serving
from enginespec.definition.servedrecords import ModelList
from enginespec.definition.signature import LaunchForm, Signature
from enginespec.failures import FailurePattern, Failures
from enginespec.spec import EngineSpec

SIGNATURE = Signature(
    engine="mlx",
    launch_forms=(
        LaunchForm(executables=("mlx_lm.server",), modules=("mlx_lm.server",)),
        # mlx_lm/cli.py dispatches `mlx_lm server ...` (also `python -m mlx_lm server`).
        LaunchForm(executables=("mlx_lm",), modules=("mlx_lm",), subcommand=("server",)),
    ),
    # mlx_lm/server.py: `--draft-model` and `--adapter-path` are other models, not the one served.
    model_flags=("--model",),
    host_flags=("--host",),
    port_flags=("--port",),
    exit_flags=frozenset({"-h", "--help"}),
    abbreviations=True,
    fold_workers=True,
    default_host="127.0.0.1",
    default_port=8080,
)


# Why a start failed: mlx-lm's and MLX's own messages (checked in the mlx-lm 0.26.0 wheel:
# mlx_lm/utils.py _get_classes `Model type {model_type} not supported.`, load_model `No
# safetensors found in {model_path}`; MLX's C++ (mlx/backend/metal/allocator.cpp `[metal::malloc]
# Attempting to allocate N bytes which is greater than the maximum allowed buffer size of M
# bytes.`) and Metal's `[METAL] Command buffer execution failed: Insufficient Memory` are from
# memory of MLX 0.26, not checked here), then its libraries'.
P = FailurePattern

FAILURES = (
    _libraries.ARGPARSE
    + _libraries.SOCKETS
    + Failures(
        patterns=(
            P(
                kind="gpu_oom",
                pattern=r"\[metal::malloc\] Attempting to allocate (?P<requested_bytes>\d+) bytes which is "
                r"greater than the maximum allowed buffer size of (?P<max_buffer_bytes>\d+) bytes",
                hint="a Metal buffer larger than this Mac allows is needed: a smaller model or quantization",
            ),
            P(kind="gpu_oom", pattern=r"\[METAL\] Command buffer execution failed: Insufficient Memory"),
            P(
                kind="unsupported_architecture",
                pattern=r"Model type \S+ not supported",
                hint="this mlx-lm release does not implement the model's architecture: upgrade mlx-lm",
            ),
            P(kind="model_not_found", pattern=r"No safetensors found in"),
            # _get_classes reads `config["model_type"]` (mlx_lm/utils.py, found by the exact-string
            # search): a config.json without one is of no model mlx-lm builds
            P(
                kind="unsupported_architecture",
                pattern=r"KeyError: 'model_type'",
                hint="the model's config.json names no model_type: it is no model mlx-lm can load (convert "
                "it with mlx_lm.convert, or use one made for MLX)",
            ),
        )
    )
    + _libraries.MLX_WEIGHTS
    + _libraries.HUGGINGFACE
    + _libraries.SYSTEM
    + _libraries.PYTHON
    + _libraries.BASE
)

SPEC = EngineSpec(
    id="mlx",
    aliases=("mlx-lm", "mlx_lm", "mlx_lm.server"),
    signature=SIGNATURE,
    launch=Launch(kind="console_script", executable="mlx_lm.server", module_args=("-m", "mlx_lm.server")),
    flags=Flags(
        fields={
            "max_num_seqs": ("--decode-concurrency",),
            "trust_remote_code": ("--trust-remote-code",),
            "chat_template": ("--chat-template",),
        }
    ),
    # On Linux plain `mlx-lm` brings no `mlx` (it requires mlx only on Darwin), the CPU build
    # comes with the `cpu` extra (mlx-lm 0.32.2 METADATA).
    package=Package(distributions=("mlx-lm",), linux_extra="cpu"),
    # /health answers 200 as soon as the server listens: the model loads in the generation thread
    # (or on the first request that names it) and requests wait for it, so 200 is ready to serve;
    # 503 {"status": "unavailable"} once loading failed or that thread died, the process staying up
    # (mlx-lm 0.32.0 to 0.32.2, mlx_lm/server.py handle_health_check). /v1/models lists the Hugging
    # Face cache, not the loaded model, so it says nothing about readiness.
    serving=Serving(
        health_rules=(
            HealthRule(
                status=503,
                state="unhealthy",
                reason="the model failed to load or the generation thread stopped (HTTP 503)",
            ),
        )
    ),
    # Its ModelProvider loads whatever model a request names (a path or a Hugging Face repo) in
    # place of the one it holds, --model being only the default (mlx_lm/server.py
    # ModelProvider.load at ml-explore/mlx-lm d78bf58e), and no route says which it holds:
    # /v1/models lists the Hugging Face cache. What it was started with is said as such.
    models=ModelList(replaced_on_request=True),
    failures=FAILURES,
)
