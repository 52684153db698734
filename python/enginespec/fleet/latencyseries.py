"""The exporter's latency series (``--load``): each engine's latency histograms passed on as
Prometheus histograms, as the engine counts them since it started (in seconds), so that
``rate()`` and ``histogram_quantile`` work over any window a dashboard picks:
``enginespec_engine_time_to_first_token_seconds``, ``..._time_per_output_token_seconds``,
``..._queue_time_seconds``, ``..._end_to_end_seconds``. An engine that keeps counters only
(llama-server) gives its one ``+Inf`` bucket and its sum, so that ``rate(_sum) / rate(_count)`` is
its mean. Which metric of which engine is data in its definition (see
:mod:`enginespec.health.latency`).

Each engine's series are summed per served model, named in :data:`SERVED_MODEL`: where the engine
labels its series by model (vLLM's ``model_name``), one series per model (its name masked and cut
as the Python API's ``Latency.models``; past :data:`~enginespec.health.latency.MAX_MODELS` models,
the rest summed in one series named :data:`OTHER_MODELS`), else one series with it empty. Every
series of the engine is in exactly one, so summing over ``served_model`` gives the engine's whole.
A viewer from whom the engine's ``served_model_name`` is withheld (the name the engine labels its
series with) gets the one series, empty, and ``enginespec_engine_withheld{field="served_model"}``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import HistogramMetricFamily, Metric

from enginespec.fleet.gpuseries import label_value
from enginespec.health.latency import FIGURES, Cumulative, cumulative, cumulative_by_model
from enginespec.health.load import EngineLoad
from enginespec.untrusted.boundary import contained

#: The label naming the served model a series counts (``model`` is the engine's argv model).
SERVED_MODEL = "served_model"
#: Its value for the models past the cap, summed.
OTHER_MODELS = "(other)"

#: What each figure's histogram is.
_HELP = {
    "time_to_first_token": "Time to the first token of each request",
    "time_per_output_token": "Time between output tokens (the engine's own measure, see docs/load.md)",
    "queue_time": "Time requests waited in the engine's queue",
    "end_to_end": "Time from a request's arrival to its last token",
}

#: One series: its figure, its ``served_model``, its buckets and its sum.
_Histogram = tuple[str, str, list[tuple[str, float]], float]


def by_model(load: EngineLoad | None) -> bool:
    """Whether the latency series of ``load`` may name served models (the engine labels by model)."""
    reading = None if load is None or not load.available else load._latency
    return reading is not None and reading.metrics.model_label is not None


def latency_families(
    loads: Sequence[EngineLoad | None],
    identity: Callable[[int], tuple[list[str], bool]],
    labels: Sequence[str],
) -> Iterator[Metric]:
    """The four histogram families of ``loads`` (by engine index), each engine's series under the
    ``labels`` whose values ``identity`` gives for its index, with whether its viewer may see the
    names of its served models, and :data:`SERVED_MODEL`; an engine whose figures cannot be made
    has none (one engine's odd answer never fails the scrape)."""
    families = {
        figure: HistogramMetricFamily(
            f"enginespec_engine_{figure}_seconds",
            f"{_HELP[figure]}, as the engine counts it",
            labels=[*labels, SERVED_MODEL],
        )
        for figure in FIGURES
    }
    for index, load in enumerate(loads):
        if load is None or not load.available or load._latency is None:
            continue

        def histograms(index: int = index, load: EngineLoad = load) -> tuple[list[str], list[_Histogram]]:
            shown, names = identity(index)
            return shown, _histograms(load, names)

        shown, found = contained("latency histograms", histograms, lambda _reason: ([], []))
        for figure, served, buckets, total in found:
            families[figure].add_metric([*shown, served], buckets, total)
    yield from families.values()


def _histograms(load: EngineLoad, names: bool) -> list[_Histogram]:
    """The series of ``load``: per served model when ``names``, else one for the whole engine."""
    reading = load._latency
    found: list[_Histogram] = []
    if reading is None:
        return found
    for figure in FIGURES:
        parts: dict[str, Cumulative] | None
        if names:
            parts = cumulative_by_model(reading, figure, OTHER_MODELS)
        else:
            whole = cumulative(reading, figure)
            parts = None if whole is None else {"": whole}
        # names come decoded with replacement (no surrogates): label_value changes none, so two
        # models never share a label value
        for name, counted in sorted((parts or {}).items()):
            buckets = [(_le(bound), count) for bound, count in counted.buckets]
            found.append((figure, label_value(name), buckets, counted.total))
    return found


def _le(bound: float) -> str:
    return "+Inf" if bound == math.inf else repr(bound)
