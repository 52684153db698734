"""Ollama: ``ollama serve`` and the per-model runners it starts.

Facts from ollama/ollama v0.32.15 (``b7871fc0``) and HEAD ``fb307609`` (v0.33.0-rc2) unless a
line says otherwise.
"""

from __future__ import annotations

import os
import re

import enginespec.engines._libraries as _libraries
from enginespec.definition.modelrecords import Files
from enginespec.definition.records import HealthRule, IdentityProbe, Launch, LoadMetrics, Serving, Settings
from enginespec.definition.servedrecords import ControlRequest, ModelControl, ModelList
from enginespec.definition.signature import LaunchForm, Signature
from enginespec.failures import FailurePattern, Failures
from enginespec.models.files import HOST, ModelError, read_capped
from enginespec.spec import EngineSpec
from enginespec.untrusted.documents import DocumentError, json_object, parse_json

SIGNATURE = Signature(
    engine="ollama",
    launch_forms=(
        # `serve` (alias `start`) takes no arguments and no flags of its own (cmd/cmd.go serveCmd,
        # `Args: cobra.ExactArgs(0)`): `ollama serve --timeout 600` fails with "unknown flag".
        LaunchForm(executables=("ollama",), subcommand=("serve",), no_arguments=True),
        LaunchForm(executables=("ollama",), subcommand=("start",), no_arguments=True),
        # Runners, one per loaded model, on a free loopback port:
        # 0.6 to 0.2x `os.Executable() runner [--ollama-engine] --model BLOB --port P` (llm/server.go,
        # tags v0.6.0, v0.20.0), MLX `ollama runner --mlx-engine --model NAME --port P`
        # (x/mlxrunner/client.go).
        LaunchForm(executables=("ollama",), subcommand=("runner",), role="runner"),
        # 0.5.x: the separate runner binary, with `runner` first; up to 0.4.x without it (tags
        # v0.3.14, v0.4.7, v0.5.7 llm/server.go).
        LaunchForm(executables=("ollama_llama_server",), subcommand=("runner",), role="runner"),
        LaunchForm(executables=("ollama_llama_server",), role="runner"),
        # Since v0.30.0 the upstream llama-server shipped in Ollama's library directory:
        # `<prefix>/lib/ollama/llama-server` on Linux and Windows, next to the ollama binary in the
        # macOS app (llm/llama_binary.go llamaCppBinaryCandidates, ml/path.go LibOllamaPath).
        LaunchForm(
            executables=("llama-server",),
            directories=("lib/ollama", "Ollama.app/Contents/Resources"),
            role="runner",
        ),
    ),
    # The runners take llama.cpp's spellings (llm/llama_server.go lines 370-376: `--model`,
    # `--port`, `--host 127.0.0.1`, then `-c`, `-np`, `-b`, ...); the model is a blob path
    # (`~/.ollama/models/blobs/sha256-...`) or, for the MLX runner, a model name.
    aliases={"-m": "--model"},
    model_flags=("--model",),
    host_flags=("--host",),
    port_flags=("--port",),
    exit_flags=frozenset({"-h", "--help", "-v", "--version"}),
    # envconfig/config.go Host(): OLLAMA_HOST, default 127.0.0.1:11434.
    default_host="127.0.0.1",
    default_port=11434,
)


class OllamaSpec(EngineSpec):
    def loaded_models(self, body: bytes) -> tuple[str, ...] | None:
        # `GET /api/ps` -> {"models": [{"name": "llama3:8b", "model": ..., "digest": ...}, ...]}
        # (api/types.go ProcessResponse): the names people use, never the blob paths runners get.
        listed = (json_object(body) or {}).get("models")
        if not isinstance(listed, list) or not all(isinstance(item, dict) for item in listed):
            return None
        names = [item.get("name") for item in listed]
        return tuple(names) if all(isinstance(n, str) for n in names) else None

    def registry_name(self, model_path: str, files: Files) -> str | None:
        return model_name(model_path, files)


# Why a start failed: Ollama's own messages (checked with git grep at the tags: llm/server.go
# NewLlamaServer `model requires more system memory (%s) than is available (%s)` and the WARN
# `model request too large for system` in v0.5.7, v0.9.0 and v0.12.0, gone by v0.32.15;
# WaitUntilRunning `llama runner process has terminated: %v` from v0.1.32 to v0.12.0, in v0.32.15
# llm/llama_server.go `llama-server process has terminated: STATUS: MSG`, which carries the
# runner's own last error and so is no wrapper), then the GGML loader's its runner prints.
P = FailurePattern

FAILURES = (
    Failures(
        patterns=(
            # OLLAMA_ORIGINS read into gin-contrib/cors, which panics on an entry without a scheme
            # (cors v1.4.0 config.go: `bad origin: origins must contain '*' or include ...`, as
            # the panic in https://github.com/ollama/ollama/issues/2751 quotes it)
            P(
                kind="bad_flag",
                pattern=r"panic: bad origin: origins must contain",
                hint="an OLLAMA_ORIGINS entry has no scheme: write each as http://HOST, https://HOST (or *)",
            ),
            # Go's net.OpError (`listen tcp HOST:PORT: bind: ` and the errno's text) as cobra prints
            # `Error: ` before it (cmd/cmd.go RunServer, v0.1.32 to v0.32.15)
            P(
                kind="port_in_use",
                pattern=r"listen tcp (?P<host>[^\s:]*):(?P<port>\d+): bind: address already in use",
                hint="port {port} is taken: set OLLAMA_HOST to another port or stop the process holding it",
            ),
            P(
                kind="cpu_oom",
                pattern=r"model requires more system memory \((?P<required_gib>[\d.]+) GiB\) than is "
                r"available \((?P<available_gib>[\d.]+) GiB\)",
            ),
            P(
                kind="cpu_oom",
                pattern=r"model request too large for system\S* requested=\S*?(?P<required_gib>[\d.]+) GiB\S*"
                r"(?:.*free=\S*?(?P<free_gib>[\d.]+) GiB)?(?:.*swap=\S*?(?P<swap_gib>[\d.]+) GiB)?",
            ),
            # A runner SIGKILLed while it loads (llm/server.go: `llama runner process has
            # terminated: %v`, Go's os.ProcessState `signal: killed`): the kernel's OOM killer, or
            # macOS's memory pressure, in every report this vocabulary was built from (a Jetson's
            # shared RAM, a model larger than the host); Ollama's own SIGKILL ends an unload, not a load.
            P(
                kind="cpu_oom",
                pattern=r"process has terminated: signal: (?P<signal>killed)",
                hint="the runner was killed (SIGKILL) while loading, most likely for memory: a smaller "
                "model or context (OLLAMA_CONTEXT_LENGTH), fewer parallel slots, or more RAM",
            ),
            # server/images.go PullModel: `pull model manifest: %s` (v0.1.32, v0.5.7, v0.12.0,
            # v0.32.15), the registry's 404 read as os.ErrNotExist (`file does not exist`, as
            # v0.32.15's cmd/cloud_suggest.go quotes it); server/routes.go `model '%s' not found`
            P(
                kind="model_not_found",
                pattern=r"pull model manifest: (?:file does not exist|model not found)|"
                r"model '[^']*' not found",
                hint="no model of that name: check the name and tag (ollama.com/library), or `ollama list`",
            ),
            # The model store it cannot create or open (server/modelpath.go GetManifestPath /
            # GetBlobsPath: os.MkdirAll of OLLAMA_MODELS, v0.5.7), in Go's os.PathError words
            # (io/fs/fs.go: `op path: err`), `Error: mkdir /usr/share/ollama/.ollama/models: permission
            # denied` as cobra prints it
            P(
                kind="model_not_found",
                pattern=r"\b(?:mkdir|open) \S+: permission denied",
                hint="the server's user cannot write the model directory: give it OLLAMA_MODELS and "
                "every directory above it (chown -R ollama:ollama, chmod o+x on the parents)",
            ),
        )
    )
    + _libraries.GO_FLAGS
    + _libraries.LLAMA_CPP
).model_copy(
    # the server's report that its runner ended, with the exit status or with nothing: the why
    # (if any) is in the runner's lines above; a Windows crash status (exit status 0xc000001d)
    # is no wrapper: it says how the runner died
    update={"wrappers": (r"llama runner process has terminated(?:: exit status (?!0xc0|-10737|32212)|\s*$)",)}
)

SPEC = OllamaSpec(
    id="ollama",
    signature=SIGNATURE,
    # `ollama serve`: no flags; the address goes in OLLAMA_HOST (see settings below).
    # `ollama -v` asks the running server, else prints `Warning: client version is X` (cmd/cmd.go
    # versionHandler): either way the version is in the output.
    launch=Launch(kind="binary", executable="ollama", args=("serve",), version_args=("-v",)),
    # Not on PyPI (the `ollama` distribution is the client library): the install script or
    # tarball, run as ENGINESPEC_OLLAMA_INSTALL_CMD.
    serving=Serving(
        health_path="/",
        # GET /api/version answers {"version": "0.32.15"} (server/routes.go, v0.32.15).
        version_path="/api/version",
        # GET / answers the text "Ollama is running" (server/routes.go, v0.32.15)
        identity=IdentityProbe(path="/", status=200, equals="Ollama is running"),
        runner_health_path="/health",
        loaded_models_path="/api/ps",
        # A runner is started by `ollama serve` (its parent, named ollama).
        supervisors={"ollama": "ollama"},
        nested_supervisor="ollama",
        # Every unload (keep_alive, `ollama stop`, eviction) ends a runner with SIGKILL after
        # taking its model off the list /api/ps serves, under the scheduler's lock; a runner that
        # dies otherwise stays listed until the next request starts a new one (v0.32.15
        # server/sched.go runnerRef.unload, llm/server.go Close/stopProcess).
        runners_are_workers=True,
        # The server: `GET /` answers 200 "Ollama is running" as soon as it listens; models load
        # on request, so that is ready (server/routes.go `c.String(http.StatusOK, "Ollama is
        # running")`). A runner (a llama-server since
        # v0.30.0) answers its /health as llama-server does.
        health_rules=(
            HealthRule(status=200, equals="Ollama is running", state="ready"),
            *_libraries.LLAMA_SERVER_HEALTH,
            HealthRule(status=200, state="unknown", reason="neither Ollama's nor a runner's answer"),
        ),
    ),
    # OLLAMA_HOST is `host:port`, `:port`, `host`, or a URL `http://host:port` (envconfig/config.go
    # Host(): scheme cut at `://`, a path after `/` dropped, net.SplitHostPort).
    settings=Settings(environment={"OLLAMA_HOST": "address"}, runner_environment=False),
    failures=FAILURES,
    # No Prometheus metrics and no request counts (v0.33.0-rc2 fb307609): `GET /api/ps` lists the
    # loaded models (api/types.go ProcessModelResponse), which is all the load it tells.
    # /api/ps: the loaded models, with `size_vram` and `expires_at` (RFC 3339); /api/tags: the
    # models it could load (v0.32.15 api/types.go ProcessModelResponse, ListModelResponse;
    # server/routes.go PsHandler, ListHandler).
    models=ModelList(kind="ollama", runners=True, path="/api/ps", available_path="/api/tags"),
    # A generate request with no prompt loads the model (`done_reason` "load"); with keep_alive 0
    # it unloads it (`done_reason` "unload"): v0.32.15 server/routes.go GenerateHandler.
    control=ModelControl(
        load=ControlRequest(path="/api/generate", body={"model": "{model}", "stream": False}),
        unload=ControlRequest(
            path="/api/generate", body={"model": "{model}", "keep_alive": 0, "stream": False}
        ),
    ),
    load=LoadMetrics(
        kind="ollama_ps", path="/api/ps", note="Ollama reports the models it has loaded, no request counts"
    ),
)


# -- which model a runner's blob is --------------------------------------------------------------

#: A runner is given its model as a blob: `<models>/blobs/sha256-<hex>` (server/images.go,
#: server/internal/manifest; blobs are named `sha256-<hex>` since v0.1.30, `sha256:<hex>` before).
_BLOB = re.compile(r"^sha256[-:](?P<hex>[0-9a-f]{64})$")
#: The media type of the layer that holds the weights (server/images.go).
_MODEL_LAYER = "application/vnd.ollama.image.model"
#: What is read of the manifests tree: manifests, bytes of one.
_MAX_MANIFESTS = 10_000
_MAX_MANIFEST_BYTES = 1 << 20
#: Where `ollama list` leaves a name short (types/model/name.go, DisplayShortest).
_DEFAULT_HOST, _DEFAULT_NAMESPACE = "registry.ollama.ai", "library"


def model_name(blob: str, fs: Files = HOST) -> str | None:
    """The model whose manifest's model layer is the blob at ``blob``, as `ollama list` shows it
    (``qwen3:8b``; ``namespace/`` before it off the library, ``host/namespace/`` off the
    registry): the manifests sit beside the blobs, ``<models>/manifests/<host>/<namespace>/
    <name>/<tag>`` (JSON with ``layers`` of ``mediaType`` and ``digest``), listed and read as
    ``fs`` sees them (a running runner's: as its owner, inside its root). Bounded: at most
    10 000 manifests of 1 MiB each."""
    match = _BLOB.match(os.path.basename(blob))
    if match is None:
        return None
    digest = f"sha256:{match['hex']}"
    budget = [_MAX_MANIFESTS]

    def walk(path: str, parts: list[str]) -> str | None:
        if len(parts) == 4:
            budget[0] -= 1
            return _short_name(parts) if budget[0] >= 0 and _names_digest(path, digest, fs) else None
        for name in sorted(fs.names(path, _MAX_MANIFESTS) or ()):
            if budget[0] <= 0:
                return None
            found = walk(f"{path}/{name}", [*parts, name])
            if found:
                return found
        return None

    return walk(os.path.join(os.path.dirname(os.path.dirname(blob)), "manifests"), [])


def _names_digest(path: str, digest: str, fs: Files) -> bool:
    try:
        manifest = parse_json(read_capped(path, _MAX_MANIFEST_BYTES, fs))
    except (ModelError, DocumentError):
        return False
    layers = manifest.get("layers") if isinstance(manifest, dict) else None
    return isinstance(layers, list) and any(
        isinstance(layer, dict) and layer.get("mediaType") == _MODEL_LAYER and layer.get("digest") == digest
        for layer in layers
    )


def _short_name(parts: list[str]) -> str:
    host, namespace, model, tag = parts
    if host != _DEFAULT_HOST:
        return f"{host}/{namespace}/{model}:{tag}"
    return f"{model}:{tag}" if namespace == _DEFAULT_NAMESPACE else f"{namespace}/{model}:{tag}"
