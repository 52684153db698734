"""exo: ``exo``, a node of an exo cluster (exo-explore/exo), which serves the cluster's
OpenAI-compatible API and dashboard on its own port.

Facts from exo-explore/exo: the current exo (1.x) src/exo/main.py at ``0079d5d0`` (``Args.parse``),
src/exo/master/api.py at ``00c88a11`` (``API._setup_routes``, ``API.run``) and pyproject.toml at
``00a9c3c4`` (``exo = "exo.main:main"``); the older exo 0.x exo/main.py at ``0211cb0b``, its
routes in exo/api/chatgpt_api.py. Neither takes a model on the command line: models are placed
on the cluster through the API.
"""

from __future__ import annotations

from enginespec.definition.records import Flags, Launch, Serving
from enginespec.definition.signature import LaunchForm, Signature
from enginespec.engines import mlx
from enginespec.spec import EngineSpec

SIGNATURE = Signature(
    engine="exo",
    launch_forms=(
        # The console script `exo` (pyproject.toml [project.scripts], both generations), often run
        # by its venv's interpreter (`/opt/exo/venv/bin/python3 /opt/exo/venv/bin/exo`). exo 1.x
        # takes no positional argument; exo 0.x takes `[run] [MODEL]` (`command` choices=["run"]):
        # `exo run MODEL` answers one prompt in the terminal and exits, any other first positional
        # is an argparse error. So no positional is ever a server's.
        LaunchForm(executables=("exo",), exit_subcommands=("run",), max_positionals=0),
    ),
    aliases={"-q": "--quiet", "-v": "--verbose", "-m": "--force-master"},
    # exo 1.x `--api-port` (default 52415, Args.api_port); exo 0.x `--chatgpt-api-port` (default
    # 52415). exo 1.x binds `0.0.0.0:{port}` (src/exo/master/api.py API.run), with no host flag.
    port_flags=("--api-port", "--chatgpt-api-port"),
    # store_true/store_false/count/store_const flags of both parsers (0.x: --download-quick-check,
    # the BooleanOptionalAction --disable-tui/--no-disable-tui).
    no_value_flags=frozenset(
        {
            "--quiet",
            "--verbose",
            "--force-master",
            "--no-api",
            "--no-worker",
            "--no-downloads",
            "--offline",
            "--fast-synch",
            "--no-fast-synch",
            "--download-quick-check",
            "--disable-tui",
            "--no-disable-tui",
        }
    ),
    exit_flags=frozenset({"-h", "--help"}),
    # 0.x `--run-model M`: one prompt in the terminal, then exit (main: `if args.command == "run"
    # or args.run_model`), even without `run`.
    mode_flags={"--run-model": False},
    # exo 1.x `--no-api` (store_false spawn_api): the node joins the cluster (worker, master
    # election) but serves no API.
    follower_flags=frozenset({"--no-api"}),
    abbreviations=True,
    # Every node's API process tree (runner subprocesses spawned with multiprocessing "spawn").
    fold_workers=True,
    default_host="0.0.0.0",
    default_port=52415,
)

SPEC = EngineSpec(
    id="exo",
    signature=SIGNATURE,
    # Run from a checkout (a uv workspace: pyproject.toml [tool.uv]); not
    # installed by enginespec.
    launch=Launch(kind="binary", executable="exo"),
    # argparse, no positionals: an option given several values is given once per value
    flags=Flags(list_style="repeat"),
    serving=Serving(
        # exo 1.x has no health route (API._setup_routes); `GET /v1/models` (the model cards it
        # can place, always 200 once the API runs) is answered by both 1.x and 0.x, so an answer
        # there is the server up. Models load when placed on the cluster, per instance.
        health_path="/v1/models",
    ),
    # `/v1/models` lists every model card exo knows, placed or not (get_models): not what it
    # serves, so not read as its served models.
    # exo runs its models with MLX (mlx-lm) in its own processes: mlx-lm's and MLX's messages
    failures=mlx.FAILURES,
)
