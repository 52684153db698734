"""Stopping an adopted engine's container through its runtime's API (Docker and Podman speak the
same one), once that API vouches the container runs this engine; otherwise the stop signals its
processes from the host and says why."""

from __future__ import annotations

import math
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

from enginespec.display import literal
from enginespec.lifecycle.handle import KILL_WAIT
from enginespec.process.containers import Container, api_inspect, api_stop, runs_in_lineage


class ContainerStop(BaseModel):
    """How a stop went through the engine's container runtime (an adopted engine in a Docker or
    Podman container): ``stopped`` when its API stopped the container; otherwise ``detail`` says
    why not, and the processes were signalled from the host."""

    model_config = ConfigDict(frozen=True)

    runtime: str
    container: str
    stopped: bool
    detail: str


def stop_container(
    container: Container, pid: int, grace: float, sockets: Mapping[str, str], timeout: float
) -> ContainerStop:
    """Stops the container through its runtime's API (``sockets``: each runtime's API socket,
    asked with ``timeout``), once that API vouches that the container's first process is the
    engine ``pid`` or one of its parents (a cgroup's name alone is anyone's to choose). Docker and
    Podman speak the same API; other runtimes do not."""

    runtime = container.runtime
    signalled = "its processes were signalled"

    def result(stopped: bool, detail: str) -> ContainerStop:
        return ContainerStop(runtime=runtime, container=container.id, stopped=stopped, detail=detail)

    label = literal(container.label)
    socket_path = sockets.get(runtime)
    if socket_path is None:
        return result(False, f"{runtime} has no API enginespec speaks: {signalled}")
    inspected = api_inspect(socket_path, container.id, timeout)
    if inspected is None or not runs_in_lineage(pid, inspected.pid):
        said = "does not answer for" if inspected is None else "does not say this engine runs in"
        return result(False, f"{runtime}'s API ({literal(socket_path)}) {said} {label}: {signalled}")
    status = api_stop(socket_path, container.id, max(0, math.ceil(grace)), grace + KILL_WAIT + 30)
    if status in (204, 304):
        return result(True, f"{runtime} stopped {label} (HTTP {status})")
    answer = f"HTTP {status}" if isinstance(status, int) else status
    return result(False, f"{runtime} did not stop {label} ({answer}): {signalled}")
