"""A running engine server as a record (:class:`EngineProcess`). The record does no I/O but for the
model facts read on first access; the scanning that builds it is :mod:`enginespec.scanning.scanner`, and
whether the process it was made from still runs is :mod:`enginespec.process.liveness`."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict, PrivateAttr, ValidatorFunctionWrapHandler, computed_field, model_validator

from enginespec._host.root import HOST_ROOT, HostRoot
from enginespec.definition.forks import fork_of
from enginespec.definition.records import Fact
from enginespec.definition.registry import definition_of
from enginespec.errors import warn_renamed
from enginespec.gpus.reader import GpuUse
from enginespec.models.naming import model_name
from enginespec.models.processes import cached, measured
from enginespec.process.argv import Invocation
from enginespec.process.containers import Container, PublishedPort
from enginespec.process.settings import Source
from enginespec.process.versions import running_version, shown

if TYPE_CHECKING:
    from enginespec.definition.modelrecords import ModelFacts


#: Why the key of one running engine is ``instance_id`` in Python: ``engine`` is the engine's id
#: (``vllm``). Its documents, labels and CLI keep ``engine_id``, which other systems read.
INSTANCE_ID_WHY = "engine is the engine's id; the key of one running engine is its instance_id"
#: The key ``instance_id`` has in every document (``ps --json``, the agent's answers, watch
#: events) and label: what readers of those, and agents of earlier versions, know it by.
WIRE_INSTANCE_ID = "engine_id"


def make_instance_id(engine: str, model: str | None, port: int | None) -> str:
    """The key of an engine serving ``model`` on ``port`` (see ``EngineProcess.instance_id``)."""
    identity = "\0".join((engine, model or "", str(port)))
    digest = hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"{engine}-{port or 'noport'}-{digest}"


class EngineProcess(Invocation):
    """A running engine server: what its argv says (see Invocation), plus the process facts.
    ``(pid, start_time)`` is its identity (pids are reused).

    ``argv`` has secret values (``--api-key``, ``--hf-token``) replaced by ``***``. ``worker_pids``
    are the server's descendants (vLLM/SGLang workers), folded into it. ``supervisor`` names who
    started it (``ollama``, ``llama-swap``, ``llama-server`` router) or is ``None``.
    ``listen_ports`` are the TCP ports the process tree listens on (empty when unknown).
    ``port_conflicts`` are the pids of other processes listening on the same address and port as
    the server (SO_REUSEPORT: the kernel splits its connections between them), Linux.

    ``container`` is the container it runs in (``None`` on the host). ``private_network`` says
    it runs in a network namespace other than the host's, where its own address may not be
    reachable from here; ``published`` are the host addresses Docker's proxy forwards to its port,
    and ``base_url`` is then the first of them.
    """

    # instance_id is dumped under its alias, engine_id, whatever the caller asks (WIRE_INSTANCE_ID).
    model_config = ConfigDict(serialize_by_alias=True)

    pid: int
    start_time: float
    ppid: int
    #: ``None`` when argv gives no usable address (see ``problems``).
    base_url: str | None
    #: where each fact came from: ``argv``, ``config`` (the engine's config file), ``environment``
    #: (``/proc/PID/environ``, readable by root or the same user), ``default``, or for an
    #: ``orphan`` ``server`` (what the server it worked for said, while this scanner saw it).
    sources: Mapping[Fact, Source] = {}
    argv: tuple[str, ...]
    exe: str | None
    worker_pids: tuple[int, ...]
    supervisor: str | None
    listen_ports: tuple[int, ...]
    #: for an ``orphan``: the pid of the server it worked for, when this scanner saw that server.
    server_pid: int | None = None
    port_conflicts: tuple[int, ...] = ()
    container: Container | None = None
    private_network: bool = False
    published: tuple[PublishedPort, ...] = ()
    #: the GPUs the tree (server and workers) holds, each counted once (see ``enginespec.gpus.reader``).
    gpus: tuple[GpuUse, ...] = ()
    #: why the tree's GPU set is not (wholly) known (fds another user's, a CUDA device the driver
    #: does not list), or ``None``.
    gpus_unknown: str | None = None
    #: the engine's API key from its argv: used by health checks, never shown or serialised.
    _api_key: str | None = PrivateAttr(default=None)
    #: the start in clock ticks since boot, as the scanner read it (``None`` in a record built
    #: elsewhere): the exact identity, where ``start_time`` moves with the kernel's boot time.
    _start_ticks: int | None = PrivateAttr(default=None)
    #: the host it was scanned on (a fixture host's, for a scanner given its root): every later
    #: read of its files, ``/proc`` and ``/sys`` goes through it (this host's for a record built
    #: elsewhere).
    _root: HostRoot = PrivateAttr(default=HOST_ROOT)
    #: ``False`` for an engine another host reported (enginespec.fleet.remote): nothing of this host's
    #: ``/proc`` or files is read for it.
    _local: bool = PrivateAttr(default=True)
    #: for an engine another host reported: the ``model_name`` that host gave (see remote).
    _reported_model_name: str | None = PrivateAttr(default=None)
    #: for an engine another host reported: the ``engine_version`` that host gave.
    _reported_version: str | None = PrivateAttr(default=None)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_reported_model_name(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """A document of another host (an agent's, a watch's) keeps the ``model_name`` and
        ``engine_version`` it gave: the files and answers they were read from are that host's."""
        made = handler(data)
        if isinstance(data, dict) and isinstance(data.get("model_name"), str):
            made._reported_model_name = data["model_name"]
        if isinstance(data, dict):
            made._reported_version = shown(data.get("engine_version"))
        return made

    @functools.cached_property
    def model_facts(self) -> ModelFacts | None:
        """The facts of the model this engine serves, with the memory its engine allocates for
        it with its actual arguments (``ModelFacts.estimate``); ``None`` when they cannot be
        known (``model_facts_problem`` says why). Read on first access, never by the scan, and
        cached by (pid, start time, argv) across scans (``enginespec.models.processes``)."""
        if not self._local:
            return None
        result = cached(self.pid, self.start_time, self.engine, self.model, self.argv, self._root)
        if isinstance(result, str):
            return None
        held = measured(getattr(self, "gpus", ()))  # the GPU ledger's field, where this build has it
        return result.model_copy(update={"measured": held}) if held else result

    @property
    def model_facts_problem(self) -> str | None:
        """Why ``model_facts`` is ``None`` (the model's file that could not be read, and how)."""
        if not self._local:
            return "an engine of another host: its model's files are not read from here"
        result = cached(self.pid, self.start_time, self.engine, self.model, self.argv, self._root)
        return result if isinstance(result, str) else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def model_name(self) -> str | None:
        """The model as people name it, shown by every table, label and feed: a Hugging Face
        cache path's repo id (``Qwen/Qwen3-0.6B``), a GGUF's file name, the name an Ollama blob
        was pulled as (``qwen3:8b``); else ``model`` itself, which stays the exact argument (the
        ``model_path`` label). See :mod:`enginespec.models.naming`."""
        if not self._local:
            return self._reported_model_name or model_name(self.model)
        return model_name(self.model, self.pid, self.engine, self._root)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def engine_version(self) -> str | None:
        """The release of the engine this process runs, as routers ask for it: for an engine
        installed as a Python package the version in the package's files the server loaded
        (``0.11.0``), for a binary engine what it said of itself when a health check found it
        ready (llama-server's ``b6520-2fbd4cde``; ``None`` until then). Nothing is run, and text
        that does not look like a version is not shown. See :mod:`enginespec.process.versions`."""
        if not self._local:
            return self._reported_version
        return running_version(self)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def fork(self) -> str | None:
        """The fork of the engine this process runs, where its argv or executable shows one
        (``ik_llama.cpp`` for a ``llama-server`` given an option only that fork takes); ``None``
        for the engine itself or a fork nothing shows. See ``EngineSpec.forks``."""
        definition = definition_of(self.engine)  # another host's engine may be unknown here
        return fork_of(definition.forks, self.argv, self.exe) if definition is not None else None

    @computed_field(alias=WIRE_INSTANCE_ID)  # type: ignore[prop-decorator]
    @property
    def instance_id(self) -> str:
        """A key for this running engine that survives restarts of the same engine, model and port
        (pids and start times change): ``vllm-8000-1a2b3c4d``, where ``engine`` is ``vllm``. For a
        container with a published port the port is the host's: two containers serving one model
        on port 8000 inside are told apart by the host ports they are published on. Documents and
        labels call it ``engine_id``, the CLI "engine id"."""
        port = self.published[0].host_port if self.published else self.effective_port
        return make_instance_id(self.engine, self.model, port)

    @property
    def engine_id(self) -> str:
        """Deprecated: :attr:`instance_id`."""
        warn_renamed("EngineProcess.engine_id", "EngineProcess.instance_id", INSTANCE_ID_WHY)
        return self.instance_id

    def secret_api_key(self) -> str | None:
        return self._api_key
