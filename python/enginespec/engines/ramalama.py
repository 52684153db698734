"""RamaLama: ``ramalama serve MODEL``, which runs the model's server (llama-server, vLLM,
mlx_lm.server) in a container, or as its own child with ``--nocontainer`` or the MLX runtime.

Facts from containers/ramalama v0.24.0 (``8bc1f0a3``, 2026-08-21) unless a line says otherwise;
the files cited are at that tag. Checked against ramalama 0.25.0 from PyPI, run for real by
tests/real/test_ramalama.py: its argv forms are those of v0.24.0; its default host is not.
"""

from __future__ import annotations

import enginespec.engines._libraries as _libraries
from enginespec.definition.records import ContainerLabels, Flags, Launch, Package, Serving, Settings
from enginespec.definition.servedrecords import ModelList
from enginespec.definition.signature import LaunchForm, Signature
from enginespec.engines import llamacpp, vllm
from enginespec.spec import EngineSpec

#: The main parser's options (ramalama/cli.py configure_arguments), which argparse takes before the
#: subcommand: these take a value ...
_GLOBAL_VALUES = ("--engine", "--runtime", "--store", "--noout")
#: ... these none (`--container` is hidden; `--nocontainer` stores False in `container`).
_GLOBAL_SWITCHES = ("--container", "--debug", "--nocontainer", "--quiet", "-q")
#: The main parser's exits: argparse's help, `-v`/`--version` (action="version"); `--dryrun`
#: (`--dry-run`) prints the command instead of running it, and parse_args_from_cmd takes it, or
#: `--generate`, anywhere in argv as a dry run.
_GLOBAL_EXITS = ("-h", "--help", "-v", "--version", "--dryrun", "--dry-run")

SIGNATURE = Signature(
    engine="ramalama",
    launch_forms=(
        # `ramalama [GLOBAL OPTIONS] serve [OPTIONS] MODEL`: the serve parser of the runtime plugin
        # (plugins/runtimes/inference/common.py _register_serve_subcommand, runtime_options of
        # ramalama/cli.py; the llama.cpp plugin takes `MODEL nargs="*"`: none or several models serve a
        # llama.cpp router, container only, llama_cpp.py _serve_handler). Not containerised
        # (`--nocontainer`, no container engine, the MLX runtime), it runs the server as its child
        # and waits for it (transports/base.py execute_command, common.py exec_cmd:
        # subprocess.run, then sys.exit with its status); containerised, it runs `podman|docker
        # run ... IMAGE llama-server ...` the same way (the container's server is the container
        # engine's, not this process's child). `run` (a chat), `bench`, `pull`, `list`, `ps`,
        # `stop`, `rag`, `daemon`, ... are other subcommands: not this form.
        LaunchForm(
            executables=("ramalama",),
            subcommand=("serve",),
            positional_model=True,
            leading_flags=_GLOBAL_VALUES,
            leading_switches=(*_GLOBAL_SWITCHES, *_GLOBAL_EXITS),
        ),
    ),
    # common.py _add_inference_args: `-p`/`--port` (parse_port_option), `--host` (serve only);
    # `-c` is `--ctx-size`, `-n` `--name` (the container's name), `-t` `--threads`, `-d`
    # `--detach` (store_true).
    aliases={"-p": "--port", "-q": "--quiet"},
    host_flags=("--host",),
    port_flags=("--port",),
    # serve's store_true options (ramalama/cli.py runtime_options: `-d/--detach`, `--keep-groups`,
    # `--privileged`) and the globals, if given after `serve` (argparse then fails: an exit too).
    no_value_flags=frozenset({"-d", "--detach", "--keep-groups", "--privileged", *_GLOBAL_SWITCHES}),
    # `--generate quadlet|kube|quadlet/kube|compose[:DIR]` writes files for a service and exits
    # (common.py _do_serve: generate_container_config, then return).
    exit_flags=frozenset({*_GLOBAL_EXITS, "--generate"}),
    # `--authfile` names a file, `--env` may carry tokens for the container: not argv secrets by
    # name; login's `--password`, `--token` belong to another subcommand.
    # config.py BaseConfig: `port = "8080"`. Host: ramalama 0.25.0 (PyPI, ramalama/config.py
    # get_default_host) returns "127.0.0.1", the loopback, every interface being opt-in with
    # `--host`; a container's port is published on that host too (host_utils.py
    # format_vm_aware_publish_prefix; a VM-backed engine on macOS or Windows publishes on all of
    # the VM's, its proxy exposing the host's loopback). Up to v0.24.0 it returned "::" where
    # IPv6 sockets could be made, else "0.0.0.0". The newest release is taken. Seen for real:
    # tests/real/test_ramalama.py, whose `ramalama serve` without `--host` runs `llama-server
    # --host 127.0.0.1`. Without `--port`, RamaLama takes the first free port of 8080..8180, 8080
    # first (transports/base.py compute_serving_port, get_available_port_if_any; config.py
    # default_port_range): 8080 is where it listens when 8080 was free.
    default_host="127.0.0.1",
    default_port=8080,
)


SPEC = EngineSpec(
    id="ramalama",
    signature=SIGNATURE,
    # pyproject.toml: `ramalama = "ramalama.cli:main"`; the package has no __main__.
    launch=Launch(
        kind="console_script",
        executable="ramalama",
        args=("serve",),
        module_args=("-c", "from ramalama.cli import main; main()", "serve"),
    ),
    # A model without a scheme is a shortname or, holding a "/", a Hugging Face repo
    # (transports/transport_factory.py detect_model_model_type: `/srv/m.gguf` is fetched as
    # `hf://srv/m.gguf`); a local file is `file:` (the URL transport, prune_model_input ->
    # path_utils.py file_uri_to_path, which unquotes it). Seen for real: tests/real/test_ramalama.py.
    flags=Flags(model_uri=True),
    # PyPI `ramalama` (pyproject.toml `name = "ramalama"`); it needs podman or docker (or the
    # runtimes on the host with --nocontainer).
    package=Package(distributions=("ramalama",)),
    serving=Serving(
        # RamaLama serves nothing itself: its port is its server's, llama-server by default
        # (llama_cpp.py service_ready_check asks `/health`; the runtime's default is "llama.cpp",
        # config.py). Its identity is that server's: no probe tells RamaLama apart.
        health_rules=_libraries.LLAMA_SERVER_HEALTH,
        # The server it runs as its child (not containerised: llama-server, `vllm serve`,
        # mlx_lm.server) is its runner, whatever that server's engine.
        starts_runners=True,
        # Containerised (ramalama 0.25.0), it runs `podman|docker run --rm [-d] --label
        # ai.ramalama.model=MODEL --label ai.ramalama.engine=ENGINE --label ai.ramalama.runtime=
        # RUNTIME --label ai.ramalama.port=PORT --label ai.ramalama.command=serve ... -p
        # [HOST:]PORT:PORT ... --label ai.ramalama --name NAME --env=HOME=/tmp --init ... IMAGE
        # llama-server --host :: --port PORT --model /mnt/models/FILE ... --alias ALIAS`
        # (engine.py add_labels (labels set only when the value is), Engine.add_port_option;
        # transports/base.py base: `--label ai.ramalama`, `--name` (`--name`, else genname():
        # `ramalama-` and 10 letters/digits, common.py); plugins/runtimes/inference/
        # llama_cpp_commands.py _cmd_run: `--models-dir /mnt/models`, no model, in router
        # mode). `ramalama ps` lists the containers by that label (engine.py: `--filter
        # label=ai.ramalama`). The container's server is the container engine's process, not
        # its child: the label makes it its runner, as its child is, and `-d` leaves only it.
        container_labels=ContainerLabels(marker="ai.ramalama", model="ai.ramalama.model"),
    ),
    # ramalama/config.py (0.25.0, PyPI): ActiveConfig() = Config(load_file_config(),
    # load_env_config()), layered by LayeredMixin (layered_config.py: deep_merge of the file
    # layer, then the environment's over it), and `--host`/`--port` take them as their argparse
    # defaults (plugins/runtimes/inference/common.py: `default=config.host`, `config.port`):
    # argv > environment > files > default. load_env_config: every RAMALAMA* variable, its name
    # past "RAMALAMA" with "_" stripped and lower-cased, is a key (RAMALAMA_HOST `host`,
    # RAMALAMA_PORT `port`; the last of them in the environment wins, as here). load_file_config:
    # RAMALAMA_CONFIG's file where it exists, else each of DEFAULT_CONFIG_DIRS' `ramalama.conf`
    # and then its `ramalama.conf.d/*.conf` (sorted), later keys over earlier ones (TOMLParser,
    # toml_parser.py); its `[ramalama]` table. DEFAULT_CONFIG_DIRS (_get_default_config_dirs):
    # `{sys.prefix}/share/ramalama`, `{sys.prefix}/local/share/ramalama`, /etc/ramalama,
    # `$XDG_DATA_HOME` (else ~/.local/share) `/ramalama`, `$XDG_CONFIG_HOME` (else ~/.config)
    # `/ramalama`; sys.prefix is read as /usr, a distribution's Python (the shipped
    # ramalama.conf names /usr/share/ramalama/ramalama.conf first): a virtual environment's
    # prefix is not known here and its copy (the wheel installs an all-commented one) is not
    # read. A port from them, as the default, is the first of its range of 100 (config.py
    # default_port_range): where it listens when that port is free.
    settings=Settings(
        environment={"RAMALAMA_HOST": "host", "RAMALAMA_PORT": "port"},
        config_environment="RAMALAMA_CONFIG",
        config_format="toml",
        config_files=(
            "/usr/share/ramalama/ramalama.conf",
            "/usr/local/share/ramalama/ramalama.conf",
            "/etc/ramalama/ramalama.conf",
            "${XDG_DATA_HOME-~/.local/share}/ramalama/ramalama.conf",
            "${XDG_CONFIG_HOME-~/.config}/ramalama/ramalama.conf",
        ),
        config_dropins=".conf",
        config_keys={"ramalama.host": "host", "ramalama.port": "port"},
        environment_over_config=True,
    ),
    # llama-server, vLLM and mlx_lm.server all list their models at /v1/models.
    models=ModelList(kind="openai", path="/v1/models"),
    # `ramalama serve` runs its server in the foreground (llama-server by default, vLLM, mlx_lm):
    # their messages, then its own Python's
    failures=llamacpp.FAILURES + vllm.FAILURES + _libraries.PYTHON_SERVER,
)
