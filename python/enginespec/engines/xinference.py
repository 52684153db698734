"""Xinference: ``xinference-local`` (supervisor and worker in one cluster, and its REST API),
``xinference-supervisor`` (the REST API of a distributed cluster), ``xinference-worker`` (joins
one) and the deprecated ``xinference`` with no command.

Facts from xorbitsai/inference ``7ecec16b`` (2026-08-23, v3.2.0-61) unless a line says otherwise;
the files cited are at that commit.
"""

from __future__ import annotations

import enginespec.engines._libraries as _libraries
from enginespec.definition.records import (
    ExtraPort,
    Flags,
    HealthRule,
    IdentityProbe,
    Launch,
    LoadMetrics,
    Package,
    Serving,
)
from enginespec.definition.servedrecords import ControlRequest, ModelControl, ModelList
from enginespec.definition.signature import LaunchForm, Signature
from enginespec.engines import llamacpp, vllm
from enginespec.failures import FailurePattern, Failures
from enginespec.spec import EngineSpec

SIGNATURE = Signature(
    engine="xinference",
    launch_forms=(
        # pyproject.toml [project.scripts]: `xinference-local = xinference.deploy.cmdline:local`,
        # `xinference-supervisor = ...:supervisor`, `xinference-worker = ...:worker`, each a click
        # command taking options only (xinference/deploy/cmdline.py): a positional is a usage
        # error (click exits 2). xinference/deploy/local.py main serves the REST API from this process
        # (restful_api.run) once the actor pool it spawned answers (multiprocessing `spawn`);
        # xinference/deploy/supervisor.py likewise. The image's command is `xinference-local -H 0.0.0.0`.
        LaunchForm(executables=("xinference-local",), max_positionals=0),
        LaunchForm(executables=("xinference-supervisor",), max_positionals=0),
        # `xinference-worker -e http://supervisor:9997 -H HOST --worker-port N`: an actor pool
        # that registers with the supervisor at `--endpoint` and serves no REST API; its own
        # address is `{host}:{worker_port or get_next_port()}` (a free port when none is given).
        LaunchForm(
            executables=("xinference-worker",),
            facts=False,
            role="follower",
            host_flags=("-H", "--host"),
            port_flags=("--worker-port",),
        ),
        # `xinference` (`cli`, a click group with `invoke_without_command=True`, also
        # `python -m xinference.deploy.cmdline`): with no command it starts a local cluster
        # (deprecated, warns "use the new 'xinference-local' command"), taking `--host`/`-H`,
        # `--port`/`-p`, `--log-level`. Any positional names a command: `launch`, `list`,
        # `terminate`, `register`, `chat`, `engine`, ... are clients of a running cluster (or
        # an unknown command, a usage error): not servers.
        LaunchForm(executables=("xinference",), modules=("xinference.deploy.cmdline",), max_positionals=0),
    ),
    # click options: `--host`/`-H`, `--port`/`-p` (local, supervisor, and the group).
    aliases={"-H": "--host", "-p": "--port"},
    host_flags=("--host",),
    port_flags=("--port",),
    # Every other option takes a value (`--log-level`, `--supervisor-port`, `-e/--endpoint`,
    # `--worker-port`, `-MH/--metrics-exporter-host`, `-mp/--metrics-exporter-port`); the group's
    # `--version`/`-v` (click.version_option) and click's `--help` print and exit.
    exit_flags=frozenset({"--help", "--version", "-v"}),
    # The actor pools it spawns (the cluster's pool; a subprocess per model, retitled
    # `Model: <replica uid>` by core/model.py ModelActor.load; vLLM's distributed workers
    # `Xinf vLLM worker: <rank> [<uid>]`, model/llm/vllm/distributed_worker_actor.py) and what
    # they start (a vLLM engine core) are its workers. No worker title is declared: a lone
    # process titled `Model: x` is some other program's as likely as a lost Xinference model.
    fold_workers=True,
    # constants.py: XINFERENCE_DEFAULT_LOCAL_HOST = "127.0.0.1" (local, the group),
    # XINFERENCE_DEFAULT_ENDPOINT_PORT = 9997.
    default_host="127.0.0.1",
    default_port=9997,
)


SPEC = EngineSpec(
    id="xinference",
    aliases=("xorbits-inference",),
    signature=SIGNATURE,
    # `xinference-local -H HOST -p PORT`; cmdline.py ends with `if __name__ == "__main__": cli()`,
    # the group, which takes the same options with no command.
    launch=Launch(
        kind="console_script",
        executable="xinference-local",
        module_args=("-m", "xinference.deploy.cmdline"),
    ),
    # click: a `multiple=True` option is given once per value
    flags=Flags(list_style="repeat"),
    # PyPI `xinference` (pyproject.toml `name = "xinference"`); the engines it runs models with
    # (vLLM, SGLang, llama-cpp-python, transformers) are its extras (`xinference[all]`).
    package=Package(distributions=("xinference",)),
    serving=Serving(
        # api/routers/admin.py register_routes: `GET /v1/cluster/auth` is public (no Security
        # dependency) and answers {"auth": api.is_authenticated()}, Starlette's compact JSON
        # `{"auth":false}`. The REST API binds only after the actor pool answers its health check
        # (xinference/deploy/local.py main: health_check, then restful_api.run), so an answer means the
        # cluster is up; models load later, each on its own (see /v1/models). `/status` (the
        # compose file's healthcheck) returns the supervisor's `_worker_status`, a dict of
        # WorkerStatus dataclasses (core/supervisor.py get_status), through JSONResponse, which
        # cannot encode them once a worker has reported: read, not run, so not relied upon.
        health_path="/v1/cluster/auth",
        health_rules=(
            HealthRule(status=200, field="auth", flag=False, state="ready"),
            HealthRule(status=200, field="auth", flag=True, state="ready"),
            HealthRule(status=200, state="unknown", reason="not Xinference's /v1/cluster/auth answer"),
        ),
        identity=IdentityProbe(path="/v1/cluster/auth", status=200, contains='{"auth":'),
        # `xinference-supervisor` and `xinference-worker` take XINFERENCE_DEFAULT_DISTRIBUTED_HOST
        # = "0.0.0.0" (constants.py) for `--host`.
        program_hosts={"xinference-supervisor": "0.0.0.0", "xinference-worker": "0.0.0.0"},
        # the supervisor's actor pool (`--supervisor-port`) and the metrics exporter
        # (`--metrics-exporter-port`): a free port each when not given.
        extra_ports=(ExtraPort(flag="--supervisor-port"), ExtraPort(flag="--metrics-exporter-port")),
    ),
    # api/routers/models.py: `GET /v1/models` (scope models:list when auth is on, as it is by
    # default: constants.py is_auth_advanced, XINFERENCE_AUTH_ADVANCED defaults to "true"; its
    # API keys live in its database, not in argv) lists the running models as an OpenAI list
    # (restful_api.py list_models: {"object": "list", "data": [{"id": MODEL_UID, "object":
    # "model", "owned_by": "xinference", "model_name": ..., "model_type": ..., ...}]}), each by
    # the uid it was launched with.
    models=ModelList(kind="openai", path="/v1/models"),
    # Terminate as unload, by uid (v3.2.1: api/routers/models.py `DELETE /v1/models/{model_uid}`,
    # scope models:write when auth is on, as by default, so a default cluster answers 401 to
    # enginespec, which has no key of its database; restful_api.py terminate_model awaits the
    # supervisor's terminate_model and answers 200 `null`, or 400/500 {"detail": ...}).
    # Launch (`POST /v1/models`, restful_api.py launch_model) is left out: it needs more than a
    # name (`model_engine` for an LLM, "Please specify the `model_engine` field", and the
    # format, size, quantization, replicas, GPUs it is launched with), which a load request
    # naming a model alone cannot say.
    control=ModelControl(unload=ControlRequest(path="/v1/models/{model}", method="DELETE")),
    # its model processes run vLLM, SGLang, transformers and llama.cpp (xllamacpp) in Python
    # Its own wrapper of a model process's failure (xinference/core/worker.py, from memory of 1.x:
    # `Failed to launch model, detail: [address=POOL, pid=N] ERROR`; the pool's address is no
    # bind), a missing file there being the model's.
    # The REST API's /metrics (api/restful_api.py @ v3.2.1) deregisters the worker-only metrics
    # (core/metrics.py _WORKER_ONLY_METRICS): it has the cluster's gauges (workers, models
    # loaded, uptime). A worker's request and token figures (xinference:model_serve_count,
    # xinference:input_tokens_total_counter, xinference:output_tokens_total_counter,
    # xinference:time_to_first_token_seconds) are on its own metrics exporter
    # (core/metrics.py launch_metrics_export_server), started only when
    # --metrics-exporter-host or --metrics-exporter-port is given (core/worker.py), on that
    # port: not read.
    load=LoadMetrics(
        note="Xinference's REST API reports cluster gauges only; request and token counts are on a "
        "worker's metrics exporter (--metrics-exporter-port), which enginespec does not read"
    ),
    failures=Failures(
        patterns=(
            FailurePattern(
                kind="model_not_found",
                pattern=r"Failed to launch model, detail: \[address=[^\]]*\] \[Errno 2\] No such file or "
                r"directory",
                hint="a file of the model (or of its engine) is missing: check the model's path in its "
                "registration",
            ),
        )
    )
    + vllm.FAILURES
    + llamacpp.FAILURES
    + _libraries.PYTHON_SERVER,
)
