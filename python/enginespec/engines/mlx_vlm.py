"""mlx-vlm: ``mlx_vlm.server`` (console script and module).

Facts are from mlx-vlm v0.6.15 (``d734bd28``): mlx_vlm/server/cli.py and mlx_vlm/server/app.py
(the same flags and /health in the PyPI wheel 0.7.10).
"""

from __future__ import annotations

import enginespec.engines._libraries as _libraries
from enginespec.definition.records import Flags, HealthRule, Launch, Package, Serving, Settings
from enginespec.definition.servedrecords import ControlRequest, ModelControl, ModelList
from enginespec.definition.signature import LaunchForm, Signature
from enginespec.failures import FailurePattern, Failures
from enginespec.spec import EngineSpec

SIGNATURE = Signature(
    engine="mlx-vlm",
    launch_forms=(
        # `mlx_vlm.server = mlx_vlm.server:main` (pyproject.toml) and mlx_vlm/server/__main__.py.
        # mlx_vlm.generate, .chat, .convert and the Gradio .chat_ui take the same --model and serve
        # no API.
        LaunchForm(executables=("mlx_vlm.server",), modules=("mlx_vlm.server",)),
    ),
    # --model is optional (models then load on the first request that names one); --draft-model,
    # --adapter-path, --image-model, --tts-model, ... are other models.
    model_flags=("--model",),
    host_flags=("--host",),
    port_flags=("--port",),
    no_value_flags=frozenset({"--trust-remote-code", "--enable-thinking", "--reload"}),
    exit_flags=frozenset({"-h", "--help"}),
    secret_flags=frozenset({"--api-key"}),
    abbreviations=True,
    # uvicorn's reloader (--reload) runs the server in a child process.
    fold_workers=True,
    default_host="0.0.0.0",
    default_port=8080,
)


# mlx_vlm/utils.py get_model_and_args (checked in the v0.3.1 wheel): `Model type {model_type} not
# supported.` when `mlx_vlm.models.<type>` does not import (later releases add ` Error: {e}`,
# seen in logs only: https://github.com/lmstudio-ai/lmstudio-bug-tracker/issues/1739): before
# Python's import errors, whose ModuleNotFoundError it is the cause of.
FAILURES = (
    _libraries.ARGPARSE
    + _libraries.SOCKETS
    + Failures(
        patterns=(
            FailurePattern(
                kind="unsupported_architecture",
                pattern=r"Model type \S+ not supported",
                hint="this mlx-vlm release does not implement the model's architecture: upgrade mlx-vlm",
            ),
            # mlx_vlm/utils.py load_model (v0.3.1), logged then raised as FileNotFoundError
            FailurePattern(kind="model_not_found", pattern=r"No safetensors found in"),
        )
    )
    + _libraries.MLX_WEIGHTS
    + _libraries.HUGGINGFACE
    + _libraries.SYSTEM
    + _libraries.PYTHON
    + _libraries.BASE
)

SPEC = EngineSpec(
    id="mlx-vlm",
    aliases=("mlx_vlm", "mlx_vlm.server"),
    signature=SIGNATURE,
    launch=Launch(kind="console_script", executable="mlx_vlm.server", module_args=("-m", "mlx_vlm.server")),
    flags=Flags(
        fields={
            "max_num_seqs": ("--max-num-seqs",),
            "trust_remote_code": ("--trust-remote-code",),
        }
    ),
    # mlx-vlm requires `mlx` everywhere; on Linux MLX's CPU backend is the `cpu` extra (`mlx-cpu`,
    # mlx-vlm 0.7.10 pyproject.toml; earlier releases have no such extra and pip ignores it).
    package=Package(distributions=("mlx-vlm",), linux_extra="cpu"),
    serving=Serving(
        api_key_flag="--api-key",
        api_key_env=("MLX_VLM_SERVER_API_KEY",),
        health_authorized=True,
        # A --model is preloaded in the FastAPI lifespan, which uvicorn runs before it binds: the
        # port refuses connections while it loads. Then GET /health is always 200 {"status":
        # "healthy", "loaded_model": ...}, or 401 "Invalid API key" when the server has a key and
        # the request lacks it (app.py health_check, _require_management_api_key).
        health_rules=(
            HealthRule(status=200, field="status", equals="healthy", state="ready"),
            HealthRule(status=200, state="unknown", reason="unexpected /health body"),
            HealthRule(
                status=401,
                state="unknown",
                reason="/health needs the server's API key, which enginespec does not have",
            ),
        ),
    ),
    # The CLI hands its options to the app through the environment and sets MLX_VLM_PRELOAD_MODEL
    # only when --model is given, so one set in the server's environment is what it preloads.
    settings=Settings(environment={"MLX_VLM_PRELOAD_MODEL": "model"}),
    # A request naming a model loads it in place of the one of its kind (get_cached_model: one
    # cache per group, text_generation, embedding, audio...), whatever --model preloaded; /health
    # says which it holds (loaded_models), /v1/models the downloaded ones it could load, and
    # POST /unload frees them all (unload_model_sync) (mlx_vlm/server/app.py, v0.6.15).
    models=ModelList(kind="mlx_vlm", path="/health", available_path="/v1/models"),
    control=ModelControl(unload=ControlRequest(path="/unload", every_model=True)),
    failures=FAILURES,
)
