"""The release a running engine runs (``EngineProcess.engine_version``), as routers ask for it.

Two sources, by the engine's kind, and nothing is ever run:

- an engine installed as a Python package: the version in the dist-info of the site directories
  the server loaded modules from (:mod:`enginespec.process.packages`), as its owner may read them;
- a binary engine: what the server says of itself at its definition's ``Serving.version_path``
  (llama-server's ``/props`` ``build_info``), asked once by a health check of a ready server and
  remembered here (:func:`told`); until one has asked, ``None``.

Either is untrusted text: a version is shown only when it looks like one (:data:`VERSION`), else it
is ``None``. Both are kept by the process's identity (a release does not change while a process
runs; an exec is another engine or argv), the oldest forgotten first.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict
from typing import Protocol

from enginespec._host.root import HostRoot
from enginespec.definition.records import EngineDefinition
from enginespec.process.packages import installed_version
from enginespec.untrusted.documents import json_object


class Running(Protocol):
    """What of a running engine's record (an ``EngineProcess``) its version is kept by."""

    @property
    def pid(self) -> int: ...
    @property
    def start_time(self) -> float: ...
    @property
    def engine(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def _root(self) -> HostRoot: ...
    @property
    def _local(self) -> bool: ...
    @property
    def _start_ticks(self) -> int | None: ...


#: What a version shown looks like: ``0.11.0``, ``0.11.0+cu128``, ``v0.9.3``, ``b6520-2fbd4cde``.
#: Anything else a process's files or answers give (spaces, markup, a page of text) is not one.
VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z._+~-]{0,63}")
#: The most processes whose versions are kept.
_KEPT = 512
#: After an answer that gave no version, how long before a ready server is asked again (seconds):
#: an older build without the route is not asked every check.
RETRY_AFTER = 600.0
#: The most bytes of a version answer read (llama-server's ``/props`` carries its chat template).
ANSWER_BYTES = 1 << 20

_Key = tuple[HostRoot, int, float, str]
#: (version or ``None``, ``time.monotonic()`` when it was found).
_known: OrderedDict[_Key, tuple[str | None, float]] = OrderedDict()
_lock = threading.Lock()


def _key(process: Running) -> _Key:
    return (process._root, process.pid, process.start_time, process.engine)


def shown(text: object) -> str | None:
    """``text`` when it is a version (:data:`VERSION`), else ``None``."""
    return text if isinstance(text, str) and VERSION.fullmatch(text) else None


def _remember(key: _Key, version: str | None) -> None:
    with _lock:
        _known[key] = (version, time.monotonic())
        _known.move_to_end(key)
        while len(_known) > _KEPT:
            _known.popitem(last=False)


def package_version(definition: EngineDefinition, process: Running) -> str | None:
    """The version of the engine's package the server loaded (its dist-info, as read by
    :func:`installed_version`), read once per process; ``None`` for a binary engine or when its
    files do not say."""
    if not definition.package.distributions:
        return None
    key = _key(process)
    with _lock:
        if key in _known:
            return _known[key][0]
    found = shown(installed_version(process.pid, definition.package.distributions, process._root))
    _remember(key, found)
    return found


def running_version(process: Running) -> str | None:
    """The release ``process`` runs, as far as it is known without a request (see the module);
    ``None`` for a record no scan made (built from a document: its pid may be another process's
    here)."""
    if process._start_ticks is None:
        return None
    # The registry imports the engines' modules, which build on the process records: imported
    # on the first version asked for, not with this module.
    from enginespec.definition.registry import definition_of

    definition = definition_of(process.engine)
    if definition is None:
        return None
    if definition.package.distributions:
        return package_version(definition, process)
    with _lock:
        known = _known.get(_key(process))
    return known[0] if known is not None else None


def wants_answer(definition: EngineDefinition, process: Running) -> bool:
    """Whether a health check of ``process``, ready, should ask its version route: the engine has
    one and no package to read, and the process has not said (or not within
    :data:`RETRY_AFTER` of an answer that gave none)."""
    if (
        definition.serving.version_path is None
        or definition.package.distributions
        or not process._local
        or process._start_ticks is None  # a record no scan made: its pid may be another's here
        or process.role != "server"  # a runner's release is its supervisor's
    ):
        return False
    with _lock:
        known = _known.get(_key(process))
    return known is None or (known[0] is None and time.monotonic() - known[1] >= RETRY_AFTER)


def told(definition: EngineDefinition, process: Running, status: int | None, body: bytes) -> str | None:
    """Remembers the version in a ready server's answer of its version route (a JSON object with
    the version under ``Serving.version_key``); ``None`` when the answer holds none."""
    answer = json_object(body, max_bytes=ANSWER_BYTES) if status == 200 else None
    text = answer.get(definition.serving.version_key) if answer is not None else None
    pattern = definition.serving.version_pattern
    if pattern is not None and isinstance(text, str):
        found = re.fullmatch(pattern, text[:256])
        text = found.group(1) if found is not None else None
    version = shown(text)
    _remember(_key(process), version)
    return version
