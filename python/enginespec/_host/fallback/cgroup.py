"""Pure-Python twin of ``rust/cgroup.rs``, with the same results: ``parse_cgroup``, the container
the text of ``/proc/PID/cgroup`` places a process in.

It reads untrusted text (a process in a delegated cgroup names its own sub-cgroups): an id is
only ever 64 lowercase hex digits, a pod uid a UUID or 32 hex digits.
"""

from __future__ import annotations

import os
import re

from enginespec._host.shapes import ContainerRuntime

_ID = r"[0-9a-f]{64}"
# A pod uid is a UUID (dashes in cgroupfs paths, underscores in systemd slice names), or 32 hex
# digits for a static pod (the manifest's hash).
_POD = r"(?P<pod>[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32})"
#: Scope (systemd driver) and directory (cgroupfs driver) prefixes -> runtime.
_PREFIXES: dict[str, ContainerRuntime] = {
    "docker": "docker",
    "libpod": "podman",
    "cri-containerd": "containerd",
    "crio": "cri-o",
}
# `docker-<id>.scope`, `libpod-<id>.scope`, `cri-containerd-<id>.scope`, `crio-<id>.scope`, and
# podman's cgroupfs `libpod-<id>`. Podman's `libpod-conmon-<id>.scope` holds its monitor, not
# the container: the prefix list does not take it.
_SCOPE = re.compile(rf"(?P<prefix>{'|'.join(map(re.escape, _PREFIXES))})-(?P<id>{_ID})(?:\.scope)?")
# Kubelet's systemd driver on cgroup v1 through containerd names the container inside one
# component: `kubepods-burstable-pod<uid>.slice:cri-containerd:<id>`.
_TRIPLE = re.compile(rf"(?P<slice>[^:]*):(?P<prefix>{'|'.join(map(re.escape, _PREFIXES))}):(?P<id>{_ID})")
_POD_DIR = re.compile(rf"pod{_POD}")
_BARE_ID = re.compile(_ID)
_POD_SLICE = re.compile(rf"(?:[a-z0-9]+-)*kubepods(?:-[a-z]+)*-pod{_POD}\.slice")


def _innermost(path: str) -> tuple[ContainerRuntime, str, str | None] | None:
    """(runtime, id, pod uid) of the innermost container named by one cgroup path."""
    found: tuple[ContainerRuntime, str, str | None] | None = None
    pod: str | None = None
    previous = ""
    for component in path.split("/"):
        if component.endswith(".mount"):
            continue
        triple = _TRIPLE.fullmatch(component)
        named = _POD_SLICE.fullmatch(triple.group("slice") if triple else component)
        named = named or _POD_DIR.fullmatch(component)
        if named:
            pod = named.group("pod").replace("_", "-")
        scope = triple or _SCOPE.fullmatch(component)
        if scope:
            found = (_PREFIXES[scope.group("prefix")], scope.group("id"), pod)
        elif _BARE_ID.fullmatch(component):
            # A bare id: Docker's cgroupfs driver (`/docker/<id>`), or kubelet's (`pod<uid>/<id>`)
            # where the path does not say which runtime runs it.
            if previous == "docker":
                found = ("docker", component, pod)
            elif pod is not None and _POD_DIR.fullmatch(previous):
                found = ("kubernetes", component, pod)
        previous = component
    return found


def parse_cgroup(data: bytes) -> tuple[ContainerRuntime, str, str | None] | None:
    """The container ``/proc/PID/cgroup`` places a process in, as (runtime, id, pod uid), or
    ``None`` on the host. The cgroup v2 line (``0::``) is read first, then the v1 lines in
    order; within a path the innermost container wins (docker-in-docker, kind)."""
    paths = []
    for line in os.fsdecode(data).split("\n"):
        number, sep, rest = line.partition(":")
        _controllers, sep2, path = rest.partition(":")
        if sep and sep2:
            paths.append((number != "0", path))
    for _v1, path in sorted(paths, key=lambda entry: entry[0]):
        found = _innermost(path)
        if found is not None:
            return found
    return None
