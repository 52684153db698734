"""Mozilla's llamafile: the ``llamafile`` binary, self-contained ``x.llamafile`` files and the v2
server ``llamafiler``.

Facts from Mozilla-Ocho/llamafile tag 0.9.3 (``ff0c02e6``) unless a line says otherwise.
"""

from __future__ import annotations

import enginespec.engines._libraries as _libraries
from enginespec.definition.records import Flags, Launch, Serving
from enginespec.definition.signature import Evidence, LaunchForm, Signature
from enginespec.failures import FailurePattern, Failures
from enginespec.spec import EngineSpec

# An APE executable is a shell script to the kernel: its prologue execs a loader with the file as
# its first argument, so /proc shows `[loader, ./x.llamafile, args...]`. The loader is `ape` when
# one is on PATH (`exec ape "$o" "$@"`), else the one the prologue extracts to
# `${TMPDIR:-${HOME:-.}}/.ape-1.10` (`.ape-1.9` in older builds; README.md "extracts a small loader
# program named ape to $TMPDIR/.llamafile or ~/.ape-1.9"); a binfmt_misc registration runs
# `/usr/bin/ape` (README.md lines 326-329), which cosmo.zip ships as `ape-x86_64.elf` /
# `ape-aarch64.elf` (the names it is downloaded under).
# `sh ./x.llamafile` (the README's advice where the kernel or zsh refuses the file) has sh read the
# prologue, which then execs the loader.
_LOADERS = ("ape", "ape-x86_64.elf", "ape-aarch64.elf", "ape-arm64.elf", "sh")
# Every loader version: `.ape-1.9`, `.ape-1.10`, and the next ones.
_LOADER_PREFIXES = (".ape-",)

SIGNATURE = Signature(
    engine="llamafile",
    launch_forms=(
        LaunchForm(executables=("llamafile",), loaders=_LOADERS, loader_prefixes=_LOADER_PREFIXES),
        # The standalone v2 server, the same program as `llamafile --server --v2`
        # (llamafile/server/doc/getting_started.md): it always serves.
        LaunchForm(executables=("llamafiler",), loaders=_LOADERS, loader_prefixes=_LOADER_PREFIXES),
        # A llamafile with its weights and default arguments inside (`/zip/.args`,
        # llama.cpp/main/main.cpp cosmo_args): the file is the model.
        LaunchForm(
            executable_suffixes=(".llamafile",),
            loaders=_LOADERS,
            loader_prefixes=_LOADER_PREFIXES,
            program_model=True,
        ),
        # A llamafile under any other name (copied to `./model`, run by binfmt_misc as
        # `/usr/bin/ape /srv/model`): an APE loader runs it and llamafile's own flags are given
        # (`--server`, `-m/--model`). The file is the model unless `-m` names one.
        LaunchForm(
            any_program=True,
            loaders=tuple(loader for loader in _LOADERS if loader != "sh"),
            loader_prefixes=_LOADER_PREFIXES,
            program_model=True,
            evidence=Evidence(any_flags=("--server", "--model")),
        ),
        # sh runs any script: only `--server`, which no common script takes, tells a llamafile.
        LaunchForm(
            any_program=True, loaders=("sh",), program_model=True, evidence=Evidence(any_flags=("--server",))
        ),
    ),
    # llama.cpp/server/server.cpp server_params_parse (the old server) and llamafile/flags.cpp (v2).
    aliases={
        "-m": "--model",
        "-a": "--alias",
        "--listen": "-l",
        "-c": "--ctx-size",
        "-ngl": "--n-gpu-layers",
        "--gpu-layers": "--n-gpu-layers",
        "-np": "--parallel",
    },
    model_flags=("--model",),
    served_name_flags=("--alias",),
    host_flags=("--host",),
    port_flags=("--port",),
    # v2 listens where `-l/--listen HOST:PORT` says (llamafile/flags.cpp FLAG_listen).
    address_flags=("-l",),
    # main() prints and exits on these anywhere in argv (llama.cpp/main/main.cpp lines 186-200).
    exit_flags=frozenset({"--version", "-h", "-help", "--help"}),
    # determine_program (main.cpp lines 159-181): the last mode flag wins. `--server` serves;
    # `--cli`, `--chat` (chatbot only), `--embedding`, `--localscore` do not; `--bench` runs
    # LocalScore (localscore/README.md).
    mode_flags={
        "--server": True,
        "--cli": False,
        "--chat": False,
        "--embedding": False,
        "--localscore": False,
        "--bench": False,
    },
    # With no mode flag llamafile runs its terminal chatbot with a web server thread
    # (llamafile/chatbot_main.cpp `want_server`), unless a prompt asks for one-shot CLI output
    # (`-p`, `-f`, `--random-prompt`, compared as written; main.cpp lines 215-219) or `--v2` drops
    # that thread.
    modeless_exit_flags=frozenset({"-p", "-f", "--random-prompt", "--v2"}),
    secret_flags=frozenset({"--api-key"}),
    # server_params: hostname 127.0.0.1, port 8080 (server.cpp lines 40, 44); v2 FLAG_listen
    # 127.0.0.1:8080 (flags.cpp line 62). A busy port makes the old server try port+1 up to ten
    # times (server.cpp line 3138): the listening ports the scan reads are the truth.
    default_host="127.0.0.1",
    default_port=8080,
)

# An APE file run where binfmt_misc hands MZ executables to WINE's (binfmt-support's)
# run-detectors instead of the APE loader: `run-detectors: unable to find an interpreter for
# FILE` (seen in logs only: https://github.com/mozilla-ai/llamafile/issues/513).
FAILURES = (
    Failures(
        patterns=(
            # llamafile/cuda.c and metal.c (found by the exact-string search): `fatal error: support
            # for --gpu X was explicitly requested, but it wasn't available`: its GPU module could not
            # be built (no nvcc or hipcc) or loaded, and no prebuilt one came with it
            FailurePattern(
                kind="dependency_error",
                pattern=r"support for --gpu \w+(?: --tinyblas)? was explicitly requested, "
                r"but it wasn't available",
                hint="llamafile could not build or load its GPU module (the CUDA or ROCm toolkit it compiles "
                "with, or a prebuilt one): see the lines before, or run without --gpu",
            ),
            FailurePattern(
                kind="dependency_error",
                pattern=r"run-detectors: unable to find an interpreter for",
                hint="the system does not run APE files: register the APE loader with binfmt_misc "
                "(llamafile's README, Gotchas) or run it as `sh FILE`",
            ),
        )
    )
    + _libraries.LLAMA_ARGS
    + _libraries.LLAMA_CPP
)

SPEC = EngineSpec(
    id="llamafile",
    signature=SIGNATURE,
    launch=Launch(kind="binary", executable="llamafile", args=("--server",)),
    # server.cpp server_params_parse lines 2354, 2473, 2661.
    flags=Flags(
        fields={
            "max_model_len": ("--ctx-size",),
            "gpu_layers": ("--n-gpu-layers",),
            "max_num_seqs": ("--parallel",),
        },
        list_style="repeat",
    ),
    # The old server's /health is 200 {"status": "ok", ...} but v2 has none (llamafile/server/
    # client.cpp dispatches v1/models, v1/completions, ... only); both list the model at
    # /v1/models, and both bind their port only after the model is loaded (server.cpp lines
    # 3124/3139), so an answer there is ready.
    serving=Serving(health_path="/v1/models", api_key_flag="--api-key"),
    failures=FAILURES,
)
