"""oMLX: ``omlx serve``, a multi-model OpenAI-compatible MLX server for Apple Silicon Macs (the
macOS app and ``brew services start omlx`` run the same ``omlx serve``).

Facts from jundot/omlx: omlx/cli.py at ``01496518`` (the argparse CLI, the version the corpus's
README line is from), omlx/settings.py and pyproject.toml at ``004308c9`` (where settings.json
is and how it is read: see Settings below).
"""

from __future__ import annotations

from enginespec.definition.records import Flags, IdentityProbe, Launch, Package, Serving, Settings
from enginespec.definition.servedrecords import ModelList
from enginespec.definition.signature import LaunchForm, Signature
from enginespec.engines import mlx, mlx_vlm
from enginespec.spec import EngineSpec

SIGNATURE = Signature(
    engine="omlx",
    launch_forms=(
        # `omlx = "omlx.cli:main"` (pyproject.toml [project.scripts]); `omlx serve [options]`
        # (omlx/cli.py main's subparsers). `serve` takes no positional argument (the parser's epilog
        # example `omlx serve MODEL --port 8000` is an argparse error), so one is a usage error.
        # `launch TOOL` (starts a coding tool against a running server) and `diagnose menubar`
        # are clients; `omlx` alone prints the help and exits 1. omlx/cli.py ends with
        # `if __name__ == "__main__": main()`: `python -m omlx.cli serve` is the same.
        LaunchForm(executables=("omlx",), modules=("omlx.cli",), subcommand=("serve",), max_positionals=0),
        # The server retitles itself: pyproject.toml's dependency `setproctitle>=1.3.3` says
        # "Native process title support (shows as omlx-server instead of python)", and ps then
        # shows the title alone, argv gone (its own flags are not there to read).
        LaunchForm(executables=("omlx-server",)),
    ),
    # `--model-dir` is a directory of model subdirectories, each a model (omlx/cli.py help; a
    # comma-separated list in omlx/settings.py _apply_cli_overrides): no one model, none read.
    host_flags=("--host",),
    port_flags=("--port",),
    # store_true flags of the serve parser.
    no_value_flags=frozenset({"--paged-ssd-cache-clear-on-unload", "--no-cache"}),
    exit_flags=frozenset({"-h", "--help"}),
    secret_flags=frozenset({"--api-key"}),
    # argparse's default allow_abbrev (omlx/cli.py builds its parsers with it).
    abbreviations=True,
    # omlx/settings.py ServerSettings: host "127.0.0.1", port 8000 (omlx/cli.py help: "default: 8000").
    default_host="127.0.0.1",
    default_port=8000,
)

SPEC = EngineSpec(
    id="omlx",
    signature=SIGNATURE,
    # PyPI-style package `omlx` (pyproject.toml), macOS only (MLX); also a DMG app and a Homebrew
    # formula. Not installed by enginespec here: it pins git dependencies (mlx-lm, mlx-vlm, ...).
    launch=Launch(
        kind="console_script", executable="omlx", args=("serve",), module_args=("-m", "omlx.cli", "serve")
    ),
    # argparse, no positionals: an option given several values is given once per value
    flags=Flags(list_style="repeat"),
    package=Package(distributions=("omlx",)),
    serving=Serving(
        # omlx/cli.py launch_command checks a server by `GET {base_url}/health` and raise_for_status,
        # without the API key: any 2xx is up. Models load on request (LRU engine pool), so an
        # answering server is ready.
        health_path="/health",
        # vLLM, TensorRT-LLM and Dynamo also default to 8000: `GET /v1/models/status` is oMLX's own
        # route (omlx/cli.py launch_command reads its `models` list, each with `max_context_window`,
        # `max_tokens`, `model_type`).
        identity=IdentityProbe(path="/v1/models/status", status=200, contains='"models"'),
        api_key_flag="--api-key",
        api_key_env=("OMLX_API_KEY",),
    ),
    # omlx/settings.py GlobalSettings.load: "CLI > env > file > defaults". The file is
    # settings.json in the base path: `--base-path` (omlx/cli.py serve, passed as
    # init_settings(base_path=args.base_path)), else resolve_default_base_path(): OMLX_BASE_PATH
    # when set and not empty, else the one line of ~/Library/Application Support/oMLX/base-path
    # (BASE_PATH_BOOTSTRAP_FILE, the macOS app writes it; stripped, when not empty), else
    # ~/.omlx (DEFAULT_BASE_PATH, Path.home(): HOME first). _load_from_file: its `server`
    # section, ServerSettings.from_dict: `host` (a list is joined with ", ": several binds, the
    # first taken here), else `bind_address`, and `port`. _apply_env_overrides: OMLX_HOST,
    # OMLX_PORT when not empty, over the file; _apply_cli_overrides: --host, --port over both.
    settings=Settings(
        environment={"OMLX_HOST": "host", "OMLX_PORT": "port"},
        config_format="json",
        home_config=".omlx/settings.json",
        home_pointer=("Library/Application Support/oMLX/base-path", ".omlx"),
        home_directory_flag="--base-path",
        home_directory_environment="OMLX_BASE_PATH",
        config_keys={"server.bind_address": "host", "server.host": "host", "server.port": "port"},
        environment_over_config=True,
    ),
    # OpenAI `GET /v1/models` (omlx/cli.py launch_command reads `data[].id`).
    models=ModelList(kind="openai", path="/v1/models"),
    # oMLX loads its models with mlx-lm and mlx-vlm in its own process: their messages
    failures=mlx.FAILURES + mlx_vlm.FAILURES,
)
