"""llama-cpp-python's OpenAI-compatible server: ``python -m llama_cpp.server``.

Facts from llama-cpp-python v0.3.35 (3691546f): llama_cpp/server/__main__.py,
llama_cpp/server/cli.py, llama_cpp/server/settings.py, llama_cpp/server/app.py.
"""

from __future__ import annotations

import enginespec.engines._libraries as _libraries
from enginespec.definition.records import Flags, Launch, Package, Serving, Settings
from enginespec.definition.servedrecords import ModelList
from enginespec.definition.signature import Evidence, LaunchForm, Signature
from enginespec.failures import FailurePattern, Failures
from enginespec.healthrecord import HealthState
from enginespec.spec import EngineSpec
from enginespec.untrusted.documents import json_object

SIGNATURE = Signature(
    engine="llamacpp-python",
    launch_forms=(
        # No console script of its own (pyproject.toml): the module.
        LaunchForm(modules=("llama_cpp.server",)),
        # Its Docker images serve the app factory with uvicorn (docker/simple/run.sh:
        # `uvicorn --factory llama_cpp.server.app:create_app --host $HOST --port $PORT`).
        LaunchForm(
            executables=("uvicorn",),
            modules=("uvicorn",),
            evidence=Evidence(positionals=("llama_cpp.server.app:create_app",)),
        ),
    ),
    # Options are the pydantic field names as written, underscores and all, in a plain argparse
    # parser (llama_cpp/server/cli.py add_args_from_model; allow_abbrev left on). Booleans take a
    # value (`--verbose true`, _parse_bool_arg): no flag here is value-less. With a Hugging Face repo
    # `--model` is a file glob inside it, so the repo names the model.
    model_flags=("--hf_model_repo_id", "--model"),
    served_name_flags=("--model_alias",),
    host_flags=("--host",),
    port_flags=("--port",),
    # list fields are nargs="*" (llama_cpp/server/cli.py)
    multi_value_flags=frozenset({"--tensor_split", "--kv_overrides"}),
    # uvicorn's switches (uvicorn/main.py, click is_flag options), so its app is not taken for
    # their value; none is an option of llama_cpp.server.
    no_value_flags=frozenset(
        {
            "--factory",
            "--reload",
            "--use-colors",
            "--no-use-colors",
            "--proxy-headers",
            "--no-proxy-headers",
            "--server-header",
            "--no-server-header",
            "--date-header",
            "--no-date-header",
            "--access-log",
            "--no-access-log",
        }
    ),
    exit_flags=frozenset({"-h", "--help", "--version"}),
    secret_flags=frozenset({"--api_key"}),
    abbreviations=True,
    default_host="localhost",
    default_port=8000,
)


class LlamaCppPythonSpec(EngineSpec):
    # The model is loaded in create_app before uvicorn listens (__main__.py main), so while it
    # loads connections are refused; there is no /health route and /v1/models answers 200 with
    # the loaded models once it listens (app.py get_models).
    def classify_health(self, status: int, body: bytes) -> tuple[HealthState, str]:
        if status == 200:
            listed = isinstance((json_object(body) or {}).get("data"), list)
            return ("ready", "") if listed else ("unknown", "unexpected /v1/models body")
        return super().classify_health(status, body)

    def requirement(self, version: str | None = None) -> str:
        # The server's dependencies (uvicorn, fastapi, sse-starlette, pydantic-settings) come with
        # the `server` extra (pyproject.toml).
        return super().requirement(version).replace("llama-cpp-python", "llama-cpp-python[server]", 1)


# Why a start failed: llama-cpp-python's own messages (checked in the 0.3.16 sdist:
# llama_cpp/_ctypes_extensions.py
# load_shared_library `Shared library with base name 'llama' not found`), then argparse,
# uvicorn's and the GGML loader's it embeds.
P = FailurePattern

# The loader's message before llama-cpp-python's own: `Failed to load shared library '...':
# libcuda.so.1: cannot open shared object file` is a missing driver, not a broken package
# (llama_cpp/_ctypes_extensions.py load_shared_library, v0.3.16: `Failed to load shared library
# '{lib_path}': {e}`, `Shared library with base name '{lib_base_name}' not found`;
# llama_cpp/llama.py Llama.__init__ and _internals.py: `Model path does not exist: {model_path}`).
FAILURES = (
    _libraries.ARGPARSE
    + _libraries.LOADER
    + Failures(
        patterns=(
            P(
                kind="dependency_error",
                pattern=r"Shared library with base name '(?P<missing>[^']*)' not found|"
                r"Failed to load shared library",
                hint="the package's compiled llama library is missing: reinstall llama-cpp-python",
            ),
            P(
                kind="model_not_found",
                pattern=r"Model path does not exist: ",
                hint="no file at the model path: check --model (a path to a .gguf file)",
            ),
        )
    )
    + _libraries.LLAMA_CPP
    + _libraries.HUGGINGFACE
    + _libraries.PYTHON
)

SPEC = LlamaCppPythonSpec(
    id="llamacpp-python",
    aliases=("llama-cpp-python", "llama_cpp.server"),
    signature=SIGNATURE,
    launch=Launch(kind="module", executable="llama_cpp.server", module_args=("-m", "llama_cpp.server")),
    flags=Flags(
        model="--model",
        fields={
            "max_model_len": ("--n_ctx",),
            "gpu_layers": ("--n_gpu_layers",),
        },
    ),
    # No wheel on PyPI: pip builds llama.cpp from the sdist (CPU unless CMAKE_ARGS says otherwise).
    package=Package(distributions=("llama-cpp-python",)),
    serving=Serving(
        health_path="/v1/models",
        # every route, /v1/models included, depends on authenticate (app.py)
        health_authorized=True,
        api_key_flag="--api_key",
        api_key_env=("API_KEY",),
    ),
    # pydantic-settings without a prefix (llama_cpp/server/settings.py): MODEL, MODEL_ALIAS, HOST,
    # PORT; argv wins for the model, but uvicorn.run takes os.getenv("HOST")/os.getenv("PORT") over
    # the settings, and with --config_file the file's settings replace argv's (__main__.py main).
    settings=Settings(
        environment={"MODEL": "model", "MODEL_ALIAS": "served_model_name", "HOST": "host", "PORT": "port"},
        environment_first=frozenset({"host", "port"}),
        config_flag="--config_file",
        config_environment="CONFIG_FILE",
        # JSON, or YAML for a file named *.yaml / *.yml (__main__.py load_config).
        config_format="json",
        # with a config file its models are the file's alone: argv's --model is parsed, unused
        # (__main__.py: model_settings = config_file_settings.models)
        config_replaces_argv=frozenset({"host", "port", "model", "served_model_name"}),
        config_models_key="models",
    ),
    # With --config_file (or CONFIG_FILE) its LlamaProxy holds one of the file's models at a time:
    # the first at start, another when a request names its alias (closing the one before), and
    # /v1/models lists every alias, loaded or not (llama_cpp/server/model.py LlamaProxy.__call__,
    # app.py get_models, v0.3.35). Which one is loaded it does not say: the model file it maps
    # does (Llama maps a GGUF whole while use_mmap is on, its default where mmap works).
    models=ModelList(kind="one_of_config", path="/v1/models"),
    failures=FAILURES,
)
