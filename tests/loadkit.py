"""Helpers for the load tests: an EngineProcess for this test process pointed at a fake server
(which this process runs, so the port is held by the process checked)."""

from __future__ import annotations

import os

import psutil

from enginespec.scanning import EngineProcess


def engine_for(engine: str, url: str) -> EngineProcess:
    return EngineProcess(
        pid=os.getpid(),
        start_time=psutil.Process().create_time(),
        ppid=os.getppid(),
        engine=engine,
        model="m",
        served_model_names=(),
        host="127.0.0.1",
        port=None,
        effective_host="127.0.0.1",
        effective_port=0,
        base_url=url,
        argv=(),
        exe=None,
        worker_pids=(),
        supervisor=None,
        listen_ports=(),
    )
