"""Lemonade (lemonade-sdk/lemonade): the ``lemond`` server (v10.1 on), its forerunners
``lemonade-router`` (the C++ server of v9 and v10.0) and ``lemonade-server serve|run`` (the
Python server up to v8, the tray/launcher of v9 and v10.0, a deprecated shim from v10.1 to v10.5),
and the backends it starts (``llama-server``, FastFlowLM's ``flm serve``, ``whisper-server``,
...) as its runners.

Facts from lemonade-sdk/lemonade v11.7.0 (the current release) unless a line names another tag;
the files cited are at that tag.
"""

from __future__ import annotations

from enginespec.definition.records import (
    Flags,
    HealthRule,
    IdentityProbe,
    Launch,
    LoadMetrics,
    Serving,
    Settings,
)
from enginespec.definition.servedrecords import ControlRequest, ModelControl, ModelList
from enginespec.definition.signature import LaunchForm, Signature
from enginespec.engines import _libraries, llamacpp
from enginespec.failures import FailurePattern, Failures
from enginespec.spec import EngineSpec

SIGNATURE = Signature(
    engine="lemonade",
    launch_forms=(
        # `lemond [cache_dir] [--port P] [--host H] [--broadcast|--no-broadcast]`
        # (src/cpp/server/cli_parser.cpp, CLI11; CMakeLists.txt `set(EXECUTABLE_NAME "lemond")`
        # since v10.1.0). Its one positional is the cache directory (config.json and models),
        # never a model: models load at runtime. The image runs `./lemond --host 0.0.0.0`
        # (Dockerfile CMD); the systemd unit runs lemond too.
        LaunchForm(executables=("lemond",), max_positionals=1),
        # v9.x and v10.0.x: `lemonade-router` was the server (CMakeLists.txt v10.0.1
        # `set(EXECUTABLE_NAME "lemonade-router")`), every serve option at its top level
        # (src/cpp/server/cli_parser.cpp v10.0.1 `add_serve_options(&app_, config_)`).
        LaunchForm(executables=("lemonade-router",), max_positionals=0),
        # `lemonade-server serve [--port P] [--host H] ...`: up to v8 the Python console script
        # (`lemonade-server-dev`, setup.py v8.2.2; `lemonade-server` from its installer) served
        # in-process (src/lemonade_server/cli.py v8.2.2 `serve`); in v9 and v10.0 the tray
        # binary starts `lemonade-router` as its child with these options; from v10.1 to v10.5
        # the shim (src/cpp/legacy-cli/main.cpp v10.5.0 do_serve) execs `lemond` with
        # `--port`/`--host` (then the process is lemond's), or, given any other option
        # (`--log-level`, `--llamacpp`, ...), starts lemond as its child and waits. Removed in
        # v10.6.0 (#1918).
        LaunchForm(executables=("lemonade-server", "lemonade-server-dev"), subcommand=("serve",)),
        # `lemonade-server run MODEL`: "Chat with specified model (starts server if needed)"
        # (src/lemonade_server/cli.py v8.2.2; the tray of v9/v10.0 likewise: tray_app.cpp
        # v10.0.1 runs `serve` and `run` alike, loading MODEL and opening the chat); with a
        # server already running it only connects to it, which argv cannot tell. From v10.1
        # the shim execs `lemonade run`.
        LaunchForm(
            executables=("lemonade-server", "lemonade-server-dev"),
            subcommand=("run",),
            positional_model=True,
        ),
        # `lemonade` (the v10+ CLI: pull, list, run, status, ...) and `lemonade-server
        # list|pull|status|stop|delete|logs|recipes|launch` are clients of a running server:
        # no form names them.
    ),
    host_flags=("--host",),
    port_flags=("--port",),
    # CLI11 flags of lemond (`--broadcast,!--no-broadcast`) and of the v9/v10.0 CLI
    # (`--no-broadcast`, `--no-tray`, `run --save-options`); every other option takes a value
    # (src/cpp/server/recipe_options.cpp v10.0.1: `--ctx-size`, `--llamacpp`, `--flm-args`, ...).
    no_value_flags=frozenset({"--broadcast", "--no-broadcast", "--no-tray", "--save-options"}),
    # CLI11 `-h,--help`, `--help-all` (v10.0.1), `set_version_flag("-v,--version")`; argparse
    # `-v/--version` (src/lemonade_server/cli.py v8.2.2).
    exit_flags=frozenset({"-h", "--help", "--help-all", "-v", "--version"}),
    # src/cpp/resources/defaults.json: `"host": "localhost"`, `"port": 13305` (what lemond and
    # the v10.1-v10.5 shim serve on: legacy-cli/main.cpp v10.5.0 `int port = 13305`). Before,
    # 8000: src/cpp/include/lemon/cli_parser.h v10.0.1 `int port = 8000` (lemonade-router and
    # `lemonade-server serve` of v9/v10.0), and `DEFAULT_PORT = int(os.getenv("LEMONADE_PORT",
    # "8000"))` (src/lemonade_server/pydantic_models.py v8.2.2). One default per engine: the
    # current release's.
    default_host="localhost",
    default_port=13305,
)


SPEC = EngineSpec(
    id="lemonade",
    aliases=("lemond", "lemonade-server", "lemonade-sdk"),
    signature=SIGNATURE,
    # lemond serves with no arguments; `lemond --version` prints `lemond version X`
    # (cli_parser.cpp). Not on PyPI since the C++ server: release packages (deb, rpm, msi,
    # dmg), the snap or the image, run as a configured install command. (`pip install
    # lemonade-sdk` installed the Python server up to v8.)
    launch=Launch(kind="binary", executable="lemond"),
    # its C++ CLI: an option given several values is given once per value
    flags=Flags(list_style="repeat"),
    serving=Serving(
        # src/cpp/server/server.cpp handle_health: GET /api/v1/health (also /api/v0, /v0, /v1)
        # answers 200 {"status": "ok", "version": LEMON_VERSION_STRING, "model_loaded": <name or
        # null>, "all_models_loaded": [{"model_name", "checkpoint", "type", "device",
        # "backend_url", "pid", "status", "recipe", ...}], "max_models": ..., ...}
        # (router.cpp get_all_loaded_models) as soon as it listens: models load on request.
        health_path="/api/v1/health",
        health_rules=(
            HealthRule(status=200, field="status", equals="ok", state="ready"),
            HealthRule(status=200, state="unknown", reason="not Lemonade's /api/v1/health answer"),
        ),
        version_path="/api/v1/health",
        version_key="version",
        # llama-server answers /v1/health with {"status":"ok"} too, and vLLM/LM Studio/others
        # share port 8000 of the older releases: only Lemonade's health answer lists
        # `all_models_loaded` (server.cpp handle_health).
        identity=IdentityProbe(path="/api/v1/health", status=200, contains='"all_models_loaded"'),
        # server.cpp: with LEMONADE_API_KEY set, every /api/, /v0/, /v1/ route (health, models,
        # load, unload) wants it as a bearer token, else answers 401 {"error": "Invalid or
        # missing API key"}; LEMONADE_ADMIN_API_KEY is accepted there too but gates only
        # /internal/* when LEMONADE_API_KEY is unset.
        api_key_env=("LEMONADE_API_KEY",),
        # It starts one backend server per loaded model as its child (the `pid` and
        # `backend_url` of each entry above): llama-server from
        # ~/.cache/lemonade/bin/llamacpp/<backend>/, `flm serve`, whisper-server, vLLM, ...
        # Each is its runner, whatever its own engine.
        starts_runners=True,
    ),
    # GET /metrics on its API port (v10.7.0 on; server.cpp handle_metrics, behind
    # LEMONADE_API_KEY like the API routes), built by src/cpp/server/prometheus_metrics.cpp
    # build_prometheus_metrics @ v11.7.0: its own counters of the requests it answered
    # (router.cpp record_telemetry: per finished request, from the backend's usage),
    # lemonade_prompt_tokens_total (a request's prompt tokens, its input tokens where the
    # backend reports no prompt count) and lemonade_output_tokens_total; then, for each loaded
    # model whose backend exposes Prometheus metrics (backend_descriptor.h
    # exposes_prometheus_metrics: llama.cpp only, started with `--metrics`,
    # llamacpp_server.cpp), the runner's own /metrics, each name sanitized and its `llamacpp_`
    # prefix replaced by `lemonade_llamacpp_` (normalize_llamacpp_metric_name), with the model's
    # labels added: llama-server's requests_processing, requests_deferred, kv_cache_usage_ratio.
    # Other backends (FastFlowLM, vLLM, whisper.cpp, ...) report no request counts there.
    load=LoadMetrics(
        kind="prometheus",
        requests_running=("lemonade_llamacpp_requests_processing",),
        requests_waiting=("lemonade_llamacpp_requests_deferred",),
        kv_cache_usage=("lemonade_llamacpp_kv_cache_usage_ratio",),
        prompt_tokens=("lemonade_prompt_tokens_total",),
        generated_tokens=("lemonade_output_tokens_total",),
        note="Lemonade counts a request's tokens when it ends (tokens per second is of the requests "
        "finished between two readings); running and waiting are its llama.cpp backends' only",
    ),
    # lemond reads `port` and `host` from config.json in its cache directory
    # (src/cpp/server/main.cpp: `--port`/`--host` override config.json and are persisted to
    # it; runtime_config.cpp RuntimeConfig::port/host), the cache directory being ~/.cache/lemonade
    # on Linux (src/cpp/server/utils/platform/path_linux.cpp get_cache_dir). A cache directory
    # given as lemond's positional, or by LEMONADE_CACHE_DIR (path_utils.cpp get_cache_dir), is
    # not followed: the home's file is read.
    settings=Settings(
        config_format="json",
        home_config=".cache/lemonade/config.json",
        config_keys={"port": "port", "host": "host"},
    ),
    # Which models it runs a backend for now is its health answer's `all_models_loaded`, each
    # `model_name` with its `status` (loading, ready, in_use, downsizing, downsized, evicting:
    # src/cpp/include/lemon/model_types.h model_state_to_string) and `backend_url`
    # `http://127.0.0.1:PORT/v1` (router.cpp get_all_loaded_models, wrapped_server.h
    # get_base_url; a backend no longer alive is left out), matched to its runners by that port.
    # GET /api/v1/models (server.cpp handle_models): an OpenAI list of the models downloaded
    # (`?show_all=true`: every model it knows), each loaded on its first request or by /load.
    models=ModelList(kind="lemonade", path="/api/v1/health", available_path="/api/v1/models", runners=True),
    # server.cpp register_post("load"/"unload"), under /api/v0, /api/v1, /v0 and /v1:
    # `POST /api/v1/load {"model_name": NAME}` (handle_load) downloads a model not yet
    # downloaded, then loads it and answers only once it is loaded, 200 {"status": "success",
    # "model_name", "checkpoint", "recipe"}; an unknown model is 404 {"error": {"message":
    # "Model not found", ...}} (create_model_error). `POST /api/v1/unload {"model_name": NAME}`
    # (handle_unload; with no name it unloads every model) answers 200 {"status": "success",
    # "message": "Model unloaded successfully", "model_name"}, or 404 {"error": "Model not
    # loaded: NAME"} (router.cpp unload_model).
    control=ModelControl(
        load=ControlRequest(path="/api/v1/load", body={"model_name": "{model}"}),
        unload=ControlRequest(path="/api/v1/unload", body={"model_name": "{model}"}),
    ),
    # Its runners are llama-server (and FastFlowLM, ONNX Runtime GenAI); up to v9 a Python server.
    # Its own words (lemonade e385039ed): src/cpp/include/lemon/utils/custom_args.h `Argument 'X'
    # is managed by Lemonade and cannot be overridden.` (a runner option it sets itself, given in
    # the model's custom arguments); src/cpp/server/model_manager.cpp `Download validation failed.
    # Some files are incomplete or missing.` (a file partial, missing, or a .gguf without GGUF's
    # magic); src/cpp/server/wrapped_server.cpp's guesses after a runner's exit (`This usually
    # means:` and its list) only wrap the runner's own lines.
    failures=Failures(
        patterns=(
            FailurePattern(
                kind="bad_flag",
                pattern=r"Argument '(?P<flag>-[^']+)' is managed by Lemonade and cannot be overridden",
                hint="Lemonade sets {flag} itself: remove it from the model's llama-server arguments",
            ),
            # its sd-server runner (stable-diffusion.cpp's stable-diffusion.cpp new_sd_ctx, found by
            # the exact-string search: `get sd version from file failed: '%s'`): a file of no model
            # family it knows (an upscaler's, an LLM's)
            FailurePattern(
                kind="unsupported_architecture",
                pattern=r"get sd version from file failed",
                hint="stable-diffusion.cpp knows no model family in that file: give it an image model it "
                "supports (with its VAE and text encoders)",
            ),
            FailurePattern(
                kind="corrupt_model",
                pattern=r"Download validation failed\. Some files are incomplete or missing",
                hint="the model's download is incomplete or damaged: pull the model again",
            ),
        ),
        wrappers=(
            r"This usually means:\s*$",
            r"^\s*- (?:Missing required drivers|Incompatible model file|Try running)",
        ),
    )
    + llamacpp.FAILURES
    + _libraries.PYTHON_SERVER,
)
