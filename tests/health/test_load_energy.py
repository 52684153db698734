"""Joules per generated token (``EngineLoad.joules_per_token``): the growth of the GPU energy
attributed to an engine's tree between two load readings over the tokens it generated between
them, from a real HTTP server on loopback answering as vLLM's /metrics does and the records' GPU
energy figures (which the GPU reader attributes: tests/gpus/test_energy.py); both backends."""

from __future__ import annotations

import pytest

from enginespec.gpus.reader import GpuUse
from enginespec.health.load import EngineLoad, check_load
from enginespec.process.record import EngineProcess
from helpers.fakeserver import Answer, serving
from helpers.loadkit import TEXT, engine_for, vllm_metrics

UUID0 = "GPU-00000000-0000-0000-0000-000000000000"
UUID1 = "GPU-11111111-1111-1111-1111-111111111111"


def _use(device: str, index: int, energy: float | None) -> GpuUse:
    return GpuUse(
        device=device,
        index=index,
        vendor="nvidia",
        name=None,
        pci_bus_id=None,
        memory_bytes=1 << 30,
        pids=(1,),
        source="nvml",
        energy_joules=energy,
        energy_rule=None if energy is None else "utilization",
    )


def _holding(process: EngineProcess, *uses: GpuUse) -> EngineProcess:
    return process.model_copy(update={"gpus": uses})


def _two_readings(
    tokens: tuple[float, float], first: tuple[GpuUse, ...], second: tuple[GpuUse, ...]
) -> tuple[EngineLoad, EngineLoad]:
    answers = [Answer(200, vllm_metrics(n), content_type=TEXT) for n in tokens]
    with serving({"/metrics": answers}) as server:
        process = engine_for("vllm", server.url)
        before = check_load(_holding(process, *first))
        after = check_load(_holding(process, *second), previous=before)
    return before, after


def test_the_energy_of_a_window_over_its_tokens() -> None:
    before, after = _two_readings((100.0, 400.0), (_use(UUID0, 0, 1000.0),), (_use(UUID0, 0, 1600.0),))
    assert before.joules_per_token is None  # one reading: no window
    assert after.joules_per_token == pytest.approx(600.0 / 300.0)
    assert after.model_dump(mode="json")["joules_per_token"] == pytest.approx(2.0)


def test_every_gpu_of_the_tree_counts() -> None:
    first = (_use(UUID0, 0, 1000.0), _use(UUID1, 1, 50.0))
    second = (_use(UUID0, 0, 1300.0), _use(UUID1, 1, 350.0))
    _before, after = _two_readings((100.0, 400.0), first, second)
    assert after.joules_per_token == pytest.approx(600.0 / 300.0)


@pytest.mark.parametrize(
    ("tokens", "first", "second"),
    [
        # a GPU without an energy figure: the tree's energy is not known
        (
            (100.0, 400.0),
            (_use(UUID0, 0, 10.0), _use(UUID1, 1, None)),
            (_use(UUID0, 0, 20.0), _use(UUID1, 1, None)),
        ),
        ((100.0, 400.0), (), ()),  # no GPU: no GPU energy (not zero)
        ((400.0, 400.0), (_use(UUID0, 0, 10.0),), (_use(UUID0, 0, 20.0),)),  # no token generated
        ((400.0, 100.0), (_use(UUID0, 0, 10.0),), (_use(UUID0, 0, 20.0),)),  # the engine restarted its count
        ((100.0, 400.0), (_use(UUID0, 0, 900.0),), (_use(UUID0, 0, 20.0),)),  # the GPU reader restarted
        ((100.0, 400.0), (_use(UUID0, 0, None),), (_use(UUID0, 0, 20.0),)),  # the first reading had none
    ],
)
def test_a_window_that_does_not_say_gives_none(
    tokens: tuple[float, float], first: tuple[GpuUse, ...], second: tuple[GpuUse, ...]
) -> None:
    before, after = _two_readings(tokens, first, second)
    assert (before.available, after.available) == (True, True)
    assert after.joules_per_token is None


def test_huge_figures_give_no_infinity() -> None:
    _before, after = _two_readings((0.0, 1e-300), (_use(UUID0, 0, 0.0),), (_use(UUID0, 0, 1e300),))
    assert after.joules_per_token is None
