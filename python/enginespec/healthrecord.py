"""What a health check reports: :data:`HealthState` and the :class:`Health` model."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, PrivateAttr

#: ``ready`` (serving), ``loading`` (model loading), ``starting`` (process up, not answering yet),
#: ``unhealthy`` (answers an error, hangs, or serves another model), ``down`` (process gone or
#: nothing listening), ``unknown`` (answers that cannot be read, or no usable address),
#: ``not_serving`` (a follower, worker or orphan: it serves no HTTP API, so it is not checked).
#: Given by an :class:`enginespec.EngineMonitor`, which remembers earlier checks: ``busy`` (the
#: health request timed out, but the engine's token counters, or without metrics its CPU time,
#: advance: saturated, not dead), ``stalled`` (requests pending and no token counter moved for
#: ``stall_after`` seconds). A monitor also reports ``unhealthy`` when a worker of a server that
#: was ready exited, whatever the server's own health endpoint says.
HealthState = Literal[
    "ready", "loading", "starting", "unhealthy", "down", "unknown", "not_serving", "busy", "stalled"
]


class Health(BaseModel):
    """One health check of one engine server."""

    model_config = ConfigDict(frozen=True)

    engine: str
    base_url: str | None
    state: HealthState
    http_status: int | None = None
    #: seconds the health request took, ``None`` when it got no answer.
    latency: float | None = None
    #: model ids from ``/v1/models`` when they were asked for.
    model_ids: tuple[str, ...] = ()
    reason: str = ""
    #: when (Unix time) this verdict was reached; ``None`` when the engine was not checked (its
    #: check did not finish within the overall deadline) or for a verdict built elsewhere.
    checked_at: float | None = None
    #: an earlier round's verdict (reached at ``checked_at``), kept because this round's check of
    #: the engine did not finish within its deadline: a loop under load (the exporter's, the
    #: agent's, ``watch``'s) keeps what it last knew rather than turn every engine ``unknown``.
    stale: bool = False
    #: digest of the health answer's body, so waiting can tell a changing answer (progress).
    _answer: int = PrivateAttr(default=0)

    @property
    def ready(self) -> bool:
        return self.state == "ready"
