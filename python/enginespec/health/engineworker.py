"""A ready server without the worker its engine always runs (vLLM's ``EngineCore``) is not
serving, whatever its health endpoint says: the rule is the engine's data
(:class:`~enginespec.definition.records.EngineWorker`), and every check applies it, so a one-shot
``ps`` or ``describe``, the exporter and ``watch`` agree on such a server however long they have
been looking (the watch's monitor also remembers workers that exit: :mod:`enginespec.health.vitals`).

What is read, of the server's own tree only: its workers' titles (``/proc/PID/cmdline``) and, when
none is the engine worker, the engine's version from the dist-info of the site directories the
server loaded modules from (:mod:`enginespec.process.packages`), as its owner may read them. Nothing
is run, and a server whose version cannot be read is not judged.
"""

from __future__ import annotations

import re

from enginespec._host.root import HostRoot
from enginespec.definition.records import EngineDefinition, EngineWorker
from enginespec.process.record import EngineProcess
from enginespec.process.versions import package_version

#: The most bytes of a worker's title read (its argv[0] and the rest of a short command line).
_TITLE_BYTES = 4096
#: The most workers looked at: a server's tree is a few dozen processes (TP 8 with its helpers).
_MAX_WORKERS = 256


def missing_engine_worker(definition: EngineDefinition, process: EngineProcess) -> str | None:
    """Why ``process``, a server of ``definition`` that answers ready, cannot serve (the reason
    of an ``unhealthy`` verdict), or ``None``: it runs its engine worker, its engine has none,
    or its version is not one that always runs it (or cannot be read)."""
    worker = definition.serving.engine_worker
    if worker is None or process.role != "server" or not process._local:
        return None
    root = process._root
    if _runs(worker, process, root):
        return None
    # read once per process (enginespec.process.versions): a server stuck without its worker is
    # judged again every check
    version = package_version(definition, process)
    if version is None or not _always_runs(worker, version):
        return None
    return (
        f"no {worker.name} under the API server ({definition.id} {version} runs its engine in it): "
        "it answers, but cannot serve a request"
    )


def _runs(worker: EngineWorker, process: EngineProcess, root: HostRoot) -> bool:
    """Whether one of the server's workers runs under the engine worker's title."""
    title = re.compile(worker.title)
    for pid in process.worker_pids[:_MAX_WORKERS]:
        try:
            data = root.read(pid, "cmdline", _TITLE_BYTES)
        except OSError:
            continue  # gone since the scan: as if it never ran
        first = data.split(b"\0", 1)[0].decode("utf-8", "backslashreplace")
        if title.search(first):
            return True
    return False


def _always_runs(worker: EngineWorker, version: str) -> bool:
    """Whether release ``version`` (read from the server's files: any text) is one of
    ``worker.versions``; a version that is not PEP 440 is not."""
    # packaging is imported on the first such server, not with the package
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        return SpecifierSet(worker.versions).contains(Version(version), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return False
