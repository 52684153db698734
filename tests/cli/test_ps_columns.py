"""A ps column is declared once (its header, its cell and its width rule together): every header
stands over its own cell, and a row has a cell under every header, whatever the row holds."""

from __future__ import annotations

import time

import pytest

from enginespec.cli.pstable import Shown, table_lines
from enginespec.gpus.reader import GpuUse
from enginespec.healthrecord import Health
from enginespec.models.facts import ModelFacts
from enginespec.process.containers import Container, PublishedPort
from helpers.gpuhost import engine


def _cells(header: str, line: str) -> dict[str, str]:
    """Each header's cell in ``line``: the text from the header's column to the next header's."""
    names = [name.strip() for name in header.split("  ") if name.strip()]
    starts = [header.index(name) for name in names]
    ends = [*starts[1:], None]
    return {header[s:e].strip(): line[s:e].strip() for s, e in zip(starts, ends, strict=True)}


def test_each_header_stands_over_its_own_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    facts = ModelFacts(
        format="gguf",
        files=("/models/m.gguf",),
        architecture="llama",
        quantization="Q4_K_M",
        context_length=4096,
    )
    monkeypatch.setattr("enginespec.process.record.cached", lambda *_: facts)
    container = Container(runtime="docker", id="c" * 64, name="box")
    process = engine(100, workers=(101, 102), role="orphan").model_copy(
        update={
            "start_time": time.time() - 20 * 3600,
            "served_model_names": ("served-name",),
            "container": container,
            "published": (PublishedPort(container_port=8000, host_address="0.0.0.0", host_port=18000),),
            "supervisor": "systemd:x.service",
            "listen_ports": (8000, 8100),
            "port_conflicts": (4343,),
            "problems": ("--port: odd",),
            "server_pid": 42,
            "gpus": (
                GpuUse(
                    device="GPU-0",
                    index=0,
                    vendor="nvidia",
                    name="H100",
                    pci_bus_id=None,
                    pids=(100,),
                    memory_bytes=2 * 2**30,
                    source="nvml",
                ),
            ),
        }
    )
    health = Health(engine="vllm", base_url=process.base_url, state="loading", reason="process is up")
    header, line = table_lines([Shown(process, health, health.state)], True, None, wide=True)
    # every column of ps, in the order it shows them, with the cell this row has under it
    expected = {
        "PID": "100",
        "ENGINE": "vllm",
        "ROLE": "orphan",
        "MODEL": "/models/m",
        "SERVED AS": "served-name",
        "MODEL FACTS": "llama Q4_K_M 4096",
        "URL": "http://127.0.0.1:8000",
        "CONTAINER": container.label,
        "PUBLISHED": "0.0.0.0:18000->8000",
        "WORKERS": "2",
        "SUPERVISOR": "systemd:x.service",
        "LISTENING": "8000, 8100",
        "PORT SHARED WITH": "4343",
        "GPU": "0 2.0G",
        "AGE": "20h",
        "HEALTH": "loading",
        "NOTE": "orphan: its server was pid 42; process is up; --port: odd",
    }
    cells = _cells(header, line)
    assert cells == expected
    assert list(cells) == list(expected)


def test_a_row_not_checked_has_a_cell_under_every_header() -> None:
    """``ps --remote``: one agent has checked its engine, another has not yet (an agent's first
    refresh): the table has HEALTH, and the row without a check shows ``-`` under it."""
    checked = Shown(engine(100), Health(engine="vllm", base_url=None, state="ready"), "ready", agent="a:9465")
    unchecked = Shown(engine(200, port=8001), agent="b:9465")
    header, *lines = table_lines([checked, unchecked], True, None)
    assert [_cells(header, line)["HEALTH"] for line in lines] == ["ready", "-"]
    assert [_cells(header, line)["PID"] for line in lines] == ["100", "200"]
