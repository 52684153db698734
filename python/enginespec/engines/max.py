"""Modular MAX: ``max serve``.

modular/modular has no release tags in the index searched here: the facts are from its files at the
commits named beside them (2026), all under max/python/max/: entrypoints/pipelines.py (the click
CLI) at ``27c13e68``, entrypoints/cli/config.py (the options made from the config models) at
``1b3c40ed``, serve/config.py (``Settings``) at ``06f8ee02``, serve/api_server.py at ``0cd095a2``,
pipelines/lib/config/model_config.py at ``1e2f2b9f``.
"""

from __future__ import annotations

import enginespec.engines._libraries as _libraries
from enginespec.definition.records import (
    Flags,
    IdentityProbe,
    Launch,
    LoadMetrics,
    Package,
    Serving,
    Settings,
)
from enginespec.definition.servedrecords import ModelList
from enginespec.definition.signature import LaunchForm, Signature
from enginespec.spec import EngineSpec

SIGNATURE = Signature(
    engine="max",
    launch_forms=(
        # The `max` console script is the click group `max.entrypoints.pipelines:main` (MAX's
        # docs: "click:: max.entrypoints.pipelines:main", installed by the `modular` package);
        # pipelines.py also runs main() as `python -m max.entrypoints.pipelines`. Its other
        # commands run and exit: `generate`, `encode`, `warm-cache`, `list`, `benchmark`,
        # `diffusion generate`; an unknown one is "Command not supported" (ModelGroup).
        # `max-pipelines serve` is the name of the same CLI before the `max` script (the
        # `magic global install max-pipelines` tool of early 2025 docs).
        LaunchForm(
            executables=("max", "max-pipelines"),
            modules=("max.entrypoints.pipelines",),
            subcommand=("serve",),
        ),
    ),
    # `model_path` is given the names ("--model", "--model-path") (config.py
    # get_normalized_flag_names); at 27c13e68 `--model` is rewritten to `--model-path` before
    # parsing (replace_deprecated_model_flag: one spelling or the other, not both).
    aliases={"--model": "--model-path"},
    model_flags=("--model-path",),
    # MAXModelConfig.served_model_name: "Optional override for client-facing model name.
    # Defaults to ``model_path``."
    served_name_flags=("--served-model-name",),
    # `max serve` has `--port` (common_server_options) and no host option: the host is
    # MAX_SERVE_HOST (Settings).
    port_flags=("--port",),
    # Every bool config field is a `--x/--no-x` pair (get_normalized_flag_names); the serve
    # command's own flags: `--profile-serve`, `--headless`, `--pretty-print-config`. The config
    # fields' bools are too many to pin here; `max serve` takes no positional, so an unknown one
    # can only be read as taking the next option, which a flag never is.
    no_value_flags=frozenset({"--profile-serve", "--headless", "--pretty-print-config"}),
    no_value_prefixes=("--no-",),
    # `--task-arg` is click `multiple=True`: one value per occurrence.
    exit_flags=frozenset({"--help", "--version"}),
    # `--headless` "Run only the dispatcher service and model worker without the API server."
    follower_flags=frozenset({"--headless"}),
    # Settings: host "0.0.0.0" (MAX_SERVE_HOST), port 8000 (MAX_SERVE_PORT).
    default_host="0.0.0.0",
    default_port=8000,
)


SPEC = EngineSpec(
    id="max",
    aliases=("modular", "max-serve"),
    signature=SIGNATURE,
    launch=Launch(
        kind="console_script",
        executable="max",
        args=("serve",),
        module_args=("-m", "max.entrypoints.pipelines", "serve"),
    ),
    flags=Flags(
        fields={
            # MAXModelConfig (model_config.py): max_length, trust_remote_code (a --x/--no-x pair)
            "max_model_len": ("--max-length",),
            "trust_remote_code": ("--trust-remote-code",),
        },
        # click `multiple=True` options take one value per occurrence
        list_style="repeat",
    ),
    # PyPI `modular` (the docs' `pip install modular`) brings the `max` distribution, whose
    # version the server reports (api_server.py `version`: importlib.metadata.version("max")).
    package=Package(distributions=("modular", "max")),
    serving=Serving(
        # The model worker starts in the FastAPI lifespan, which uvicorn runs before it binds
        # (serve_api_and_model_worker.py at 11a6771a: `uvloop.run(server.serve())`), so the port
        # refuses until the model is ready; then GET /health answers 200 with no body
        # (api_server.py `health`: "tools like lm-eval use this to check for readiness").
        health_path="/health",
        # vLLM's default port is 8000 too and it also answers /health and /version; MAX's app is
        # FastAPI(title="MAX Serve") (api_server.py fastapi_app), whose /openapi.json (Starlette's
        # compact JSON) starts {"openapi": ..., "info": {"title": "MAX Serve", ...}}; vLLM's app
        # keeps FastAPI's default title.
        identity=IdentityProbe(path="/openapi.json", status=200, contains='"title":"MAX Serve"'),
    ),
    # The OpenAI routes list the one model it serves (its served name, else the model path).
    models=ModelList(kind="openai", path="/v1/models"),
    # Settings is pydantic-settings with env_prefix "MAX_SERVE_": MAX_SERVE_HOST,
    # MAX_SERVE_PORT (argv's --port is passed to it and wins). It also reads a `.env` file in
    # the working directory (env_file=".env"), which is not read here.
    # Its metrics (maxserve.num_requests_running, maxserve.num_requests_queued,
    # maxserve.num_input_tokens, maxserve.num_output_tokens, maxserve.time_to_first_token in ms:
    # serve/telemetry/metrics.py SERVE_METRICS @ 1b3c40ed) go through OpenTelemetry's
    # PrometheusMetricReader (serve/telemetry/common.py) to another port, `metrics_port` 8001
    # (MAX_SERVE_METRICS_ENDPOINT_PORT, serve/config.py @ 06f8ee02), not the API port. The
    # Prometheus names OpenTelemetry's exporter makes of them (suffixes for units and counters)
    # depend on its version and were not pinned: not read.
    load=LoadMetrics(
        note="MAX reports its load on its metrics port (MAX_SERVE_METRICS_ENDPOINT_PORT, 8001), "
        "which enginespec does not read"
    ),
    settings=Settings(environment={"MAX_SERVE_HOST": "host", "MAX_SERVE_PORT": "port"}),
    failures=_libraries.PYTHON_SERVER,
)
