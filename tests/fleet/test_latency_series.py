"""The exporter's latency histograms (issue 42): each engine's own histograms passed on as
Prometheus histograms under enginespec's names in seconds, summed over the engine's series (two
vLLM engine cores), llama-server's counters as one +Inf bucket and a sum; the whole exposition
checked by promtool (the Debian prometheus package's) and read back by Prometheus's own parser;
an engine's malformed histogram leaves its series out, never the scrape. Per served model where
the engine labels by model (`served_model`), one series of it empty where not, past the cap the
rest in `(other)`; hostile names masked and cut; a name withheld from a scraper the engine's
served_model_name is withheld from. Real processes with exact argv, real HTTP servers on loopback;
both backends."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry

from enginespec.fleet.disclosure import EVERYTHING, Viewer, owners
from enginespec.fleet.exporter import EngineCollector, _refresh
from enginespec.health.latency import MAX_MODEL_CHARS, MAX_MODELS
from enginespec.health.vitals import EngineMonitor
from enginespec.scanning.scanner import Scanner
from helpers.fakeserver import Answer, bound_socket, serving
from helpers.loadkit import TEXT
from helpers.procs import Procs

# vLLM's time to first token, two engine cores (vllm/v1/metrics/loggers.py PrometheusStatLogger:
# one series per engine index and model, its buckets cumulative): summed by bound, 0.1 s -> 3,
# 1 s -> 6, +Inf -> 8, sum 7.5 s.
VLLM = b"""# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="m"} 5.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 6.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 6.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="1.0",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 2.0
vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 2.0
vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 4.5
"""
# llama-server's counters (tools/server/server.cpp metrics, as llama-cpp-python 0.3.35 vendors it)
LLAMA = b"""# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 400
# HELP llamacpp:tokens_predicted_seconds_total Predict process time
# TYPE llamacpp:tokens_predicted_seconds_total counter
llamacpp:tokens_predicted_seconds_total 8.0
"""
# a histogram without its +Inf bucket: not one Prometheus could read
BROKEN = b"""# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 2.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 2.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.1
"""


def _exposition(
    procs: Procs, engines: dict[str, tuple[list[str], bytes]], viewer: Viewer = EVERYTHING
) -> tuple[str, dict[str, str]]:
    """The exporter's text after two refreshes with load, as ``viewer`` is shown it, and each
    named engine's engine_id."""
    text, ids, _collector = _exported(procs, engines, viewer)
    return text, ids


def _exported(
    procs: Procs, engines: dict[str, tuple[list[str], bytes]], viewer: Viewer = EVERYTHING
) -> tuple[str, dict[str, str], EngineCollector]:
    pids: dict[str, str] = {}
    with ExitStack() as stack:
        for name, (argv, body) in engines.items():
            sock = stack.enter_context(bound_socket())
            routes = {"/health": [Answer(200)], "/metrics": [Answer(200, body, content_type=TEXT)]}
            stack.enter_context(serving(routes, sock=sock))
            port = sock.getsockname()[1]
            proc = procs.start([a.format(port=port) for a in argv], pass_fds=(sock.fileno(),))
            pids[name] = str(proc.pid)
        scanner, collector, monitor = Scanner(), EngineCollector(), EngineMonitor(timeout=2)
        for _ in range(2):
            _refresh(scanner, collector, True, 2.0, 300.0, monitor)
        by_pid = {str(p.pid): p.instance_id or "" for p in collector.snapshot.processes}
        owned = [] if viewer is EVERYTHING else owners(collector.snapshot.processes)
        registry = CollectorRegistry()
        registry.register(_Viewed(collector, viewer, owned))
        text = generate_latest(registry).decode()
        return text, {name: by_pid[pid] for name, pid in pids.items()}, collector


class _Viewed(Collector):
    """The exporter's series as one viewer is shown them (as its HTTP server serves them)."""

    def __init__(self, collector: EngineCollector, viewer: Viewer, owned: list[int | None]) -> None:
        self._args = (collector, viewer, owned)

    def collect(self) -> Iterator[Metric]:
        collector, viewer, owned = self._args
        return collector.series(collector.snapshot, viewer, owned)


def _histogram(text: str, name: str, engine_id: str, served_model: str | None = None) -> dict[str, float]:
    """The samples of family ``name`` of one engine (of one ``served_model``, else of its every
    series summed): ``le`` -> count, and ``sum``, ``count``."""
    found: dict[str, float] = {}
    for model, samples in _by_model(text, name, engine_id).items():
        if served_model is None or model == served_model:
            for key, value in samples.items():
                found[key] = found.get(key, 0.0) + value
    return found


def _by_model(text: str, name: str, engine_id: str) -> dict[str, dict[str, float]]:
    """The samples of family ``name`` of one engine by ``served_model``, as :func:`_histogram`."""
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        assert family.type == "histogram"
        for sample in family.samples:
            if sample.labels.get("engine_id") != engine_id:
                continue
            key = sample.labels["le"] if sample.name.endswith("_bucket") else sample.name.rsplit("_", 1)[-1]
            model = found.setdefault(sample.labels["served_model"], {})
            assert key not in model, (sample, "twice")
            model[key] = sample.value
    return found


def test_engines_histograms_are_passed_on_summed_and_in_seconds(procs: Procs) -> None:
    text, ids = _exposition(
        procs,
        {
            "vllm": (["vllm", "serve", "/models/m", "--port", "{port}"], VLLM),
            "llama": (["llama-server", "-m", "/models/t.gguf", "--port", "{port}", "--metrics"], LLAMA),
            "broken": (["vllm", "serve", "/models/b", "--port", "{port}"], BROKEN),
        },
    )
    assert _histogram(text, "enginespec_engine_time_to_first_token_seconds", ids["vllm"]) == {
        "0.1": 3.0,
        "1.0": 6.0,
        "+Inf": 8.0,
        "count": 8.0,
        "sum": 7.5,
    }
    # vLLM's other figures are not in its answer: no series, never a zero
    assert _histogram(text, "enginespec_engine_end_to_end_seconds", ids["vllm"]) == {}
    # llama-server keeps counters only: one +Inf bucket and the seconds, for rate(_sum)/rate(_count)
    assert _histogram(text, "enginespec_engine_time_per_output_token_seconds", ids["llama"]) == {
        "+Inf": 400.0,
        "count": 400.0,
        "sum": 8.0,
    }
    # a histogram Prometheus could not read is left out; the scrape and the other engines stand
    assert _histogram(text, "enginespec_engine_time_to_first_token_seconds", ids["broken"]) == {}
    up = [
        line
        for line in text.splitlines()
        if line.startswith("enginespec_engine_up{") and ids["broken"] in line
    ]
    assert len(up) == 1
    assert up[0].endswith(" 1.0")


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool (Debian's prometheus package) not installed"
)
def test_promtool_finds_nothing_wrong_with_the_exposition(procs: Procs) -> None:
    text, _ids = _exposition(
        procs,
        {
            "vllm": (["vllm", "serve", "/models/m", "--port", "{port}"], VLLM),
            "llama": (["llama-server", "-m", "/models/t.gguf", "--port", "{port}", "--metrics"], LLAMA),
        },
    )
    assert "enginespec_engine_time_to_first_token_seconds_bucket" in text
    checked = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.strip() == "", checked.stdout


def _vllm_histogram(family: str, series: list[tuple[dict[str, str], dict[str, float], float]]) -> str:
    """vLLM's exposition of one histogram: each series's labels (but ``le``), its cumulative
    buckets by bound, and its sum (its count is its +Inf bucket)."""
    lines = [f"# TYPE {family} histogram"]
    for labels, buckets, total in series:
        pairs = ",".join(f'{k}="{v}"' for k, v in labels.items())
        for bound, count in buckets.items():
            lines.append(f'{family}_bucket{{{pairs},le="{bound}"}} {count}')
        lines.append(f"{family}_count{{{pairs}}} {buckets['+Inf']}")
        lines.append(f"{family}_sum{{{pairs}}} {total}")
    return "\n".join(lines) + "\n"


# Two models served by one vLLM (model_name; "a" on two engine cores), their time to first token
# and end to end.
TWO_MODELS = (
    _vllm_histogram(
        "vllm:time_to_first_token_seconds",
        [
            ({"engine": "0", "model_name": "a"}, {"0.1": 2, "1.0": 5, "+Inf": 6}, 3.0),
            ({"engine": "1", "model_name": "a"}, {"0.1": 1, "1.0": 1, "+Inf": 2}, 4.5),
            ({"engine": "0", "model_name": "b"}, {"0.1": 0, "1.0": 3, "+Inf": 4}, 2.0),
        ],
    )
    + _vllm_histogram(
        "vllm:e2e_request_latency_seconds",
        [
            ({"engine": "0", "model_name": "a"}, {"1.0": 1, "+Inf": 3}, 9.0),
            ({"engine": "0", "model_name": "b"}, {"1.0": 2, "+Inf": 2}, 1.0),
        ],
    )
).encode()
# vLLM's series without the model label (an engine of another build): one series, for the whole
NO_LABEL = _vllm_histogram(
    "vllm:time_to_first_token_seconds",
    [({"engine": "0"}, {"0.1": 1, "+Inf": 2}, 0.5), ({"engine": "1"}, {"0.1": 3, "+Inf": 3}, 0.25)],
).encode()


def test_an_engine_that_labels_by_model_gives_a_series_per_model_that_sum_to_its_whole(procs: Procs) -> None:
    text, ids = _exposition(procs, {"vllm": (["vllm", "serve", "/models/m", "--port", "{port}"], TWO_MODELS)})
    first = _by_model(text, "enginespec_engine_time_to_first_token_seconds", ids["vllm"])
    assert first == {
        "a": {"0.1": 3.0, "1.0": 6.0, "+Inf": 8.0, "count": 8.0, "sum": 7.5},
        "b": {"0.1": 0.0, "1.0": 3.0, "+Inf": 4.0, "count": 4.0, "sum": 2.0},
    }
    assert _by_model(text, "enginespec_engine_end_to_end_seconds", ids["vllm"]) == {
        "a": {"1.0": 1.0, "+Inf": 3.0, "count": 3.0, "sum": 9.0},
        "b": {"1.0": 2.0, "+Inf": 2.0, "count": 2.0, "sum": 1.0},
    }
    # sum by (le, engine_id): the engine's whole, each request once
    assert _histogram(text, "enginespec_engine_time_to_first_token_seconds", ids["vllm"]) == {
        "0.1": 3.0,
        "1.0": 9.0,
        "+Inf": 12.0,
        "count": 12.0,
        "sum": 9.5,
    }
    assert not _by_model(text, "enginespec_engine_queue_time_seconds", ids["vllm"])


def test_an_engine_that_does_not_label_by_model_gives_one_series_with_it_empty(procs: Procs) -> None:
    text, ids = _exposition(
        procs,
        {
            "llama": (["llama-server", "-m", "/models/t.gguf", "--port", "{port}", "--metrics"], LLAMA),
            "unlabelled": (["vllm", "serve", "/models/u", "--port", "{port}"], NO_LABEL),
        },
    )
    assert _by_model(text, "enginespec_engine_time_per_output_token_seconds", ids["llama"]) == {
        "": {"+Inf": 400.0, "count": 400.0, "sum": 8.0}
    }
    assert _by_model(text, "enginespec_engine_time_to_first_token_seconds", ids["unlabelled"]) == {
        "": {"0.1": 4.0, "+Inf": 5.0, "count": 5.0, "sum": 0.75}
    }


def test_models_past_the_cap_are_counted_in_one_other_series(procs: Procs) -> None:
    """The first MAX_MODELS names by name get series of their own (as the Python API's
    `Latency.models`); the rest, and a model that calls itself `(other)`, are summed in
    `served_model="(other)"`: the engine's whole stays whole, and no two series share labels."""
    names = [f"m{i:03d}" for i in range(MAX_MODELS + 6)] + ["(other)"]
    body = _vllm_histogram(
        "vllm:time_to_first_token_seconds",
        [({"model_name": name}, {"0.5": i, "+Inf": i + 1}, 0.25 * (i + 1)) for i, name in enumerate(names)],
    ).encode()
    text, ids = _exposition(procs, {"many": (["vllm", "serve", "/models/many", "--port", "{port}"], body)})
    found = _by_model(text, "enginespec_engine_time_to_first_token_seconds", ids["many"])
    assert set(found) == {*names[:MAX_MODELS], "(other)"}
    assert found["m007"] == {"0.5": 7.0, "+Inf": 8.0, "count": 8.0, "sum": 2.0}
    rest = range(MAX_MODELS, len(names))
    assert found["(other)"] == {
        "0.5": float(sum(rest)),
        "+Inf": float(sum(i + 1 for i in rest)),
        "count": float(sum(i + 1 for i in rest)),
        "sum": sum(0.25 * (i + 1) for i in rest),
    }
    whole = _histogram(text, "enginespec_engine_time_to_first_token_seconds", ids["many"])
    assert whole["+Inf"] == sum(i + 1 for i in range(len(names)))


# A model name no engine should give: a URL with a password and a token, a line break and a
# terminal escape, and 5,000 characters.
HOSTILE = "https://u:hunter2@hf.co/m?token=sk-live-abc\n\x1b[2J" + "x" * 5000
SHOWN = "https://u:***@hf.co/m?token=***\n\x1b[2J"


def test_a_hostile_model_name_is_masked_and_cut_as_the_python_api_shows_it(procs: Procs) -> None:
    written = HOSTILE.replace("\n", "\\n")
    body = _vllm_histogram(
        "vllm:time_to_first_token_seconds", [({"model_name": written}, {"0.1": 1, "+Inf": 2}, 0.5)]
    ).encode()
    text, ids, collector = _exported(procs, {"hostile": (["vllm", "serve", "/m", "--port", "{port}"], body)})
    found = _by_model(text, "enginespec_engine_time_to_first_token_seconds", ids["hostile"])
    shown = SHOWN + "x" * (MAX_MODEL_CHARS - len(SHOWN))
    assert found == {shown: {"0.1": 1.0, "+Inf": 2.0, "count": 2.0, "sum": 0.5}}
    assert "hunter2" not in text
    assert "sk-live" not in text
    # the same name the Python API gives it
    (load,) = [
        load
        for process, load in zip(collector.snapshot.processes, collector.snapshot.loads or [], strict=True)
        if process.instance_id == ids["hostile"]
    ]
    assert load is not None
    assert load.latency is not None
    assert [model.model for model in load.latency.models] == [shown]
    if shutil.which("promtool") is not None:
        checked = subprocess.run(
            ["promtool", "check", "metrics"],
            input=text,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_served_model_name_from_a_private_config_is_withheld(procs: Procs, tmp_path: Path) -> None:
    """vLLM labels its series with its served model name; one from the owner's config file is
    withheld from a scraper of another uid (the `served_model_name` label is): its series are one,
    the label empty, and `enginespec_engine_withheld{field="served_model"}` says so. Root sees it."""
    config = tmp_path / "serve.yaml"
    config.write_text("served-model-name: acme-secret-7b\n")
    body = _vllm_histogram(
        "vllm:time_to_first_token_seconds",
        [
            ({"engine": "0", "model_name": "acme-secret-7b"}, {"0.1": 1, "+Inf": 2}, 0.5),
            ({"engine": "1", "model_name": "acme-secret-7b"}, {"0.1": 2, "+Inf": 2}, 0.25),
        ],
    ).encode()
    argv = ["vllm", "serve", "/models/public", "--config", str(config), "--port", "{port}"]
    other = Viewer(uid=os.getuid() + 12345)
    text, ids = _exposition(procs, {"private": (argv, body)}, other)
    engine = ids["private"]
    assert "acme-secret" not in text
    found = _by_model(text, "enginespec_engine_time_to_first_token_seconds", engine)
    assert found == {"": {"0.1": 3.0, "+Inf": 4.0, "count": 4.0, "sum": 0.75}}
    withheld = [
        sample.labels["field"]
        for family in text_string_to_metric_families(text)
        if family.name == "enginespec_engine_withheld"
        for sample in family.samples
        if sample.labels["engine_id"] == engine
    ]
    assert "served_model" in withheld
    assert "served_model_name" in withheld
    text, ids = _exposition(procs, {"private": (argv, body)}, Viewer(uid=0))
    found = _by_model(text, "enginespec_engine_time_to_first_token_seconds", ids["private"])
    assert found == {"acme-secret-7b": {"0.1": 3.0, "+Inf": 4.0, "count": 4.0, "sum": 0.75}}
    assert 'field="served_model"' not in text
