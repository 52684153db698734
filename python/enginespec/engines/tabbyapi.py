"""TabbyAPI: ``python main.py`` (or ``start.py``) inside a TabbyAPI checkout.

Facts from theroyallab/tabbyAPI HEAD ``e632af41`` (2026-08-13; the repository has no tags): the
files cited below are at that commit.
"""

from __future__ import annotations

import enginespec.engines._libraries as _libraries
from enginespec.definition.records import Flags, KeyFile, Launch, Package, Serving, Settings
from enginespec.definition.servedrecords import ControlRequest, ModelControl, ModelList
from enginespec.definition.signature import LaunchForm, Signature
from enginespec.failures import FailurePattern, Failures
from enginespec.healthrecord import HealthState
from enginespec.spec import EngineSpec
from enginespec.untrusted.documents import json_object

SIGNATURE = Signature(
    engine="tabbyapi",
    launch_forms=(
        # `python main.py` (TabbyAPI's docs/01.-Getting-Started.md; the image runs `python3 main.py
        # --host 0.0.0.0` in /app, docker/Dockerfile); `start.sh` / `start.bat` make a venv and run
        # `python3 start.py`, which imports main.entrypoint and serves in the same process
        # (start.py line 275). Both names are far too common alone: only next to TabbyAPI's own
        # files. `download`, `export-openapi`, `export-config` are actions that run and exit
        # (common/args.py add_subcommands).
        LaunchForm(
            executables=("main.py", "start.py"),
            exit_subcommands=("download", "export-openapi", "export-config"),
            checkout_files=("common/args.py", "common/tabby_config.py", "endpoints/core/router.py"),
        ),
    ),
    # Every option is a config field, `_` written `-`, and takes a value: there is no
    # store_true at all (common/args.py init_argparser); list fields take several.
    # `--model-name` is a folder under `--model-dir` (default `models`), and the name clients
    # see (common/config_models.py ModelConfig).
    model_flags=("--model-name",),
    model_is_served_name=True,
    host_flags=("--host",),
    port_flags=("--port",),
    multi_value_flags=frozenset(
        {
            "--api-servers",
            "--dummy-model-names",
            "--use-as-default",
            "--autosplit-reserve",
            "--gpu-split",
            "--draft-gpu-split",
            "--loras",
        }
    ),
    exit_flags=frozenset({"-h", "--help"}),
    abbreviations=True,
    # NetworkConfig: host 127.0.0.1, port 5000 (common/config_models.py).
    default_host="127.0.0.1",
    default_port=5000,
)


class TabbyApiSpec(EngineSpec):
    def classify_health(self, status: int, body: bytes) -> tuple[HealthState, str]:
        # /health: 200 {"status": "healthy", "issues": []}, 503 {"status": "unhealthy", "issues":
        # [...]} (endpoints/core/router.py healthcheck). The model loads before the server starts
        # (main.py entrypoint_async), so the port refuses connections until then.
        answer = json_object(body)
        reported = answer.get("status") if isinstance(answer, dict) else None
        if status == 200 and reported == "healthy":
            return "ready", ""
        if status == 503 and reported == "unhealthy":
            issues = answer.get("issues") if isinstance(answer, dict) else None
            return (
                "unhealthy",
                f"TabbyAPI reports {len(issues) if isinstance(issues, list) else 'some'} issue(s)",
            )
        if status == 200:
            return "unknown", "unexpected /health body"
        return super().classify_health(status, body)


# ExLlamaV2's check of the checkpoint's tensors against the architecture's expected keys
# (exllamav2/config.py ExLlamaV2Config.prepare at turboderp-org/exllamav2 75329695: `raise
# ValueError(f" ## Could not find {prefix}.* in model")`): a model of a layout the installed
# ExLlamaV2 does not know (its own `raise` line quotes `{prefix}`, which the pattern leaves out).
FAILURES = (
    Failures(
        patterns=(
            FailurePattern(
                kind="unsupported_architecture",
                pattern=r"## Could not find [\w.]+\.\* in model",
                hint="the installed ExLlamaV2 does not know this model's layout: upgrade it (or the image)",
            ),
            # ExLlamaV2's compiled extension did not load (exllamav2/ext.py imports the prebuilt
            # `exllamav2_ext` or builds it; when neither works the name is never bound and the first
            # use raises NameError; from memory of 0.2, not checked here)
            FailurePattern(
                kind="dependency_error",
                pattern=r"NameError: name 'exllamav2_ext' is not defined",
                hint="ExLlamaV2's compiled extension did not load: install the wheel built for this "
                "Python, PyTorch and CUDA",
            ),
        )
    )
    + _libraries.PYTHON_SERVER
)

SPEC = TabbyApiSpec(
    id="tabbyapi",
    signature=SIGNATURE,
    # Runs in its checkout, as `python3 main.py` there (docker/Dockerfile WORKDIR /app).
    launch=Launch(kind="module", executable="main.py", module_args=("main.py",)),
    # ModelConfig fields (common/config_models.py); booleans take a value there (`--vision true`),
    # so none is mapped.
    flags=Flags(
        fields={
            "max_model_len": ("--max-seq-len",),
            "max_num_seqs": ("--max-batch-size",),
            "kv_cache_dtype": ("--cache-mode",),
        }
    ),
    # Not a package ("We're not building the project itself", pyproject.toml): a git checkout.
    package=Package(checkout="https://github.com/theroyallab/tabbyAPI"),
    # Keys: `api_tokens.yml` in its working directory (common/auth.py AUTH_FILE, read relative to
    # the cwd; written there with fresh keys when missing, never when `network.disable_auth`),
    # `api_key` (one key or a list) and `admin_key`; read again when it changes, so enginespec
    # reads it at each use. Every header form is taken: x-api-key / x-admin-key, or
    # `Authorization: Bearer` (check_api_key, check_admin_key, get_key_permission), an admin key
    # opening api routes too (AuthKeys.verify_key).
    serving=Serving(api_key_file=KeyFile(path="api_tokens.yml", api_key="api_key", admin_key="admin_key")),
    # endpoints/core/router.py: `GET /v1/model` (api key) is the loaded model's ModelCard (`id`
    # its folder's name: backends/exllamav3/model.py model_info), and with none loaded
    # check_model_container answers 503 {"detail": "No models are currently loaded."}
    # (common/model.py; FastAPI's HTTPException shape); `GET /v1/models` lists every folder of
    # model_dir (but the draft models' one) to an admin key, only the loaded one to an api key
    # (list_models, endpoints/core/utils/model.py get_model_list). A name loaded as `a/b` is
    # served as `b` (model_dir.name). With `use_dummy_models` the list also holds its dummy
    # names, which are not folders: they show as `unloaded` too.
    models=ModelList(
        kind="tabbyapi",
        path="/v1/model",
        available_path="/v1/models",
        available_key="admin",
        none_loaded="No models are currently loaded.",
        listed_by_leaf=True,
    ),
    # `POST /v1/model/load` {"model_name": NAME} (admin key) answers 400 {"detail": ...} for a
    # name with no folder, else an SSE stream (EventSourceResponse of stream_model_load): progress
    # events, then `"status": "finished"`, or {"error": {"message", "trace"}}; a load swaps out
    # the loaded model. `POST /v1/model/unload` (admin key; 503 when none is loaded) answers
    # 200 with no body. The embedding model's routes (/v1/model/embedding/*) are left out: it is
    # a second, separate model (infinity-emb), not listed by /v1/model or /v1/models.
    control=ModelControl(
        load=ControlRequest(path="/v1/model/load", body={"model_name": "{model}"}, key="admin", answer="sse"),
        unload=ControlRequest(path="/v1/model/unload", key="admin", on_loaded=True),
    ),
    # config.yml in the working directory, or the file `--config` names instead (TabbyAPI also
    # merges both; common/tabby_config.py load), sections as in config_sample.yml; argv wins.
    settings=Settings(
        config_flag="--config",
        config_file="config.yml",
        config_keys={"network.host": "host", "network.port": "port", "model.model_name": "model"},
    ),
    failures=FAILURES,
)
