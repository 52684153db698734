"""What an engine's definition says of the models it serves now and how it is told to load,
unload, sleep and wake them through its own API (:class:`ModelList`, :class:`ModelControl`): read
by :mod:`enginespec.health.servedmodels` and :mod:`enginespec.lifecycle.modelcontrol`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import Field

from enginespec.definition.recordbase import KeyRole, Record

ModelListKind = Literal[
    "fixed",
    "llamacpp_router",
    "ollama",
    "openai",
    "sglang",
    "one_of_config",
    "mlx_vlm",
    "tabbyapi",
    "koboldcpp",
    "lmstudio",
    "lemonade",
    "docker_model_runner",
    "localai",
]


class ModelList(Record):
    """Where a server says which models it serves now, and in what state; ``kind`` says how its
    answers read (:mod:`enginespec.health.servedreaders`): ``fixed``, one model fixed at start,
    which its argv names (no request); ``llamacpp_router``, llama.cpp's router ``GET /models``,
    each model with a ``status`` (a server started with a model is ``fixed``); ``ollama``, the
    loaded models at ``path`` (``/api/ps``) and those it could load at ``available_path``
    (``/api/tags``); ``openai``, the models at ``path`` (``/v1/models``) and, at
    ``sleeping_path``, whether the server sleeps (vLLM ``/is_sleeping``); ``sglang``, the one
    model of ``/get_model_info``; ``one_of_config``, the models of its config file
    (``Settings.config_models_key``) listed at ``path``, one loaded at a time: the one whose model
    file the server maps now (a server started with a model instead is ``fixed``); ``mlx_vlm``,
    the model of each kind it holds in ``/health``'s ``loaded_models`` and, at
    ``available_path``, the models it could load (``/v1/models``), whatever its argv names: a
    request naming another model loads it in place of the one of its kind; ``tabbyapi``, the one
    model loaded at ``path`` (a model card, ``id``; an answer with ``none_loaded`` as its
    ``detail`` when there is none) and those it could load at ``available_path`` (an OpenAI
    list, with ``available_key``); ``koboldcpp``, the one model of ``/api/v1/model`` and, from a
    server started with one of ``asked_with``, the files and configs it could switch to at
    ``available_path`` (``/api/admin/list_options``); ``lmstudio``, every model LM Studio has
    downloaded at ``path`` (``/api/v1/models``: each loaded instance ``loaded`` under its
    instance id, a model without one ``unloaded`` under its key) or, from a release without it,
    at ``older_path`` (``/api/v0/models``: each ``id`` with its ``state``); ``lemonade``, the
    models Lemonade runs a backend for, in its health answer at ``path`` (``all_models_loaded``:
    each ``model_name`` with its ``status`` and ``backend_url``), and those downloaded at
    ``available_path`` (an OpenAI list); ``docker_model_runner``, the runners Docker Model Runner
    holds at ``path`` (``/engines/ps``: a list, each ``model_name``, ``loading`` while it starts)
    and the models it has at ``available_path`` (an OpenAI list); ``localai``, the models
    LocalAI holds at ``path`` (``/system``: ``loaded_models``, each ``id``) and those it has
    configured at ``available_path`` (an OpenAI list)."""

    kind: ModelListKind = "fixed"
    #: a request naming another model loads it in place of the one the argv names, and the
    #: server says not which it holds (mlx_lm.server): a ``fixed`` reading says so
    replaced_on_request: bool = False
    #: the server runs a child per loaded model (its ``runner``s), matched to its models
    runners: bool = False
    path: str = Field(default="/v1/models", pattern=r"^/")
    available_path: str | None = Field(default=None, pattern=r"^/")
    sleeping_path: str | None = Field(default=None, pattern=r"^/")
    #: where a release older than ``path`` lists its models: asked when ``path`` answers 404
    older_path: str | None = Field(default=None, pattern=r"^/")
    #: the key ``available_path`` wants (see ``Serving.api_key_file``)
    available_key: KeyRole = "api"
    #: the ``detail`` of the answer at ``path`` of a server with no model loaded (not an error)
    none_loaded: str | None = None
    #: the server lists a model by the last component of the path it was loaded by
    #: (``a/b`` as ``b``)
    listed_by_leaf: bool = False
    #: a server started with a model in its argv serves that one, fixed (nothing is asked), unless
    #: it was started with one of ``asked_with`` (a llama.cpp router starts with no model)
    argv_model_fixed: bool = False
    #: the flags with which the model of a server started with one can change at runtime, or come
    #: from elsewhere than argv (KoboldCpp's ``--admin``, ``--config``)
    asked_with: tuple[str, ...] = ()
    #: the flag, else the environment variable, whose value is the bearer key the requests at
    #: ``available_path`` and of ``ModelControl`` need instead of the API key (KoboldCpp's admin
    #: password): read from the server's own argv or environment for the request alone, never kept
    key_flag: str | None = None
    key_variable: str | None = None


class ControlRequest(Record):
    """One request of an engine's own API that changes what it serves (see
    :mod:`enginespec.lifecycle.modelcontrol`): ``method path`` (``POST`` unless said; a
    ``{model}`` in ``path`` becomes the model's name, percent-encoded as one path segment), with
    ``body`` (a JSON object whose string values ``{model}`` become the model's name) when it
    takes one; a list value's ``"{model}"`` items too)."""

    path: str = Field(pattern=r"^/")
    body: Mapping[str, object] | None = None
    #: ``DELETE``: a REST API's removal of the resource at ``path`` (Xinference's terminate)
    method: Literal["POST", "DELETE"] = "POST"
    #: the flags the server must have been started with for the route to exist
    flags: tuple[str, ...] = ()
    #: the environment the server must have been started with for it (``VLLM_SERVER_DEV_MODE=1``)
    environment: Mapping[str, str] = Field(default_factory=dict)
    #: ``False`` when the server's model list does not show the state reached (SGLang's released
    #: memory): its answer alone is taken, and said
    shown: bool = True
    #: the request unloads every model the server holds, not only the one named (mlx-vlm's
    #: ``/unload``): refused while another is loaded, which would go too
    every_model: bool = False
    #: the key it needs (see ``Serving.api_key_file``; ``api``: the server's own, as a health
    #: check sends it)
    key: KeyRole = "api"
    #: ``sse``: the answer is a stream of server-sent events, read to its end (bounded in bytes
    #: and by the call's timeout); an event that is an object with an ``error`` fails the call
    answer: Literal["json", "sse"] = "json"
    #: the request names no model: it acts on the one loaded (TabbyAPI's unload), so it is sent
    #: only when the model list shows the model named loaded
    on_loaded: bool = False
    #: the server must have been started with one of these flags at least (any of them enables it)
    any_flags: tuple[str, ...] = ()
    #: the engine serves the new state from a new process (KoboldCpp's admin reload ends the child
    #: that serves and starts another): the wait first sees a process of the server's tree from
    #: before the request end, so that the old server's answers are not taken for the new one's
    restarts: bool = False


class ModelControl(Record):
    """How the server loads and unloads a model, sleeps and wakes through its own API (``None``:
    it has no such request)."""

    load: ControlRequest | None = None
    unload: ControlRequest | None = None
    sleep: ControlRequest | None = None
    wake: ControlRequest | None = None
