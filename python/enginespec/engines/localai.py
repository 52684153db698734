"""LocalAI: ``local-ai`` (``local-ai run [MODELS...]``) and the gRPC backends it starts.

Facts from mudler/LocalAI v4.9.0 (``f7ad3f70``) unless a line says otherwise; the files cited
are at that tag.
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
from enginespec.definition.signature import Evidence, LaunchForm, Signature
from enginespec.engines import llamacpp
from enginespec.failures import FailurePattern, Failures
from enginespec.spec import EngineSpec

#: The commands of the kong CLI besides `run` (core/cli/cli.go `CLI`): clients, tools and
#: workers. `run` is the default command (`default:"withargs"`), so `local-ai` alone and
#: `local-ai MODEL` serve; a first argument naming another command runs that one.
_OTHER_COMMANDS = (
    "chat",
    "federated",
    "models",
    "backends",
    "tts",
    "sound-generation",
    "transcript",
    "p2p-worker",
    "worker",
    "agent-worker",
    "util",
    "agent",
    "mcp-server",
    "explorer",
    "completion",
)

#: RunCMD's (core/cli/run.go) and the global Context's (core/cli/context/context.go) bool
#: flags, named as kong names them (the field in kebab case, or its `name:` tag): they take no
#: value (`--f16`, or `--f16=false`), so the word after one may be a model.
_BOOL_FLAGS = frozenset(
    {
        "--autoload-galleries",
        "--autoload-backend-galleries",
        "--auto-upgrade-backends",
        "--prefer-development-backends",
        "--f16",
        "--cors",
        "--disable-csrf",
        "--disable-http-compression",
        "--disable-web-ui",
        "--ollama-api-root-endpoint",
        "--disable-runtime-settings",
        "--disable-predownload-scan",
        "--require-backend-integrity",
        "--opaque-errors",
        "--use-subtle-key-comparison",
        "--disable-api-key-requirement-for-http-get",
        "--allow-insecure-public-bind",
        "--disable-metrics-endpoint",
        "--p2p",
        "--single-active-backend",
        "--preload-backend-only",
        "--enable-watchdog-idle",
        "--enable-watchdog-busy",
        "--enable-memory-reclaimer",
        "--force-eviction-when-busy",
        "--size-aware-eviction",
        "--federated",
        "--disable-gallery-endpoint",
        "--disable-mcp",
        "--enable-tracing",
        "--disable-local-ai-assistant",
        "--disable-agents",
        "--agent-pool-enable-skills",
        "--agent-pool-enable-logs",
        "--auth-enabled",
        "--disable-local-auth",
        "--distributed",
        "--registration-require-auth",
        "--distributed-require-auth",
        "--auto-approve-nodes",
        "--distributed-shared-models",
        "--distributed-prefix-cache",
        "--distributed-disk-headroom-check",
        "--nats-require-auth",
        "--expose-node-header",
        # Context: `Debug bool`, `LogDedupLogs *bool` (negatable: `--no-log-dedup-logs`)
        "--debug",
        "--log-dedup-logs",
        "--no-log-dedup-logs",
    }
)

SIGNATURE = Signature(
    engine="localai",
    launch_forms=(
        # `local-ai run [MODELS...]`: `ModelArgs []string arg:"" optional:"" name:"models"`, model
        # configuration URLs or gallery names, each installed and loaded at start
        # (`config.WithModelsURL(append(r.Models, r.ModelArgs...)...)`): the first one given is
        # taken as the model (the matcher's positional model).
        LaunchForm(executables=("local-ai",), subcommand=("run",), positional_model=True),
        # `local-ai worker`: a distributed-mode backend node (WorkerCMD, core/cli/worker.go): it
        # registers with a frontend (`--register-to`) and serves gRPC backends, no OpenAI API;
        # before v4 its sub-commands (`worker llama-cpp-rpc`, `worker p2p-llama-cpp-rpc`) started
        # llama.cpp RPC workers. `local-ai p2p-worker llama-cpp-rpc|p2p-llama-cpp-rpc|p2p-mlx|
        # mlx-distributed|vllm|ds4-distributed` (core/cli/worker/worker.go `Worker`): the same,
        # over p2p or standalone. None shares the server's flags (the worker's own `--addr` is
        # its gRPC address, default 0.0.0.0:50051): engine and role only.
        LaunchForm(executables=("local-ai",), subcommand=("worker",), facts=False, role="follower"),
        LaunchForm(executables=("local-ai",), subcommand=("p2p-worker",), facts=False, role="follower"),
        # The default command: `local-ai`, `local-ai MODEL`, `local-ai --address :9090` (the
        # image's entrypoint.sh runs `exec ./local-ai "$@"`). A first positional naming a
        # command is that command, not a model: `federated` (a p2p load balancer holding no
        # model), `agent-worker`, `explorer` and the clients are not this engine's servers;
        # `local-ai --log-level debug run M` (a global flag before `run`) is left unrecognised
        # rather than read with the model `run`.
        LaunchForm(
            executables=("local-ai",),
            other_subcommands=("run", *_OTHER_COMMANDS),
            exit_subcommands=("run", *_OTHER_COMMANDS),
            positional_model=True,
        ),
        # The gRPC backends, one process per loaded model: pkg/model/initializers.go
        # spawnGRPCModel runs the backend's `run.sh` on a free loopback port (`127.0.0.1:%d`),
        # pkg/model/process.go startProcess appending `--addr ADDRESS`; the llama.cpp backend's
        # run.sh (backend/cpp/llama-cpp/run.sh) then `exec "$CURDIR"/$BINARY "$@"`, BINARY
        # llama-cpp-cpu-all, llama-cpp-fallback or llama-cpp-grpc (older releases also
        # llama-cpp-avx, -avx2, -avx512), or `exec "$CURDIR"/lib/ld.so "$CURDIR"/$BINARY "$@"`.
        LaunchForm(
            executable_prefixes=("llama-cpp-",),
            loaders=("ld.so",),
            evidence=Evidence(any_flags=("--addr",)),
            role="runner",
        ),
        # A Python backend's run.sh (backend/python/common/libbackend.sh startBackend) runs
        # `exec "${EDIR}/venv/bin/python" "${MY_DIR}/backend.py" "$@"`; its gRPC stubs are
        # generated next to it (`--python_out=. --grpc_python_out=.` of backend.proto).
        LaunchForm(
            executables=("backend.py",),
            checkout_files=("backend_pb2.py", "backend_pb2_grpc.py"),
            evidence=Evidence(any_flags=("--addr",)),
            role="runner",
        ),
    ),
    # kong: `-t` is `--threads` (takes a value); `--config-file` an alias of
    # `--models-config-file`, `--p2ptoken` of `--p2p-token`.
    aliases={"--config-file": "--models-config-file", "--p2ptoken": "--p2p-token"},
    # `Address string env:"LOCALAI_ADDRESS,ADDRESS" default:":8080"`, HOST:PORT; a runner's
    # `--addr 127.0.0.1:PORT`.
    address_flags=("--address", "--addr"),
    no_value_flags=_BOOL_FLAGS,
    # kong's built-in help; RunCMD `Version bool` prints internal.Version and returns.
    exit_flags=frozenset({"-h", "--help", "--version"}),
    # `APIKeys []string`, `Peer2PeerToken`, the distributed `--registration-token`,
    # `--storage-secret-key`, `--nats-account-seed`, `--nats-service-seed`, `--hf-token`.
    secret_flags=frozenset(
        {
            "--api-keys",
            "--p2p-token",
            "--registration-token",
            "--storage-secret-key",
            "--storage-access-key",
            "--nats-account-seed",
            "--nats-service-seed",
            "--nats-service-jwt",
            "--auth-api-key-hmac-secret",
            "--agent-pool-api-key",
            "--hf-token",
            "--git-hub-client-secret",
            "--oidc-client-secret",
        }
    ),
    # `:8080`: every interface.
    default_host="0.0.0.0",
    default_port=8080,
)


SPEC = EngineSpec(
    id="localai",
    aliases=("local-ai",),
    signature=SIGNATURE,
    # `local-ai run [MODELS...]`; `local-ai --version` runs the default command, whose
    # `--version` prints internal.Version (core/cli/run.go).
    # Not on PyPI: release binaries, the install script or the container images, run as
    # ENGINESPEC_LOCALAI_INSTALL_CMD.
    launch=Launch(kind="binary", executable="local-ai", args=("run",)),
    # kong: a []string option is given once per value (or comma-joined)
    flags=Flags(list_style="repeat"),
    # Why a load failed: LocalAI relays its gRPC backends' errors (`could not load model: rpc error:
    # code = Unknown desc = ...`) and their stderr; its llama-cpp backend is llama.cpp, whose loader
    # messages are llama.cpp's own. Its Go backends stat the model file first (Go's os.Stat error,
    # `stat PATH: no such file or directory`), and the loader names a backend that is not installed
    # (`backend not found: NAME`, seen in mudler/LocalAI#7899 and #5225).
    failures=Failures(
        patterns=(
            FailurePattern(kind="model_not_found", pattern=r"desc = stat \S+: no such file or directory"),
            FailurePattern(
                kind="dependency_error",
                pattern=r"\bbackend not found: (?P<missing>[\w.-]+)(?:\s|$)",
                hint="LocalAI has no such backend installed: install it from the backend gallery",
            ),
        )
    )
    + llamacpp.FAILURES,
    serving=Serving(
        # core/http/routes/health.go HealthRoutes: `/healthz` answers 200 (no body) while the
        # process lives; `/readyz` 503 {"status": "starting", "reason": "startup preload in
        # progress"} until the start (the models to preload, downloads included) is done, then
        # 200 with no body. Both are public, no API key (core/http/auth/public_routes.go).
        # Before readiness was wired (/readyz since v2.4.1) it answered 200 at once.
        health_path="/readyz",
        health_rules=(
            HealthRule(status=503, field="status", equals="starting", state="loading"),
            HealthRule(status=200, equals="", state="ready"),
            HealthRule(status=200, state="unknown", reason="not LocalAI's /readyz answer"),
        ),
        # core/http/routes/localai.go (at 82c191afa): GET /version -> {"version": "v4.9.0
        # (f7ad3f70...)"}, internal/version.go PrintableVersion `fmt.Sprintf("%s (%s)", Version,
        # Commit)`: the release is its first word (a source build's is empty: none shown).
        version_path="/version",
        version_pattern=r"(\S+) \([^()]*\)",
        # GET /.well-known/localai.json (public, since v4.1.1): LocalAI's discovery document,
        # whose routes name its own `/backend/monitor`; llama-server and RamaLama (also on
        # 8080) answer 404 there.
        identity=IdentityProbe(path="/.well-known/localai.json", status=200, contains='"/backend/monitor"'),
        # kong splits a []string flag's value on ",": `--api-keys a,b` (or LOCALAI_API_KEY=a,b).
        api_key_flag="--api-keys",
        api_key_env=("LOCALAI_API_KEY", "API_KEY"),
        api_key_separator=",",
        # The backends are started by the `local-ai` server (or a `local-ai worker`), and speak
        # gRPC to it alone (backend/backend.proto): asked nothing over HTTP.
        supervisors={"local-ai": "localai"},
        runners_serve_http=False,
    ),
    settings=Settings(
        environment={"LOCALAI_ADDRESS": "address", "ADDRESS": "address"},
        runner_environment=False,
    ),
    # GET /system (core/http/routes/localai.go @ 82c191afa, SystemInformations in
    # core/http/endpoints/localai/system.go): `loaded_models`, each `{"id", "backend"}`, the
    # models its loader holds now; GET /v1/models the OpenAI list of those it has configured
    # (loaded or not).
    models=ModelList(kind="localai", path="/system", available_path="/v1/models"),
    # core/http/routes/localai.go @ 82c191afa: `POST /backend/load` (LoadModelEndpoint,
    # core/http/endpoints/localai/backend_load.go) with schema.ModelLoadRequest `{"model":
    # NAME}` loads it and answers once loaded, 200 `{"loaded": [...], "message": "model
    # loaded"}`, or 500 `{"loaded": [...], "message": "failed to load model: ..."}`;
    # `POST /backend/shutdown` (BackendShutdownEndpoint, backend_monitor.go) with
    # schema.BackendMonitorRequest `{"model": NAME}` answers 200 `{"message": "model
    # stopped"}`; a model not loaded is an echo 404, which core/http/app.go's error handler
    # answers as any 404 (render.go notFoundHandler): `{"error": {"message": "Resource not
    # found", "code": 404}}`, the handler's own message lost.
    # Both, like /system, sit behind adminMiddleware (core/http/app.go: RequireAdmin with
    # --auth-enabled, else none); core/http/auth/middleware.go takes a legacy `--api-keys`
    # key as a synthetic admin: the server's API key is sent.
    control=ModelControl(
        load=ControlRequest(path="/backend/load", body={"model": "{model}"}),
        unload=ControlRequest(path="/backend/shutdown", body={"model": "{model}"}),
    ),
    # GET /metrics (core/http/routes/localai.go @ v4.9.0, behind the admin key when auth is on;
    # off with LOCALAI_DISABLE_METRICS_ENDPOINT) is OpenTelemetry's Prometheus exporter
    # (core/services/monitoring/metrics.go): `api_call`, a histogram of every HTTP route's
    # handler time labelled method and path (health checks and listings too, not inference
    # latency), and, since v4.3.2, core/services/routing/billing/prom.go's
    # localai_tokens_total{user, served_model, kind="prompt"|"completion"}, added per finished
    # request. Prompt and completion tokens are one family told apart by a label, which
    # LoadMetrics cannot select, and the name as exporter v0.66.0 (go.mod) writes it was not
    # pinned from its source. No gauge of requests running or waiting (its gRPC backends keep
    # theirs): nothing is read.
    load=LoadMetrics(
        note="LocalAI's /metrics has no request counts (an HTTP handler-time histogram of every "
        "route, and token counters told apart only by a label): enginespec reads none"
    ),
)
