"""Every hand-labelled real command line in tests/data/argv-public.jsonl, on the active backend."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import enginespec

CORPUS = Path(__file__).parents[1] / "data" / "argv-public.jsonl"
KNOWN_ENGINES = set(enginespec.engine_ids())

# Records we believe are mislabelled, with the reason. Each one is still checked: the test asserts
# our answer for it is the one stated here, so a change of behaviour is noticed.
DISAGREEMENTS: dict[str, tuple[Any, str]] = {
    # argv is `python api_server.py --port 3090 --model ...`: a bare script name that says nothing
    # about vLLM (lightllm, FastChat and countless projects ship an `api_server.py`). vLLM's own
    # launch forms are the `vllm` console script (vllm/entrypoints/cli/main.py) and the module
    # `python -m vllm.entrypoints.openai.api_server`; the record's note itself calls it ambiguous.
    # Taking every `api_server.py` for vLLM would misreport unrelated servers on every host.
    "jimmywangllm/vllm:vllm/entrypoints/test_stream.sh": (
        None,
        "bare api_server.py script is not identifiable as vLLM",
    ),
    # Labelled null when enginespec knew only the four first engines (the note: "Ollama embeds
    # llama.cpp but is not llama-server", which stays true: it is not taken for llamacpp). `ollama
    # serve` is Ollama's server (v0.32.15 cmd/cmd.go serveCmd), and Ollama is an engine now; its
    # argv gives no facts (the address is OLLAMA_HOST, in the environment).
    "ollama/ollama:scripts/install.sh": (
        ("ollama", None, None, None, None),
        "`ollama serve` is the ollama engine's server",
    ),
    "ollama/ollama:docs/development.md": (
        ("ollama", None, None, None, None),
        "`./ollama serve` is the ollama engine's server",
    ),
}


def _records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]


def _expected(record: dict[str, Any]) -> Any:
    if record["engine"] not in KNOWN_ENGINES:
        return None
    return (
        record["engine"],
        record["model"],
        record["served_model_name"],
        record["host"],
        record["port"],
    )


def _actual(argv: list[str]) -> Any:
    inv = enginespec.parse_argv(argv)
    if inv is None:
        return None
    return (inv.engine, inv.model, inv.served_model_name, inv.host, inv.port)


def test_corpus_is_substantial() -> None:
    records = _records()
    assert len(records) >= 170
    # the corpus was gathered for the first four engines (argv-new-public.jsonl has the others)
    assert {r["engine"] for r in records} >= {"vllm", "sglang", "llamacpp", "mlx", "mlx-vlm"}


@pytest.mark.parametrize("record", _records(), ids=lambda r: f"{r['source']}:{' '.join(r['argv'])[:60]}")
def test_corpus_record(record: dict[str, Any]) -> None:
    if record["source"] in DISAGREEMENTS:
        expected, _reason = DISAGREEMENTS[record["source"]]
        assert _actual(record["argv"]) == expected
        return
    assert _actual(record["argv"]) == _expected(record)


def test_disagreements_are_real_records() -> None:
    sources = {r["source"] for r in _records()}
    assert set(DISAGREEMENTS) <= sources
