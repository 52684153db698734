"""FastFlowLM: ``flm serve [MODEL]``, an Ollama- and OpenAI-compatible server running models on
AMD Ryzen AI NPUs (Windows, and Linux with the amdxdna driver).

Facts from FastFlowLM/FastFlowLM at the commits named beside each: the Boost.Program_options
parser src/include/utils/vm_args.hpp and src/src/main.cpp at ``0a1c1d3b``, the default port
src/common/utils.cpp at ``756bcf90``, the routes src/server/server.cpp at ``15577764``
(create_lm_server).
"""

from __future__ import annotations

from enginespec.definition.records import (
    Flags,
    HealthRule,
    IdentityProbe,
    Launch,
    Serving,
    Settings,
)
from enginespec.definition.signature import LaunchForm, Signature
from enginespec.engines import _libraries
from enginespec.spec import EngineSpec

SIGNATURE = Signature(
    engine="fastflowlm",
    launch_forms=(
        # `flm <command> [options] [model_tag]` (vm_args.hpp print_help; the positionals are
        # `command` then `model_tag`, one each). Only `serve` serves (main.cpp main); `run` (a chat
        # in the terminal), `pull`, `remove`, `check`, `list`, `bench`, `validate`, `version`,
        # `port` and `help` do their work and exit. `flm serve` with no model serves with none
        # loaded (`model-faker`), loading one on request. A third positional is Boost's "too many
        # positional options" (parse_options returns false: exit 1).
        LaunchForm(executables=("flm",), subcommand=("serve",), positional_model=True, max_positionals=1),
    ),
    # vm_args.hpp parse_options: `port,p`, `ctx-len,c`, `asr,a`, `embed,e`, `json,j`,
    # `img-pre-resize,r`, `socket,s`, `q-len,q`, `prompt,i`, `help,h`, `version,v`.
    aliases={
        "-p": "--port",
        "-c": "--ctx-len",
        "-a": "--asr",
        "-e": "--embed",
        "-j": "--json",
        "-r": "--img-pre-resize",
        "-s": "--socket",
        "-q": "--q-len",
        "-i": "--prompt",
    },
    # `host` default "127.0.0.1"; `port` default -1, then utils::get_server_port: FLM_SERVE_PORT,
    # else 52625 (utils.cpp).
    host_flags=("--host",),
    port_flags=("--port",),
    # The `po::bool_switch` options take no value; every other option takes one (`--asr 1`,
    # `--cors 0`: `po::value<bool>`).
    no_value_flags=frozenset({"--force", "--quiet", "--json", "--hf"}),
    exit_flags=frozenset({"-h", "--help", "-v", "--version"}),
    # Boost's default command_line_style has allow_guessing: a unique prefix of a long option is
    # that option (`--po 8000`); enginespec reads the full spellings only (and FastFlowLM has no
    # secret flag whose abbreviations would need hiding).
    default_host="127.0.0.1",
    default_port=52625,
)

SPEC = EngineSpec(
    id="fastflowlm",
    aliases=("flm",),
    signature=SIGNATURE,
    # Not installed by enginespec: a Windows installer, or .deb/.rpm/snap packages (README). `flm
    # version` prints `FLM v<version>` (main.cpp).
    launch=Launch(kind="binary", executable="flm", args=("serve",), version_args=("version",)),
    # Boost.Program_options: a multi-token option is given once per value
    flags=Flags(list_style="repeat"),
    serving=Serving(
        # server.cpp create_lm_server: `GET /health` (and `/v1/health`) answer 200
        # {"status": "ok"}. The RestHandler loads the model given before the WebServer starts
        # (create_lm_server constructs it, main.cpp then calls server->start()), so the port
        # refuses connections while it loads.
        health_path="/health",
        health_rules=(
            HealthRule(status=200, field="status", equals="ok", state="ready"),
            HealthRule(status=200, state="unknown", reason="not FastFlowLM's /health answer"),
        ),
        # `GET /api/npu/status` is FastFlowLM's own route: {"npu_available", "active_requests",
        # "message"} (server.cpp). Its /api/version, /api/tags and /api/ps copy Ollama's.
        identity=IdentityProbe(path="/api/npu/status", status=200, contains='"npu_available"'),
    ),
    settings=Settings(environment={"FLM_SERVE_PORT": "port"}),
    # a native server of its own runtime (no vocabulary of its own known): the layers every
    # process passes through
    failures=_libraries.BASE,
)
