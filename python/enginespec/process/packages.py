"""What a running Python process has installed, read without running anything: the site
directories it loaded extension modules from (the files it maps) and the dist-info
there, as its owner would read them, inside its root (the process may be any user's, and its
argv may name anything)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from enginespec._host.root import HostRoot
from enginespec.process.mappedfiles import mapped_files


def installed_version(pid: int, distributions: Sequence[str], root: HostRoot) -> str | None:
    """The version of the first of ``distributions`` installed in a site directory process
    ``pid`` (of the host under ``root``) loaded modules from, or ``None`` when none can be read."""
    return _versions_from_files(pid, _mapped_site_dirs(pid, root), distributions, root)


#: Most site directories listed, and entries looked at in each.
_MAX_SITES = 64
_MAX_ENTRIES = 10_000
#: Most of a METADATA file read: its header comes first.
_MAX_METADATA_HEAD = 1 << 16


def _mapped_site_dirs(pid: int, root: HostRoot) -> list[str]:
    """The site-packages directories a running Python loaded extension modules from (as paths
    inside the process's root), from the files it maps."""
    found: dict[str, None] = {}
    for mapped in mapped_files(pid, root) or ():
        for marker in ("/site-packages/", "/dist-packages/"):
            head, sep, _rest = mapped.path.partition(marker)
            if sep:
                found.setdefault(head + marker.rstrip("/"), None)
    return list(found)[:_MAX_SITES]


def _metadata_version(head: bytes) -> str | None:
    """The ``Version:`` of a METADATA (or PKG-INFO) header: the lines before the first blank one."""
    for line in head.decode("utf-8", "replace").splitlines():
        if not line.strip():
            break
        name, _, value = line.partition(":")
        if name.strip().lower() == "version" and 0 < len(value.strip()) <= 128:
            return value.strip()
    return None


def _versions_from_files(
    pid: int, sites: Sequence[str], distributions: Sequence[str], root: HostRoot
) -> str | None:
    """The first installed version of ``distributions`` in ``sites`` of process ``pid``, read from
    the dist-info (or egg-info) files there as its owner would read them, inside its root (see
    :mod:`enginespec._host.namedfiles`): nothing is run."""
    wanted = {_normalise(name) for name in distributions}
    for site in sites:
        for entry in root.list_named(pid, site, _MAX_ENTRIES) or ():
            for suffix, metadata in ((".dist-info", "METADATA"), (".egg-info", "PKG-INFO")):
                if entry.endswith(suffix) and _normalise(entry[: -len(suffix)].split("-")[0]) in wanted:
                    read = root.read_named(pid, f"{site}/{entry}/{metadata}", _MAX_METADATA_HEAD, whole=False)
                    version = _metadata_version(read.data) if read.data is not None else None
                    if version is not None:
                        return version
    return None


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503
