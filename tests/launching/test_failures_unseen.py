"""The failure classifier on logs it was not built from (tests/data/failures-unseen.jsonl: real
start-up failures from public threads, labelled before any result was seen, split into tune and
holdout by the hash of the source, and a second and a third holdout each collected after the
tuning before it, see tests/data/README.md), and on real start-ups that went fine
(tests/data/startup-ok.jsonl): those classify as nothing."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

import enginespec
from enginespec import Failure, Memory, classify_failure

DATA = Path(__file__).parents[1] / "data"
UNSEEN: list[dict[str, Any]] = [
    json.loads(line) for line in (DATA / "failures-unseen.jsonl").read_text().splitlines()
]
PUBLIC: list[dict[str, Any]] = [
    json.loads(line) for line in (DATA / "failures-public.jsonl").read_text().splitlines()
]
STARTUP_OK: list[dict[str, Any]] = [
    json.loads(line) for line in (DATA / "startup-ok.jsonl").read_text().splitlines()
]

#: Labelled before the classifier was changed, and the classifier reads them otherwise; kept as
#: labelled, the test flags each the day the two agree.
KNOWN_MISSES = {
    # Ollama's `signal: killed` while a runner loads is `cpu_oom` for the public corpus
    # (ollama/ollama#9685, where the host is known to be short of memory), `killed` here (nothing
    # in this log says memory)
    "https://github.com/ollama/ollama/issues/8571": "labelled `killed`, read as the public corpus reads "
    "the same line (cpu_oom)",
    # vLLM's `No available memory for the cache blocks` is `gpu_oom` for the public corpus
    # (intel/llm-scaler#616: the weights left no device memory), `kv_cache_too_small` here
    "https://github.com/vllm-project/vllm/issues/10439": "labelled kv_cache_too_small, read as the public "
    "corpus reads the same message (gpu_oom)",
    # TensorRT-LLM's `CUDA runtime error in ::cudaMallocAsync(...): out of memory` as pasted,
    # wrapped in the middle of the call: neither half says both the call and out of memory
    "https://github.com/NVIDIA/TensorRT-LLM/issues/260": "the cause line is wrapped in two as pasted",
    # llama.cpp's `unable to allocate backend buffer` names no device: labelled `cpu_oom` from the
    # thread (a ~40G model on a 2G GPU and 8G of RAM), which the line alone cannot tell
    "https://github.com/ollama/ollama/issues/5958": "labelled cpu_oom from the thread; the line names no "
    "device",
    # the title runs TGI's signal line and its `Error: ShardCannotStart` wrapper together:
    # the wrapper on the same line makes it no cause
    "https://github.com/huggingface/text-generation-inference/issues/2238": "the title runs the cause "
    "and its wrapper into one line",
}
#: The splits that measure: `holdout` by the hash rule, `holdout2` and `holdout3` each collected
#: after the tuning that came before it.
MEASURED_SPLITS = ("holdout", "holdout2", "holdout3", "holdout4", "holdout5", "holdout6")
#: A holdout whose misses are not all fixed yet: its floor is what it measures now (classes,
#: figures), raised as causes are added; the others hold 95% and 90%.
FLOORS: dict[str, tuple[float, float]] = {}
#: Records whose class is read right but not every stated figure (README); a record that starts
#: to give them all is flagged by test_known_misses_still_miss.
KNOWN_FIGURE_MISSES: frozenset[str] = frozenset()
#: The holdouts collected apart from the hash rule, each of at least 40 records.
LATER_HOLDOUTS = ("holdout2", "holdout3", "holdout4", "holdout5", "holdout6")


def _split(source: str) -> str:
    return "holdout" if int(hashlib.sha256(source.encode()).hexdigest()[:8], 16) % 2 == 0 else "tune"


def _figures(failure: Failure) -> dict[str, object]:
    """The failure's figures as the corpus writes them (memory as ``[value, "unit"]``)."""
    out: dict[str, object] = {}
    for name in type(failure.figures).model_fields:
        value = getattr(failure.figures, name)
        if isinstance(value, Memory):
            out[name] = [value.value, value.unit]
        elif value is not None:
            out[name] = value
    return out


def _same(labelled: object, given: object) -> bool:
    if isinstance(labelled, list):
        return (
            isinstance(given, list)
            and given[1] == labelled[1]
            and float(given[0]) == pytest.approx(float(labelled[0]))
        )
    if isinstance(labelled, int):
        return given == labelled
    return str(given) == str(labelled)


def _right(record: dict[str, Any]) -> tuple[bool, int]:
    """Whether the class and a cause line are right, and how many labelled figures are given."""
    failure = classify_failure(record["engine"], record["log"])
    cause = not record["cause_lines"] or bool(set(failure.cause_lines) & set(record["cause_lines"]))
    given = _figures(failure)
    figures = sum(_same(v, given.get(k)) for k, v in record["figures"].items())
    return failure.kind == record["class"] and cause, figures


def test_the_corpus_is_what_its_readme_says() -> None:
    sources = [r["source"] for r in UNSEEN]
    assert len(UNSEEN) >= 180
    assert len(set(sources)) == len(sources)
    assert {r["engine"] for r in UNSEEN} <= set(enginespec.engine_ids())
    # the first round's split is the stated rule, about half each; the later holdouts are apart
    first = [r for r in UNSEEN if r["split"] not in LATER_HOLDOUTS]
    assert len(first) >= 100
    assert {r["split"] for r in first} == {"tune", "holdout"}
    for split in LATER_HOLDOUTS:
        assert sum(r["split"] == split for r in UNSEEN) >= 40
    assert all(r["split"] == _split(r["source"]) for r in first)
    holdout = sum(r["split"] == "holdout" for r in first)
    assert 0.35 < holdout / len(first) < 0.65
    # nothing of the corpus the vocabulary was learnt from: no thread, no log
    public_threads = {r["source"].split()[0] for r in PUBLIC}
    for record in UNSEEN:
        owner, repo, _kind, number = record["source"].split("github.com/")[1].split("/")[:4]
        assert f"{owner}/{repo}#{number}" not in public_threads
        assert not any(record["log"] in p["log"] for p in PUBLIC)
        log_lines = record["log"].split("\n")
        assert all(line in log_lines for line in record["cause_lines"])


@pytest.mark.parametrize("split", MEASURED_SPLITS)
def test_holdout_accuracy(split: str) -> None:
    """The figures the closing note reports: on each holdout, the class with a labelled cause
    line, and the labelled figures given with their value and unit."""
    holdout = [r for r in UNSEEN if r["split"] == split]
    assert holdout
    results = [_right(r) for r in holdout]
    classes = sum(right for right, _ in results)
    figures = sum(given for _, given in results)
    labelled = sum(len(r["figures"]) for r in holdout)
    print(f"\n{split}: classes {classes}/{len(holdout)}, figures {figures}/{labelled}")
    class_floor, figure_floor = FLOORS.get(split, (0.95, 0.90))
    assert classes >= class_floor * len(holdout)
    assert figures >= figure_floor * labelled


@pytest.mark.parametrize("record", UNSEEN, ids=lambda r: f"{r['split']}:{r['class']}:{r['source']}")
def test_unseen_record(record: dict[str, Any]) -> None:
    if record["source"] in KNOWN_MISSES:
        pytest.xfail(KNOWN_MISSES[record["source"]])
    failure = classify_failure(record["engine"], record["log"], exit_code=1)
    assert failure.kind == record["class"]
    log_lines = record["log"].split("\n")
    assert all(line in log_lines for line in failure.cause_lines)
    if record["cause_lines"]:
        assert set(failure.cause_lines) & set(record["cause_lines"])
    else:
        assert failure.cause_lines == ()
    given = _figures(failure)
    for name, value in record["figures"].items():
        if record["source"] in KNOWN_FIGURE_MISSES:
            break
        assert _same(value, given.get(name)), (name, value, given.get(name))
    assert failure.exit_code == 1
    assert failure.hint or failure.kind in ("other", "exited")


def test_known_misses_still_miss() -> None:
    """A known miss that starts to pass is no longer one: the list is kept honest."""
    for source in KNOWN_MISSES:
        record = next(r for r in UNSEEN if r["source"] == source)
        assert not _right(record)[0]
    for source in KNOWN_FIGURE_MISSES:
        record = next(r for r in UNSEEN if r["source"] == source)
        assert _right(record)[1] < len(record["figures"])


@pytest.mark.parametrize("record", STARTUP_OK, ids=lambda r: f"{r['engine']}:{r['source']}")
def test_a_start_that_went_fine_classifies_as_nothing(record: dict[str, Any]) -> None:
    """Real start-up output of engines that started (their warnings included): no class, no
    cause line, no figure; what the process ended with is all a failure would say."""
    failure = classify_failure(record["engine"], record["log"])
    assert failure.kind == "exited"
    assert failure.cause_lines == ()
    assert _figures(failure) == {}
    assert failure.hint is None


def test_startup_corpus_covers_every_engine_family() -> None:
    assert {r["engine"] for r in STARTUP_OK} <= set(enginespec.engine_ids())
    assert len({r["engine"] for r in STARTUP_OK}) >= 12
