"""Infinity (michaelfeil/infinity): ``infinity_emb v2``, the embedding and reranking server.

Facts from michaelfeil/infinity tag 0.0.77 (``4355feff``): libs/infinity_emb/infinity_emb/cli.py
(a typer app), env.py (the ``INFINITY_*`` defaults), infinity_server.py and pyproject.toml; older
tags where a line says so.
"""

from __future__ import annotations

import enginespec.engines._libraries as _libraries
from enginespec.definition.records import Flags, Launch, LoadMetrics, Package, Serving, Settings
from enginespec.definition.servedrecords import ModelList
from enginespec.definition.signature import LaunchForm, Signature
from enginespec.spec import EngineSpec

# typer makes every `bool` parameter a `--x/--no-x` pair of value-less flags, in `v2` (its
# list[bool] options, infinity_emb/cli.py v2) and `v1` alike (the help in Infinity's
# docs/docs/cli_v2.md lists the pairs).
_BOOLEANS = (
    "trust-remote-code",
    "model-warmup",
    "vector-disk-cache",
    "lengths-via-tokenize",
    "compile",
    "bettertransformer",
    "preload-only",
    "permissive-cors",
)

SIGNATURE = Signature(
    engine="infinity",
    launch_forms=(
        # The console script `infinity_emb` (pyproject.toml `[tool.poetry.scripts]`), also the
        # images' ENTRYPOINT (Dockerfile.cpu_auto); `python -m infinity_emb.cli` runs the same
        # cli(). `v2` (since 0.0.32) and the deprecated `v1` (`--model-name-or-path`) are typer
        # commands taking options only: a positional is "Got unexpected extra argument", exit 2.
        LaunchForm(
            executables=("infinity_emb",),
            modules=("infinity_emb.cli",),
            subcommand=("v2",),
            max_positionals=0,
        ),
        LaunchForm(
            executables=("infinity_emb",),
            modules=("infinity_emb.cli",),
            subcommand=("v1",),
            max_positionals=0,
        ),
        # No command: since 0.0.75 cli() inserts `v2` ("defaulting to `v2` since 0.0.75"); up to
        # 0.0.31 the script was `typer.run` of the server with v1's options; 0.0.40's cli()
        # inserted `v1`. Any first positional (`help`, a misspelt command) is no command of the
        # typer app: it exits.
        LaunchForm(executables=("infinity_emb",), modules=("infinity_emb.cli",), max_positionals=0),
    ),
    # v2 `--model-id` (repeatable: one engine per model, the v2 docstring "cli options can be
    # overloaded"), v1 and <= 0.0.31 `--model-name-or-path`; served names `--served-model-name`
    # (one per model; an empty one serves the model under its id, EngineArgs). With several, the
    # model read from argv is the last given (a repeated flag's rule here); /models lists them all.
    model_flags=("--model-id", "--model-name-or-path"),
    served_name_flags=("--served-model-name",),
    host_flags=("--host",),
    port_flags=("--port",),
    no_value_flags=frozenset(f"--{prefix}{name}" for name in _BOOLEANS for prefix in ("", "no-")),
    # click: an option given no value is "Option '--port' requires an argument.", exit 2.
    values_required=True,
    # typer's own options (the app's `--install-completion`, `--show-completion`), and help.
    exit_flags=frozenset({"--help", "--install-completion", "--show-completion"}),
    # `--preload-only` "only downloads models and verifies setup, then exit" (the lifespan sends
    # itself SIGINT 3 s after the models loaded); the last of the pair decides.
    mode_flags={"--preload-only": False, "--no-preload-only": True},
    secret_flags=frozenset({"--api-key"}),
    # env.py: INFINITY_HOST default "0.0.0.0", INFINITY_PORT default "7997".
    default_host="0.0.0.0",
    default_port=7997,
)


SPEC = EngineSpec(
    id="infinity",
    aliases=("infinity-emb", "infinity_emb"),
    signature=SIGNATURE,
    launch=Launch(
        kind="console_script",
        executable="infinity_emb",
        args=("v2",),
        module_args=("-m", "infinity_emb.cli", "v2"),
    ),
    flags=Flags(
        fields={
            "max_num_seqs": ("--batch-size",),
            "dtype": ("--dtype",),
            "trust_remote_code": ("--trust-remote-code",),
        },
        # list options take one value per occurrence (`--model-id a --model-id b`)
        list_style="repeat",
    ),
    # PyPI `infinity-emb`; the server's imports (typer, uvicorn, fastapi) and the torch backend
    # are extras: the README installs `infinity-emb[all]` (pyproject.toml `[tool.poetry.extras]`).
    package=Package(distributions=("infinity-emb",), linux_extra="all"),
    serving=Serving(
        # The models load in the FastAPI lifespan (AsyncEngineArray.astart), which uvicorn runs
        # before it binds, so the port refuses until they are ready. GET /health answers 200
        # {"unix": <time>} (infinity_server.py `_health`), never behind --api-key.
        health_path="/health",
        api_key_flag="--api-key",
        api_key_env=("INFINITY_API_KEY",),
    ),
    # GET {url_prefix}/models (behind --api-key): {"data": [{"id": served_model_name, "stats":
    # {...}, "capabilities": [...], "backend": ..., ...}]} (infinity_server.py `_models`), one per
    # --model-id. With --url-prefix (default "") the path moves: not followed.
    models=ModelList(kind="openai", path="/models"),
    # Every option's default is its INFINITY_* variable (env.py `to_name`: "INFINITY_" + the name
    # upper-cased); argv wins. INFINITY_MODEL_ID and INFINITY_SERVED_MODEL_NAME hold lists
    # separated by `;` ("model/id1;model/id2;"), left out: one value is not the model.
    # Its /metrics is prometheus-fastapi-instrumentator's (infinity_server.py create_server:
    # `Instrumentator().instrument(app)`, exposed in the lifespan): HTTP request counts, sizes and
    # durations per route (health probes and /metrics included), no in-progress gauge (the
    # instrumentator's default), no queue or token figure. Each engine's queue is in GET /models
    # `stats` (`queue_absolute`, `results_pending`: batch_handler.py overload_status), JSON.
    load=LoadMetrics(
        note="Infinity's /metrics has HTTP request counts and durations only; its queue is in /models "
        "stats (JSON), which enginespec does not read"
    ),
    settings=Settings(environment={"INFINITY_HOST": "host", "INFINITY_PORT": "port"}),
    failures=_libraries.PYTHON_SERVER,
)
