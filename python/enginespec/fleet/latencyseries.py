"""The exporter's latency series (``--load``): each engine's latency histograms passed on as
Prometheus histograms, as the engine counts them since it started (summed over its series, in
seconds), so that ``rate()`` and ``histogram_quantile`` work over any window a dashboard picks:
``enginespec_engine_time_to_first_token_seconds``, ``..._time_per_output_token_seconds``,
``..._queue_time_seconds``, ``..._end_to_end_seconds``. An engine that keeps counters only
(llama-server) gives its one ``+Inf`` bucket and its sum, so that ``rate(_sum) / rate(_count)`` is
its mean. Which metric of which engine is data in its definition (see
:mod:`enginespec.health.latency`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import HistogramMetricFamily, Metric

from enginespec.health.latency import FIGURES, cumulative
from enginespec.health.load import EngineLoad
from enginespec.untrusted.boundary import contained

#: What each figure's histogram is.
_HELP = {
    "time_to_first_token": "Time to the first token of each request",
    "time_per_output_token": "Time between output tokens (the engine's own measure, see docs/load.md)",
    "queue_time": "Time requests waited in the engine's queue",
    "end_to_end": "Time from a request's arrival to its last token",
}

_Histogram = tuple[str, list[tuple[str, float]], float]


def latency_families(
    loads: Sequence[EngineLoad | None], identity: Callable[[int], list[str]], labels: Sequence[str]
) -> Iterator[Metric]:
    """The four histogram families of ``loads`` (by engine index), each engine's series under the
    ``labels`` whose values ``identity`` gives for its index; an engine whose figures cannot be
    made has none (one engine's odd answer never fails the scrape)."""
    families = {
        figure: HistogramMetricFamily(
            f"enginespec_engine_{figure}_seconds",
            f"{_HELP[figure]}, as the engine counts it",
            labels=list(labels),
        )
        for figure in FIGURES
    }
    for index, load in enumerate(loads):
        if load is None or not load.available or load._latency is None:
            continue

        def histograms(index: int = index, load: EngineLoad = load) -> tuple[list[str], list[_Histogram]]:
            return identity(index), _histograms(load)

        shown, found = contained("latency histograms", histograms, lambda _reason: ([], []))
        for figure, buckets, total in found:
            families[figure].add_metric(shown, buckets, total)
    yield from families.values()


def _histograms(load: EngineLoad) -> list[_Histogram]:
    reading = load._latency
    found: list[_Histogram] = []
    if reading is None:
        return found
    for figure in FIGURES:
        counted = cumulative(reading, figure)
        if counted is not None:
            buckets = [(_le(bound), count) for bound, count in counted.buckets]
            found.append((figure, buckets, counted.total))
    return found


def _le(bound: float) -> str:
    return "+Inf" if bound == math.inf else repr(bound)
