"""KoboldCpp: ``koboldcpp.py`` and its PyInstaller release binaries.

Facts from LostRuins/koboldcpp tag v1.76 (``2da346a5``, koboldcpp.py) unless a line says otherwise;
"v1.116.1" is koboldcpp.py of KcppVersion 1.116.1, its release branch ``concedo`` at ``0c163a9b``
(2026-06-28).
"""

from __future__ import annotations

import os
import re

import enginespec.engines._libraries as _libraries
from enginespec.definition.records import Flags, IdentityProbe, Launch, Serving
from enginespec.definition.servedrecords import ControlRequest, ModelControl, ModelList
from enginespec.definition.signature import Evidence, LaunchForm, Signature
from enginespec.healthrecord import HealthState
from enginespec.spec import EngineSpec
from enginespec.untrusted.documents import json_object

# Flags only KoboldCpp has among the built-in engines: evidence for a renamed build.
_OWN_FLAGS = ("--model", "--contextsize", "--gpulayers", "--usecublas", "--usevulkan", "--usecpu", "--config")

SIGNATURE = Signature(
    engine="koboldcpp",
    launch_forms=(
        # `koboldcpp` (tldr pages, packaged builds), `koboldcpp.exe`; `python koboldcpp.py`
        # (the script starts `#!/usr/bin/env python3`, so `./koboldcpp.py` runs as
        # `[python3, ./koboldcpp.py, ...]`). `[ggml_model] [port]` are positional (argparse
        # `model_param`, `port_param`, each exclusive with --model / --port).
        LaunchForm(executables=("koboldcpp", "koboldcpp.py"), positional_model=True, positional_port=True),
        # PyInstaller one-file releases carry the platform and backend in their name
        # (`koboldcpp-linux-x64-cuda1210`, `koboldcpp-mac-arm64`, `koboldcpp_nocuda.exe`;
        # koboldcpp.sh, .github/workflows): only with a GGUF/GGML model or a flag of KoboldCpp's.
        LaunchForm(
            executable_prefixes=("koboldcpp-", "koboldcpp_"),
            positional_model=True,
            positional_port=True,
            evidence=Evidence(model_suffixes=(".gguf", ".bin", ".kcpps", ".kcppt")),
        ),
        LaunchForm(
            executable_prefixes=("koboldcpp-", "koboldcpp_"),
            positional_model=True,
            positional_port=True,
            evidence=Evidence(any_flags=_OWN_FLAGS),
        ),
    ),
    model_flags=("--model",),
    host_flags=("--host",),
    port_flags=("--port",),
    # action='store_true' options (the parser at koboldcpp.py line 4403 on); `nargs='?'` options
    # (`--gpulayers`, `--debugmode`, `--multiuser`, `--sdclamped`) take a following value as
    # argparse does.
    no_value_flags=frozenset(
        {
            "--launch",
            "--usecpu",
            "--noshift",
            "--nommap",
            "--usemlock",
            "--noavx2",
            "--remotetunnel",
            "--highpriority",
            "--foreground",
            "--quiet",
            "--nocertify",
            "--ignoremissing",
            "--flashattention",
            "--smartcontext",
            "--nomodel",
            "--showgui",
            "--skiplauncher",
            "--sdvaeauto",
            "--sdquant",
            "--noblas",
            # admin mode (v1.116.1 line 12400 on: store_true); `--admin` is a prefix of the secret
            # `--adminpassword`, so it must be known to take no value
            "--admin",
            "--routermode",
            "--autoswapmode",
        }
    ),
    multi_value_flags=frozenset(
        {
            "--usecublas",
            "--usevulkan",
            "--useclblast",
            "--tensor_split",
            "--ropeconfig",
            "--lora",
            "--ssl",
            "--hordeconfig",
            "--sdconfig",
        }
    ),
    # `--benchmark` "Do not start server", `--prompt` runs one inference and exits, `--unpack`
    # extracts the binary's files.
    exit_flags=frozenset({"-h", "--help", "--benchmark", "--prompt", "--unpack"}),
    # `--adminpassword` (v1.116.1 line 12401; since 1.83) says nothing a secret name says: it
    # must be named to be masked
    secret_flags=frozenset({"--password", "--hordekey", "--adminpassword"}),
    abbreviations=True,
    # A PyInstaller one-file binary runs as a bootloader parent and a child with the same argv:
    # one server.
    fold_workers=True,
    # `--host ""` listens on every IPv4 interface (and IPv6 where available,
    # RunServerMultiThreaded); `defaultport = 5001` (line 44).
    default_host="0.0.0.0",
    default_port=5001,
)


# The parser's description: `KoboldCpp Server - Version 1.76` (argparse.ArgumentParser, line 4403).
_VERSION = re.compile(r"KoboldCpp Server - Version (\S+)")


class KoboldCppSpec(EngineSpec):
    def parse_version(self, output: str) -> str | None:
        match = _VERSION.search(output)
        return match.group(1) if match else None

    def served_name(self, option: str) -> str | None:
        # a model file it loads is served as `koboldcpp/` and its stem, all but word characters,
        # dots and dashes dropped (v1.116.1 line 11453, sanitize_string line 10499); a config's
        # (.kcpps, .kcppt) model is named inside it
        if not option.lower().endswith(".gguf"):
            return None
        stem = os.path.splitext(os.path.basename(option.replace("\\", "/")))[0]
        return "koboldcpp/" + re.sub(r"[^\w.\-]", "", stem)

    def classify_health(self, status: int, body: bytes) -> tuple[HealthState, str]:
        # `/api/extra/version` -> {"result": "KoboldCpp", "version": ..., "protected": ...,
        # "txt2img": ..., "vision": ..., "transcribe": ...} (line 1754), served only after the
        # model is loaded (load_model at line 4134 precedes the server at 4362). TabbyAPI
        # impersonates it with just {"result": "KoboldCpp", "version": "1.74"}
        # (theroyallab/tabbyAPI e632af41, endpoints/Kobold/router.py): no "protected".
        if status == 200:
            answer = json_object(body)
            if not isinstance(answer, dict) or answer.get("result") != "KoboldCpp":
                return "unknown", "/api/extra/version is not KoboldCpp's answer"
            if "protected" not in answer:
                return "unknown", "answers like TabbyAPI's KoboldCpp emulation, not KoboldCpp"
            return "ready", ""
        return super().classify_health(status, body)


# KoboldCpp's own line after a load that failed (`Could not load text model: PATH`, seen in logs
# only: https://github.com/LostRuins/koboldcpp/issues/2003) says no why: the loader's lines above do.
FAILURES = (_libraries.LLAMA_CPP + _libraries.PYTHON).model_copy(
    update={"wrappers": (r"Could not load text model: ",)}
)

SPEC = KoboldCppSpec(
    id="koboldcpp",
    signature=SIGNATURE,
    # No `--version` flag: `--help` names the version.
    launch=Launch(kind="binary", executable="koboldcpp", version_args=("--help",)),
    flags=Flags(
        fields={
            "max_model_len": ("--contextsize",),
            "gpu_layers": ("--gpulayers",),
        }
    ),
    # Not on PyPI: release binaries, run as ENGINESPEC_KOBOLDCPP_INSTALL_CMD.
    # Its health answer, {"result": "KoboldCpp", "version": KcppVersion, ...} (v1.116.1), is
    # also where it says its release.
    serving=Serving(
        health_path="/api/extra/version",
        version_path="/api/extra/version",
        identity=IdentityProbe(path="/api/extra/version", status=200, field="result", equals="KoboldCpp"),
        api_key_flag="--password",
    ),
    # What it serves (v1.116.1): GET /api/v1/model -> {"result": NAME} (line 6077), NAME
    # `koboldcpp/STEM` of its model file (line 11453), "inactive" with none (line 88), and
    # "koboldcpp/protected-model" to a request without --password or --adminpassword. Started
    # without admin mode, its model is fixed: the one its argv names. `--admin` (since 1.83;
    # `--routermode` and `--autoswapmode` turn it on, line 10917) lets it switch: GET
    # /api/admin/list_options -> a JSON list of the .kcpps, .kcppt and .gguf files of --admindir
    # (one directory deep) and "initial_model", "unload_model" (get_current_admindir_list, line
    # 1482), `[]` without admin mode or the admin password (line 6106). `--config` loads settings
    # (and admin mode) from a file. The admin password is `--adminpassword`, else
    # KCPP_ADMINPASSWORD (line 12401), sent as `Authorization: Bearer` (check_header_password).
    models=ModelList(
        kind="koboldcpp",
        path="/api/v1/model",
        available_path="/api/admin/list_options",
        argv_model_fixed=True,
        asked_with=("--admin", "--routermode", "--autoswapmode", "--config"),
        key_flag="--adminpassword",
        key_variable="KCPP_ADMINPASSWORD",
    ),
    # POST /api/admin/reload_config {"filename": NAME} -> {"success": true|false} (line 6739): a
    # file listed by list_options, or "unload_model" (restart with no model) or "initial_model"
    # (the argv's own). The answer comes first; the manager process then ends the child that
    # serves and starts a new one with the new settings (line 11045 on), which loads the model
    # and only then listens (line 12203; in router mode the proxy keeps the port and answers 502
    # meanwhile, line 4986). A child that fails to load makes the manager start the argv's settings
    # again (fault_recovery_mode, line 10983).
    control=ModelControl(
        load=ControlRequest(
            path="/api/admin/reload_config",
            body={"filename": "{model}"},
            any_flags=("--admin", "--routermode", "--autoswapmode"),
            restarts=True,
        ),
        # it unloads whatever is loaded: sent only when that is the model named
        unload=ControlRequest(
            path="/api/admin/reload_config",
            body={"filename": "unload_model"},
            any_flags=("--admin", "--routermode", "--autoswapmode"),
            restarts=True,
            on_loaded=True,
        ),
    ),
    failures=FAILURES,
)
