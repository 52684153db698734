"""Request latency over the window between two load readings, from the engine's own metrics:
time to first token, time per output token, queue time and end to end.

Where an engine keeps each figure is data in its definition
(:class:`enginespec.definition.records.LatencyMetrics`). A histogram gives, over the window, the
number of observations, their mean (the ``_sum`` over the ``_count`` moved) and the p50, p95
and p99 estimated from the buckets the way Prometheus's ``histogram_quantile`` does: linear
interpolation within the bucket the rank falls in, from 0 in the lowest bucket (when its bound is
above 0), the last finite bound when the rank falls in the ``+Inf`` bucket. Each percentile is an
estimate and says the bucket bounds it fell between. Counters alone (llama-server) give the mean,
with the percentiles ``None``.

Series are summed by bucket bound over every label but ``le`` (engine cores, streaming or not)
for the whole server, and over every label but ``le`` and the model's for each model. A series
that appears between the readings counted from 0 (prometheus-client creates a labelled series
on its first observation); a count that went back (the engine's counting restarted) gives no
figure, and says so. Every value read is untrusted: a figure whose series are not well formed
(a bound that is no number, a value that is not finite or out of range, no ``+Inf`` bucket) is
``None`` with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict

from enginespec.definition.records import LatencyMetric, LatencyMetrics
from enginespec.untrusted.masking import mask_text

#: The four figures, in the order shown.
FIGURES = ("time_to_first_token", "time_per_output_token", "queue_time", "end_to_end")
#: The histogram sample suffixes read.
_SUFFIXES = ("_bucket", "_sum", "_count")
#: The most models given figures of their own; the rest are in the server's figures only.
MAX_MODELS = 64
#: The longest model name shown (characters); a longer one is cut.
MAX_MODEL_CHARS = 256
#: The largest count or total read: what a float holds exactly (as the load's counters).
MAX_VALUE = float(1 << 53)
_UNITS = {"seconds": 1.0, "milliseconds": 1e-3}
#: ``(upper bound, cumulative count)`` of one histogram, sorted by bound.
Buckets = tuple[tuple[float, float], ...]
LabelKey = tuple[tuple[str, str], ...]


class BucketBounds(BaseModel):
    """The bucket a percentile fell in: from ``lower`` to ``upper`` (``None``: ``+Inf``)."""

    model_config = ConfigDict(frozen=True)

    lower: float
    upper: float | None


class LatencySummary(BaseModel):
    """One latency figure over a window, in seconds. ``count``: observations in the window
    (requests, or tokens for the time per output token); ``mean``; ``p50``/``p95``/``p99``,
    estimated from the engine's histogram buckets (``estimated``), each with the bucket it fell in
    (``p50_bucket``...). ``None`` where unknown, and ``reason`` says why. ``metric``: the engine's
    metric it came from; ``note``: what the engine's figure is, where its name does not say."""

    model_config = ConfigDict(frozen=True)

    count: int | None = None
    mean: float | None = None
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    p50_bucket: BucketBounds | None = None
    p95_bucket: BucketBounds | None = None
    p99_bucket: BucketBounds | None = None
    estimated: bool = False
    metric: str | None = None
    window_seconds: float
    note: str = ""
    reason: str = ""


class ModelLatency(BaseModel):
    """The four figures of one model the server serves (where the engine labels them by model)."""

    model_config = ConfigDict(frozen=True)

    model: str
    time_to_first_token: LatencySummary
    time_per_output_token: LatencySummary
    queue_time: LatencySummary
    end_to_end: LatencySummary


class Latency(BaseModel):
    """Request latency over the window between two readings: ``window_start`` and
    ``window_end`` (``time.time()`` of the readings), ``window_seconds`` between them;
    ``requests_finished`` in it (the end-to-end count, where the engine counts requests); the
    four figures for the whole server, and per model in ``models``."""

    model_config = ConfigDict(frozen=True)

    window_start: float
    window_end: float
    window_seconds: float
    requests_finished: int | None = None
    time_to_first_token: LatencySummary
    time_per_output_token: LatencySummary
    queue_time: LatencySummary
    end_to_end: LatencySummary
    models: tuple[ModelLatency, ...] = ()
    reason: str = ""


@dataclass(frozen=True)
class _Series:
    buckets: Buckets
    total: float | None
    count: float | None


@dataclass(frozen=True)
class LatencyReading:
    """What one reading keeps of the engine's latency metrics for the next one: each histogram
    family's series by their labels (``le`` aside), the counters, and why a family or the whole
    reading cannot be used."""

    metrics: LatencyMetrics
    read_at: float
    monotonic: float
    histograms: Mapping[str, Mapping[LabelKey, _Series]] = field(default_factory=dict)
    counters: Mapping[str, float] = field(default_factory=dict)
    problems: Mapping[str, str] = field(default_factory=dict)
    cut: str = ""


def histogram_samples(metrics: LatencyMetrics) -> frozenset[str]:
    """The sample names of every histogram family the engine's latency figures may come from."""
    return frozenset(
        family + suffix
        for figure in FIGURES
        for family in getattr(metrics, figure).histogram
        for suffix in _SUFFIXES
    )


def counter_names(metrics: LatencyMetrics) -> tuple[str, ...]:
    """The counters the engine's latency means may come from (llama-server)."""
    names: list[str] = []
    for figure in FIGURES:
        metric: LatencyMetric = getattr(metrics, figure)
        names.extend((*metric.seconds_total, *metric.count_total))
    return tuple(names)


def declared(metrics: LatencyMetrics) -> bool:
    """Whether the engine reports any latency figure."""
    return any(getattr(metrics, f).histogram or getattr(metrics, f).seconds_total for f in FIGURES)


def _bound(text: str) -> float | None:
    try:
        value = float(text)
    except (ValueError, OverflowError):
        return None
    return value if not math.isnan(value) and value != -math.inf else None


def _value_ok(value: float) -> bool:
    return math.isfinite(value) and 0 <= value <= MAX_VALUE


def _one_family(
    family: str, samples: Mapping[str, Sequence[tuple[Mapping[str, str], float]]]
) -> tuple[dict[LabelKey, _Series], str]:
    """The series of one histogram family, or why they cannot be used."""
    buckets: dict[LabelKey, dict[float, float]] = {}
    totals: dict[LabelKey, float] = {}
    counts: dict[LabelKey, float] = {}
    for labels, value in samples.get(family + "_bucket", ()):
        if not _value_ok(value):
            return {}, f"{family}: a bucket's value is not a count ({value!r})"
        key = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
        bound = _bound(labels.get("le", ""))
        if bound is None:
            return (
                {},
                f"{family}: a bucket's bound is not a number ({mask_text(labels.get('le', ''))[:40]!r})",
            )
        series = buckets.setdefault(key, {})
        if bound in series:
            return {}, f"{family}: the bucket le={bound} twice in one series"
        series[bound] = value
    for suffix, into in (("_sum", totals), ("_count", counts)):
        for labels, value in samples.get(family + suffix, ()):
            if not _value_ok(value):
                return {}, f"{family}{suffix}: not a finite count or total ({value!r})"
            into[tuple(sorted(labels.items()))] = value
    result: dict[LabelKey, _Series] = {}
    for key, bounds in buckets.items():
        if math.inf not in bounds:
            return {}, f"{family}: a series without its +Inf bucket"
        result[key] = _Series(tuple(sorted(bounds.items())), totals.get(key), counts.get(key))
    return result, ""


def reading(
    metrics: LatencyMetrics,
    samples: Mapping[str, Sequence[tuple[Mapping[str, str], float]]],
    counters: Mapping[str, Sequence[float]],
    *,
    read_at: float,
    monotonic: float,
    cut: str = "",
) -> LatencyReading:
    """One reading's latency metrics: ``samples`` the labelled samples of the histogram names
    (:func:`histogram_samples`), ``counters`` the values of :func:`counter_names`; ``cut``: why
    the answer was not read whole (then no figure comes of it)."""
    histograms: dict[str, dict[LabelKey, _Series]] = {}
    problems: dict[str, str] = {}
    families = {family for figure in FIGURES for family in getattr(metrics, figure).histogram}
    for family in sorted(families):
        series, problem = _one_family(family, samples)
        if problem:
            problems[family] = problem
        elif series:
            histograms[family] = series
    summed: dict[str, float] = {}
    for name, values in counters.items():
        if values and all(_value_ok(v) for v in values) and _value_ok(math.fsum(values)):
            summed[name] = math.fsum(values)
        elif values:
            problems[name] = f"{name}: not a finite count or total"
    return LatencyReading(metrics, read_at, monotonic, histograms, summed, problems, cut)


def bucket_quantile(q: float, buckets: Buckets) -> tuple[float, BucketBounds] | None:
    """The ``q`` quantile (0 < q < 1) of cumulative ``buckets`` (sorted, monotonic, the last
    ``+Inf``), as Prometheus's ``histogram_quantile`` estimates it, and the bucket it fell in;
    ``None`` without observations or without a finite bucket."""
    if len(buckets) < 2 or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    index = next((i for i, (_, count) in enumerate(buckets[:-1]) if count >= rank), len(buckets) - 1)
    if index == len(buckets) - 1:
        # in the +Inf bucket: the last finite bound is all that is known
        last = buckets[-2][0]
        return last, BucketBounds(lower=last, upper=None)
    upper, count = buckets[index]
    if index == 0 and upper <= 0:
        return upper, BucketBounds(lower=upper, upper=upper)
    lower, below = buckets[index - 1] if index > 0 else (0.0, 0.0)
    value = lower + (upper - lower) * ((rank - below) / (count - below))
    return value, BucketBounds(lower=lower, upper=upper)


def _delta(before: _Series | None, after: _Series) -> _Series | None:
    """What moved in one series between two readings; ``None`` when a count went back (or its
    buckets changed): the engine's counting restarted."""
    if before is None:
        return after
    if [b for b, _ in before.buckets] != [b for b, _ in after.buckets]:
        return None
    moved = tuple((b, new - old) for (b, new), (_, old) in zip(after.buckets, before.buckets, strict=True))
    if any(count < 0 for _, count in moved):
        return None
    total = None if after.total is None or before.total is None else after.total - before.total
    count = None if after.count is None or before.count is None else after.count - before.count
    if (total is not None and total < 0) or (count is not None and count < 0):
        return None
    return _Series(moved, total, count)


def _merged(series: Iterable[_Series]) -> tuple[Buckets, float | None, float | None, bool]:
    """Series summed by bound (Prometheus's ``sum by (le)``), with their sums and counts, made
    monotonic as ``histogram_quantile`` does; the last item says whether that was needed."""
    counts: dict[float, float] = {}
    total: float | None = 0.0
    count: float | None = 0.0
    for one in series:
        for bound, value in one.buckets:
            counts[bound] = counts.get(bound, 0.0) + value
        total = None if total is None or one.total is None else total + one.total
        count = None if count is None or one.count is None else count + one.count
    fixed: list[tuple[float, float]] = []
    forced = False
    for bound, value in sorted(counts.items()):
        if fixed and value < fixed[-1][1]:
            value, forced = fixed[-1][1], True
        fixed.append((bound, value))
    return tuple(fixed), total, count, forced


def _summary(series: Sequence[_Series], metric: LatencyMetric, family: str, window: float) -> LatencySummary:
    buckets, total, counted, forced = _merged(series)
    scale = _UNITS[metric.unit]
    observations = counted if counted is not None else buckets[-1][1]
    base = {"metric": family, "window_seconds": window, "note": metric.note, "estimated": True}
    if observations <= 0:
        return LatencySummary.model_validate({**base, "count": 0, "reason": "nothing observed in the window"})
    figures: dict[str, object] = {"count": round(observations)}
    if total is not None:
        figures["mean"] = total / observations * scale
    for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
        found = bucket_quantile(q, buckets)
        if found is not None:
            value, bounds = found
            upper = None if bounds.upper is None else bounds.upper * scale
            figures[name] = value * scale
            figures[f"{name}_bucket"] = BucketBounds(lower=bounds.lower * scale, upper=upper)
    reason = "buckets not cumulative: made monotonic, as histogram_quantile does" if forced else ""
    return LatencySummary.model_validate({**base, **figures, "reason": reason})


def _unknown(window: float, reason: str, metric: str | None = None, note: str = "") -> LatencySummary:
    return LatencySummary(window_seconds=window, reason=reason, metric=metric, note=note)


def _model_of(key: LabelKey, label: str | None) -> str | None:
    if label is None:
        return None
    name = dict(key).get(label)
    return None if name is None else mask_text(name)[:MAX_MODEL_CHARS]


class _Figure:
    """One figure over the window: the server's summary and, per model, each model's."""

    def __init__(
        self,
        whole: LatencySummary,
        models: Mapping[str, LatencySummary] | None = None,
        names: Iterable[str] = (),
    ) -> None:
        self.whole = whole
        self.models = dict(models or {})
        #: every model with series, summarized or not (only the first MAX_MODELS are)
        self.names = set(names) | set(self.models)


def _histogram_figure(
    metric: LatencyMetric, before: LatencyReading, after: LatencyReading, window: float
) -> _Figure:
    family = next((f for f in metric.histogram if f in after.histograms or f in after.problems), None)
    if family is None:
        return _Figure(
            _unknown(window, f"none of {', '.join(metric.histogram)} in the answer", note=metric.note)
        )
    problem = after.problems.get(family) or before.problems.get(family)
    if problem:
        return _Figure(_unknown(window, problem, family, metric.note))
    old = before.histograms.get(family, {})
    moved: dict[LabelKey, _Series] = {}
    for key, series in after.histograms[family].items():
        delta = _delta(old.get(key), series)
        if delta is None:
            why = "a count went back (the engine's counting restarted): no figure for this window"
            return _Figure(_unknown(window, f"{family}: {why}", family, metric.note))
        moved[key] = delta
    by_model: dict[str, list[_Series]] = {}
    for key, delta in moved.items():
        model = _model_of(key, after.metrics.model_label)
        if model is not None:
            by_model.setdefault(model, []).append(delta)
    # the first MAX_MODELS by name (the only ones shown): a server of 10,000 names costs no more
    models = {m: _summary(by_model[m], metric, family, window) for m in sorted(by_model)[:MAX_MODELS]}
    return _Figure(_summary(list(moved.values()), metric, family, window), models, by_model)


def _counter_figure(
    metric: LatencyMetric, before: LatencyReading, after: LatencyReading, window: float
) -> _Figure:
    seconds = next((n for n in metric.seconds_total if n in after.counters or n in after.problems), None)
    counted = next((n for n in metric.count_total if n in after.counters or n in after.problems), None)
    if seconds is None or counted is None:
        names = ", ".join((*metric.seconds_total, *metric.count_total))
        return _Figure(_unknown(window, f"not all of {names} in the answer", note=metric.note))
    used = f"{seconds} / {counted}"
    problem = next(
        (p for n in (seconds, counted) for p in (after.problems.get(n), before.problems.get(n)) if p), None
    )
    if problem:
        return _Figure(_unknown(window, problem, used, metric.note))
    if seconds not in before.counters or counted not in before.counters:
        return _Figure(_unknown(window, "not in the previous reading", used, metric.note))
    spent = after.counters[seconds] - before.counters[seconds]
    count = after.counters[counted] - before.counters[counted]
    if spent < 0 or count < 0:
        why = "a counter went back (the engine's counting restarted): no figure for this window"
        return _Figure(_unknown(window, why, used, metric.note))
    base = {"metric": used, "window_seconds": window, "note": metric.note, "count": round(count)}
    if count == 0:
        return _Figure(LatencySummary.model_validate({**base, "reason": "nothing counted in the window"}))
    mean = spent / count * _UNITS[metric.unit]
    why = "the engine keeps counters only: the mean, no percentiles"
    return _Figure(LatencySummary.model_validate({**base, "mean": mean, "reason": why}))


@dataclass(frozen=True)
class Cumulative:
    """One figure as the engine has counted it since it started, summed over the server's series
    (or one model's: :func:`cumulative_by_model`) and in seconds: the histogram's cumulative
    buckets (``(upper bound, count)``, sorted, the last ``+Inf``) and the sum of what was
    observed; an engine that keeps counters only (llama-server) has the one ``+Inf`` bucket (its
    count) and its seconds. What an exporter passes on as a Prometheus histogram, for ``rate()``
    and ``histogram_quantile`` over any window."""

    buckets: Buckets
    total: float


def cumulative(reading: LatencyReading, figure: str) -> Cumulative | None:
    """``figure`` (one of :data:`FIGURES`) of ``reading`` since the engine started; ``None`` when
    the engine reports none, the answer was not read whole, or its series are not well formed."""
    found = _cumulative(reading, figure, None)
    return None if found is None else found.get("")


def cumulative_by_model(reading: LatencyReading, figure: str, rest: str) -> dict[str, Cumulative] | None:
    """``figure`` of ``reading`` since the engine started, per model its series are labelled with
    (the engine's ``model_label``; each name masked and cut as in :class:`ModelLatency`): the
    first :data:`MAX_MODELS` names by name each alone, the others (and a model named ``rest``)
    summed under ``rest``, the series without the label (or every series, for an engine that does
    not label by model) under ``""``. Every series is in exactly one, so the parts sum to
    :func:`cumulative`'s whole. ``None`` as for :func:`cumulative`."""
    return _cumulative(reading, figure, rest)


def _cumulative(reading: LatencyReading, figure: str, rest: str | None) -> dict[str, Cumulative] | None:
    """``figure`` of ``reading`` since the engine started: its series summed per model as
    :func:`cumulative_by_model` says, or all under ``""`` when ``rest`` is ``None``."""
    metric: LatencyMetric = getattr(reading.metrics, figure)
    scale = _UNITS[metric.unit]
    if reading.cut:
        return None
    family = next((f for f in metric.histogram if f in reading.histograms or f in reading.problems), None)
    if family is not None:
        if family not in reading.histograms:
            return None
        label = None if rest is None else reading.metrics.model_label
        named = {key: _model_of(key, label) or "" for key in reading.histograms[family]}
        # the first MAX_MODELS by name, as latency_between shows: a server of 10,000 names costs no more
        alone = set(sorted(set(named.values()) - {"", rest})[:MAX_MODELS]) | {""}
        parts: dict[str, list[_Series]] = {}
        for key, series in reading.histograms[family].items():
            name = named[key]
            parts.setdefault(name if name in alone or rest is None else rest, []).append(series)
        found: dict[str, Cumulative] = {}
        for name, members in parts.items():
            buckets, total, _count, _forced = _merged(members)
            if total is None or not buckets:
                return None
            found[name] = Cumulative(tuple((bound * scale, count) for bound, count in buckets), total * scale)
        return found
    seconds = next((n for n in metric.seconds_total if n in reading.counters), None)
    counted = next((n for n in metric.count_total if n in reading.counters), None)
    if seconds is None or counted is None:
        return None
    return {"": Cumulative(((math.inf, reading.counters[counted]),), reading.counters[seconds] * scale)}


def latency_between(before: LatencyReading, after: LatencyReading) -> Latency | None:
    """The latency over the window between two readings of one engine; ``None`` when the engine
    reports none."""
    metrics = after.metrics
    if not declared(metrics):
        return None
    window = after.monotonic - before.monotonic
    shape = {"window_start": before.read_at, "window_end": after.read_at, "window_seconds": window}
    cut = after.cut or before.cut
    if cut:
        reason = f"the metrics answer was not read whole ({cut}): no latency figures"
        empty = {figure: _unknown(window, reason) for figure in FIGURES}
        return Latency.model_validate({**shape, **empty, "reason": reason})
    figures: dict[str, _Figure] = {}
    for figure in FIGURES:
        metric: LatencyMetric = getattr(metrics, figure)
        if metric.histogram:
            figures[figure] = _histogram_figure(metric, before, after, window)
        elif metric.seconds_total:
            figures[figure] = _counter_figure(metric, before, after, window)
        else:
            figures[figure] = _Figure(_unknown(window, "the engine reports no such figure"))
    names = sorted({m for f in figures.values() for m in f.names})
    reason = ""
    if len(names) > MAX_MODELS:
        reason = f"{len(names)} models: figures for the first {MAX_MODELS} only"
        names = names[:MAX_MODELS]
    models = tuple(
        ModelLatency.model_validate(
            {
                "model": name,
                **{
                    f: figures[f].models.get(name)
                    or _unknown(window, "no series of this model", note=figures[f].whole.note)
                    for f in FIGURES
                },
            }
        )
        for name in names
    )
    ends = figures["end_to_end"].whole
    finished = ends.count if metrics.end_to_end.histogram else None
    whole = {f: figures[f].whole for f in FIGURES}
    return Latency.model_validate(
        {**shape, **whole, "requests_finished": finished, "models": models, "reason": reason}
    )
