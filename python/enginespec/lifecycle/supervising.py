"""Supervision: restarting an engine when it exits (or stays unhealthy), with a doubling backoff
and a cap on restarts, in a background thread until the engine is stopped."""

from __future__ import annotations

import threading
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from enginespec.errors import LaunchFailed, RestartRefused


class Supervision(BaseModel):
    """Restart on exit (and, with ``on_unhealthy``, after ``unhealthy_checks`` failed health
    checks in a row), waiting ``backoff`` seconds doubled after each restart up to
    ``max_backoff``, at most ``max_restarts`` times. Off unless given to :func:`launch`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    on_exit: bool = True
    on_unhealthy: bool = False
    unhealthy_checks: int = Field(default=3, ge=1)
    check_interval: float = Field(default=5.0, gt=0)
    backoff: float = Field(default=1.0, ge=0)
    max_backoff: float = Field(default=60.0, ge=0)
    max_restarts: int | None = Field(default=5, ge=0)


class Supervisor:
    """Restarts an engine by ``policy`` in a daemon thread until ``stopped`` is set. The engine is
    seen through callables, each asked anew (a restart replaces its process): ``exited``, whether
    it ended; ``unhealthy``, whether one health check fails (``None``: no address to check);
    ``restart``, a restart (under ``lock``, the lock a stop takes); ``sleep``, until the next
    check, cut short when the engine ends."""

    def __init__(
        self,
        policy: Supervision,
        stopped: threading.Event,
        lock: threading.RLock,
        *,
        exited: Callable[[], bool],
        unhealthy: Callable[[], bool | None],
        restart: Callable[[], object],
        sleep: Callable[[float], None],
    ) -> None:
        self.policy = policy
        self._stopped = stopped
        self._lock = lock
        self._exited = exited
        self._unhealthy = unhealthy
        self._restart = restart
        self._sleep = sleep
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        """Waits up to ``timeout`` seconds for the thread to end (not from the thread itself)."""
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout)

    def _run(self) -> None:
        policy = self.policy
        backoff, restarts, bad = policy.backoff, 0, 0
        while not self._stopped.is_set():
            self._sleep(policy.check_interval)
            if self._stopped.is_set():
                return
            exited = self._exited()
            verdict = self._unhealthy() if not exited and policy.on_unhealthy else None
            if verdict is not None:
                bad = bad + 1 if verdict else 0
            due = (exited and policy.on_exit) or bad >= policy.unhealthy_checks
            if not due:
                continue
            if policy.max_restarts is not None and restarts >= policy.max_restarts:
                return
            if self._stopped.wait(backoff):
                return
            with self._lock:
                if self._stopped.is_set():
                    return
                try:
                    self._restart()
                    self._stopped.clear()
                except RestartRefused:  # will be refused again (its owner may not enter its cwd)
                    return
                except (LaunchFailed, OSError):
                    pass
            restarts, bad = restarts + 1, 0
            backoff = min(max(backoff * 2, policy.backoff), policy.max_backoff)
