"""`model` and `fit` as an operator reads them (issue 45): figures with their units and never
`None`, and `fit` on a host without a GPU saying so and how to give it a ledger. Real CLI runs
(tests/helpers/cli.py) on the backend ENGINESPEC_BACKEND chooses."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from helpers.cli import enginespec

pytest.importorskip("gguf")
from modelfacts.test_modelfacts import write_gguf  # its module needs gguf


def _rows(text: str) -> dict[str, str]:
    return {
        key: value for key, value in (re.split(r"\s{2,}", line, maxsplit=1) for line in text.splitlines())
    }


def test_model_shows_units_and_never_none(tmp_path: Path) -> None:
    gguf = enginespec("model", str(write_gguf(tmp_path / "m.gguf")))
    assert gguf.returncode == 0, gguf.stderr
    rows = _rows(gguf.stdout.decode())
    assert rows["parameters"] == "444.42 K (444,416)"
    assert rows["context (trained)"] == "2048 tokens"
    assert rows["KV per token (16-bit)"] == "2.00 KiB"  # 2 x 4 layers x 2 kv heads x 64 x 2 bytes
    assert rows["weights"] == "1.70 MiB"
    # a config that leaves figures out: they are `-`, never `None`
    folder = tmp_path / "partial"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "num_attention_heads": 4})
    )
    partial = enginespec("model", str(folder))
    assert partial.returncode == 0, partial.stderr
    text = partial.stdout.decode()
    assert "None" not in text
    assert _rows(text)["heads / kv heads / head dim"] == "4 / - / -"


def test_model_names_a_cache_snapshot_by_its_repo_as_ps_does(tmp_path: Path) -> None:
    """One name for a model: a Hugging Face cache snapshot is its repo id in `model` (as in `ps`,
    the exporter and the feeds), never its revision hash."""
    revision = "0f" * 20
    snapshot = tmp_path / "hub" / "models--acme--tiny-chat" / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    out = enginespec("model", str(snapshot))
    assert out.returncode == 0, out.stderr
    rows = _rows(out.stdout.decode())
    assert rows["model"] == "acme/tiny-chat"
    assert "name in its files" not in rows  # the same name: said once
    assert revision not in out.stdout.decode().replace(str(snapshot), "")
    document = json.loads(enginespec("model", str(snapshot), "--json").stdout)
    assert (document["model_name"], document["facts"]["name"]) == ("acme/tiny-chat", "acme/tiny-chat")


def _recipe(tmp_path: Path) -> Path:
    recipe = tmp_path / "r.toml"
    recipe.write_text(f'engine = "llamacpp"\nmodel_path = "{write_gguf(tmp_path / "m.gguf")}"\n')
    return recipe


def test_fit_on_a_ledger_without_a_gpu_says_so(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.json"
    ledger.write_text("[]")
    out = enginespec("fit", str(_recipe(tmp_path)), "--ledger", str(ledger))
    assert (out.returncode, out.stdout) == (2, b"")
    assert f"enginespec fit: {ledger}: the ledger lists no GPU" in out.stderr.decode()


def test_fit_on_a_host_without_a_gpu_says_how_to_give_a_ledger(tmp_path: Path) -> None:
    listed = enginespec("gpus", "--json")
    if json.loads(listed.stdout) != []:
        pytest.skip("this host has GPUs")
    out = enginespec("fit", str(_recipe(tmp_path)))
    assert (out.returncode, out.stdout) == (2, b"")
    said = out.stderr.decode()
    assert said.startswith("enginespec fit: no GPU found on this host")
    assert "enginespec gpus --json > ledger.json" in said
    assert "--ledger ledger.json" in said
