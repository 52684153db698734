"""Model facts from files the tests write (GGUF through the gguf package's writer, Hugging Face
folders from published configs), and the engines' memory rules applied to real arguments."""

from __future__ import annotations

import json
import os
import re
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from enginespec.engines import llamacpp, vllm
from enginespec.modelfacts import ModelError, gguf_facts, hf_cache_folder, hf_facts, model_facts

gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")

CONFIGS = Path(__file__).parents[1] / "data" / "hf-configs"
MiB = 1 << 20

# bytes one token costs in the KV cache at 2 bytes a value, all attention layers, computed by hand
# from each published config: 2 (K and V) x layers x kv_heads x head_dim x 2; MLA: layers x
# (kv_lora_rank + qk_rope_head_dim) x 2. (sliding layers, window) where the model has them.
KNOWN = {
    "llama-3.1-8b": (2 * 32 * 8 * 128 * 2, 0, None),
    "llama-3.2-1b": (2 * 16 * 8 * 64 * 2, 0, None),
    "qwen3-8b": (2 * 36 * 8 * 128 * 2, 0, None),
    "qwen3-30b-a3b": (2 * 48 * 4 * 128 * 2, 0, None),
    "qwen2.5-7b": (2 * 28 * 4 * 128 * 2, 0, None),
    "mistral-7b-v0.1": (2 * 32 * 8 * 128 * 2, 32, 4096),
    "mixtral-8x7b": (2 * 32 * 8 * 128 * 2, 0, None),
    "gemma-3-27b": (2 * 62 * 16 * 128 * 2, 52, 1024),  # every 6th layer global: 10 of 62
    "deepseek-v3": (61 * (512 + 64) * 2, 0, None),
    "gpt-oss-20b": (2 * 24 * 8 * 64 * 2, 12, 128),
    "phi-3-mini": (2 * 32 * 32 * 96 * 2, None, None),
}


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_hugging_face_configs_give_the_known_kv_cost_per_token(tmp_path: Path, name: str) -> None:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text((CONFIGS / f"{name}.json").read_text())
    facts = hf_facts(str(folder))
    per_token, sliding, window = KNOWN[name]
    assert facts.kv_bytes_per_token() == per_token
    assert facts.attention is not None
    if sliding is not None:
        assert (facts.attention.sliding_layers, facts.attention.sliding_window) == (sliding, window)
    assert facts.format == "huggingface"


def save_safetensors(tensors: dict[str, tuple[str, list[int], int]], path: Path) -> None:
    """A safetensors file as the format defines it: 8-byte little-endian header length, the JSON
    header (dtype, shape, data offsets of each tensor), the data."""
    header, offset = {}, 0
    for name, (dtype, shape, itemsize) in tensors.items():
        size = int(np.prod(shape, dtype=np.int64)) * itemsize
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"\0" * offset)


def test_hugging_face_facts_from_configs_and_safetensors_headers(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text((CONFIGS / "mixtral-8x7b.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({"temperature": 0.6, "max_length": 4096}))
    save_safetensors({"a": ("F16", [4, 8], 2)}, folder / "model-00001-of-00002.safetensors")
    save_safetensors({"b": ("F32", [3], 4)}, folder / "model-00002-of-00002.safetensors")
    index = {
        "metadata": {"total_size": 76},
        "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"},
    }
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    facts = model_facts(str(folder))
    assert (facts.architecture, facts.experts, facts.experts_used, facts.context_length) == (
        "MixtralForCausalLM",
        8,
        2,
        32768,
    )
    assert (facts.weight_bytes, facts.parameters, dict(facts.bytes_by_type)) == (
        76,
        35,
        {"F16": 64, "F32": 12},
    )
    assert facts.generation == {"temperature": 0.6, "max_length": 4096}
    assert facts.quantization == "bfloat16"
    # a shard whose header claims more than the file holds: the index's total, and why
    (folder / "model-00002-of-00002.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    facts = model_facts(str(folder))
    assert facts.weight_bytes == 76
    assert facts.parameters is None
    assert "header length 1099511627776 exceeds the file or the cap" in facts.problems[0]


def test_quantization_config_names_the_method(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text((CONFIGS / "gpt-oss-20b.json").read_text())
    assert hf_facts(str(tmp_path)).quantization == "mxfp4"


def test_hf_cache_resolves_refs_main(tmp_path: Path) -> None:
    revision = "a" * 40
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen3-8B" / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text(revision)
    assert hf_cache_folder("Qwen/Qwen3-8B", {"HF_HUB_CACHE": str(tmp_path / "hub")}, None) == str(snapshot)
    assert hf_cache_folder("Qwen/Qwen3-8B", {"HF_HOME": str(tmp_path)}, None) == str(snapshot)
    home = tmp_path / "home"
    (home / ".cache").mkdir(parents=True)
    os.symlink(tmp_path, home / ".cache" / "huggingface")
    found = hf_cache_folder("Qwen/Qwen3-8B", {}, str(home))
    assert found is not None
    assert os.path.realpath(found) == str(snapshot)
    assert hf_cache_folder("../etc", {"HF_HOME": str(tmp_path)}, None) is None
    assert hf_cache_folder("Qwen/Other", {"HF_HOME": str(tmp_path)}, None) is None


def write_gguf(
    path: Path,
    arch: str = "llama",
    layers: int = 4,
    hidden: int = 256,
    heads: int = 4,
    kv_heads: int = 2,
    window: int | None = None,
    ftype: int = 0,
) -> Path:
    """A Llama-shaped GGUF with F32 weights (written by the gguf package)."""
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name("test-model")
    writer.add_context_length(2048)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_file_type(ftype)
    if window:
        writer.add_sliding_window(window)
    head_dim = hidden // heads
    writer.add_tensor("token_embd.weight", np.zeros((100, hidden), np.float32))
    for il in range(layers):
        writer.add_tensor(f"blk.{il}.attn_q.weight", np.zeros((hidden, hidden), np.float32))
        writer.add_tensor(f"blk.{il}.attn_k.weight", np.zeros((kv_heads * head_dim, hidden), np.float32))
    writer.add_tensor("output.weight", np.zeros((100, hidden), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_gguf_facts(tmp_path: Path) -> None:
    facts = gguf_facts(str(write_gguf(tmp_path / "m.gguf", ftype=15)))
    layer = 256 * 256 * 4 + 128 * 256 * 4
    assert (facts.architecture, facts.name, facts.quantization, facts.context_length) == (
        "llama",
        "test-model",
        "Q4_K_M",
        2048,
    )
    assert (facts.layers, facts.attention_heads, facts.kv_heads, facts.head_dim) == (4, 4, 2, 64)
    assert facts.layer_bytes == (layer,) * 4
    assert (facts.input_bytes, facts.output_bytes) == (100 * 256 * 4, 100 * 256 * 4)
    assert facts.weight_bytes == 4 * layer + 2 * 100 * 256 * 4 == dict(facts.bytes_by_type)["F32"]
    assert facts.parameters == facts.weight_bytes // 4
    assert facts.kv_bytes_per_token() == 2 * 4 * 2 * 64 * 2


def test_split_gguf_files_are_read_together(tmp_path: Path) -> None:
    one = write_gguf(tmp_path / "one.gguf")
    data = one.read_bytes()
    # the same file as the first of two splits (split.count 2), the second a copy
    writer = gguf.GGUFWriter(str(tmp_path / "m-00001-of-00002.gguf"), "llama")
    writer.add_block_count(4)
    writer.add_uint16("split.no", 0)
    writer.add_uint16("split.count", 2)
    writer.add_tensor("blk.0.attn_q.weight", np.zeros((8, 32), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    (tmp_path / "m-00002-of-00002.gguf").write_bytes(data)
    facts = gguf_facts(str(tmp_path / "m-00001-of-00002.gguf"))
    assert len(facts.files) == 2
    assert facts.weight_bytes == 8 * 32 * 4 + gguf_facts(str(one)).weight_bytes  # type: ignore[operator]
    (tmp_path / "m-00002-of-00002.gguf").unlink()
    facts = gguf_facts(str(tmp_path / "m-00001-of-00002.gguf"))
    assert facts.weight_bytes == 8 * 32 * 4
    assert "m-00002-of-00002.gguf" in facts.problems[0]


def test_hostile_model_files_are_errors_naming_the_file(tmp_path: Path) -> None:
    fifo = tmp_path / "m.gguf"
    os.mkfifo(fifo)
    with pytest.raises(ModelError, match=r"m\.gguf: not a regular file"):
        gguf_facts(str(fifo))
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 2**63))
    with pytest.raises(ModelError, match=r"bad.gguf: metadata count 9223372036854775808 at offset 16"):
        gguf_facts(str(bad))
    with pytest.raises(ModelError, match="not a regular file"):
        model_facts("/dev/null")


# llama.cpp's KV cache, by hand: 4 layers x 2 kv heads x 64 = 128 values a row for K and for V;
# f16 256 bytes a row, q8_0 128 / 32 x 34 = 136.
@pytest.mark.parametrize(
    ("argv", "context", "per_seq", "kv"),
    [
        (["-c", "512", "-np", "1"], 512, 512, 4 * 2 * 256 * 512),
        (["-c", "4096", "-np", "4"], 4096, 1024, 4 * 2 * 256 * 4096),
        (["-c", "4000", "-np", "1"], 4096, 4096, 4 * 2 * 256 * 4096),  # padded to 256
        (["-c", "4096", "-np", "3"], 4608, 1536, 4 * 2 * 256 * 4608),  # pad(4096 / 3) x 3
        (["-c", "4096", "-np", "3", "-kvu"], 4096, 4096, 4 * 2 * 256 * 4096),  # one stream
        (["-c", "512"], 512, 512, 4 * 2 * 256 * 512),  # -np auto: 4 slots, unified
        (["-c", "512", "-np", "1", "-ctk", "q8_0"], 512, 512, 4 * (136 + 256) * 512),
        (["-c", "512", "-np", "1", "-ctk", "q8_0", "-ctv", "q8_0"], 512, 512, 4 * 2 * 136 * 512),
        (["--ctx-size=0", "--parallel=1"], 2048, 2048, 4 * 2 * 256 * 2048),  # the trained context
    ],
)
def test_llamacpp_kv_cache_by_its_rule(
    tmp_path: Path, argv: list[str], context: int, per_seq: int, kv: int
) -> None:
    facts = gguf_facts(str(write_gguf(tmp_path / "m.gguf")))
    estimate = llamacpp.estimate_memory(facts, ["llama-server", "-m", "m.gguf", *argv])
    assert (estimate.context, estimate.context_per_sequence, estimate.kv_cache_bytes) == (
        context,
        per_seq,
        kv,
    )
    assert estimate.weights == {"CPU": facts.weight_bytes}


def test_llamacpp_sliding_window_layers_hold_the_window_only(tmp_path: Path) -> None:
    facts = gguf_facts(str(write_gguf(tmp_path / "m.gguf", window=128)))
    assert facts.attention is not None
    assert facts.attention.sliding_window == 128
    # llama has no sliding layers by default
    assert facts.attention.sliding_layers == 0
    sliding = facts.model_copy(update={"attention": facts.attention.model_copy(update={"sliding_layers": 2})})
    estimate = llamacpp.estimate_memory(sliding, ["llama-server", "-c", "8192", "-np", "1"])
    # 2 full layers x 8192 cells + 2 sliding layers x pad(128 + 512, 256) = 768 cells
    assert estimate.kv_cache_bytes == 2 * 512 * 8192 + 2 * 512 * 768
    full = llamacpp.estimate_memory(sliding, ["llama-server", "-c", "8192", "-np", "1", "--swa-full"])
    assert full.kv_cache_bytes == 4 * 512 * 8192


@pytest.mark.parametrize(
    ("arch", "pattern", "sliding"),
    [
        ("gemma3", None, 10),  # llama.cpp's default period 6: layers 5 and 11 are full
        ("gemma3", 4, 9),  # a period in the file wins
        ("gpt-oss", None, 6),  # every other layer
        ("gemma3", 0, 12),  # 0: every layer windowed
        ("llama", None, 0),
    ],
)
def test_gguf_sliding_window_patterns(tmp_path: Path, arch: str, pattern: int | None, sliding: int) -> None:
    path = write_gguf(tmp_path / "m.gguf", arch=arch, layers=12, window=512)
    if pattern is not None:
        # the same file with the pattern key: rewritten with it
        writer = gguf.GGUFWriter(str(tmp_path / "p.gguf"), arch)
        writer.add_block_count(12)
        writer.add_head_count(4)
        writer.add_head_count_kv(2)
        writer.add_embedding_length(256)
        writer.add_sliding_window(512)
        writer.add_uint32(f"{arch}.attention.sliding_window_pattern", pattern)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        path = tmp_path / "p.gguf"
    attention = gguf_facts(str(path)).attention
    assert attention is not None
    assert (attention.sliding_layers, attention.sliding_window) == (sliding, 512)


def test_llamacpp_offload_splits_layers_over_devices(tmp_path: Path) -> None:
    facts = gguf_facts(str(write_gguf(tmp_path / "m.gguf")))
    layer, embd = facts.layer_bytes[0], facts.input_bytes
    argv = ["llama-server", "-c", "512", "-np", "1"]
    two = llamacpp.estimate_memory(facts, [*argv, "-ngl", "99"], devices=["GPU0", "GPU1"])
    assert two.weights == {"CPU": embd, "GPU0": 2 * layer, "GPU1": 2 * layer + facts.output_bytes}
    assert two.kv_cache == {"CPU": 0, "GPU0": 2 * 512 * 512, "GPU1": 2 * 512 * 512}
    partial = llamacpp.estimate_memory(facts, [*argv, "-ngl", "1"], devices=["GPU0"])
    assert partial.weights == {"CPU": embd + 3 * layer + facts.output_bytes, "GPU0": layer}
    uneven = llamacpp.estimate_memory(facts, [*argv, "-ngl", "99", "-ts", "3,1"], devices=["GPU0", "GPU1"])
    assert (uneven.weights["GPU0"], uneven.weights["GPU1"]) == (3 * layer, layer + facts.output_bytes)
    none = llamacpp.estimate_memory(
        facts, [*argv, "-ngl", "99", "-sm", "none", "-mg", "1"], devices=["GPU0", "GPU1"]
    )
    assert none.weights["GPU0"] == 0
    assert none.weights["GPU1"] == 4 * layer + facts.output_bytes
    with pytest.raises(ModelError, match="--cache-type-k 'q9': not one of"):
        llamacpp.estimate_memory(facts, [*argv, "-ctk", "q9"])


def test_llamacpp_logged_buffers() -> None:
    log = (
        "load_tensors:   CPU_Mapped model buffer size =     4.52 MiB\n"
        "llama_kv_cache:        CPU KV buffer size =     2.00 MiB\n"
        "llama_context:        CPU compute buffer size =    66.51 MiB\n"
        "load_tensors:        CUDA0 model buffer size =  4096.00 MiB\n"
    )
    logged = llamacpp.logged_memory(log)
    assert logged.weights == {"CPU_Mapped": round(4.52 * MiB), "CUDA0": 4096 * MiB}
    assert (logged.kv_cache, logged.compute) == ({"CPU": 2 * MiB}, {"CPU": round(66.51 * MiB)})


def test_vllm_claim_and_logged_figures(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text((CONFIGS / "qwen3-8b.json").read_text())
    facts = hf_facts(str(tmp_path))
    argv = [
        "vllm",
        "serve",
        "Qwen/Qwen3-8B",
        "-tp",
        "2",
        "--max-model-len",
        "8192",
        "--gpu-memory-utilization",
        "0.5",
    ]
    estimate = vllm.estimate_memory(facts, argv, device_bytes=[80 << 30, 80 << 30])
    assert estimate.claim == {"GPU0": 40 << 30, "GPU1": 40 << 30}
    assert estimate.kv_cache == {"GPU0": 147456 * 8192 // 2, "GPU1": 147456 * 8192 // 2}
    fp8 = vllm.estimate_memory(facts, [*argv, "--kv-cache-dtype", "fp8"])
    assert fp8.kv_cache_bytes == 147456 * 8192 // 2
    # 8 KV heads on 16 ranks: one head each (replicated), so each holds 1/8 of the cache, not 1/16
    wide = vllm.estimate_memory(facts, ["vllm", "serve", "m", "-tp", "16", "--max-model-len", "8192"])
    assert set(wide.kv_cache.values()) == {147456 * 8192 // 8}
    (tmp_path / "config.json").write_text((CONFIGS / "deepseek-v3.json").read_text())
    mla = vllm.estimate_memory(
        hf_facts(str(tmp_path)), ["vllm", "serve", "m", "-tp", "8", "--max-model-len", "4096"]
    )
    assert set(mla.kv_cache.values()) == {70272 * 4096}  # the latent on every rank
    log = (
        "INFO 05-01 gpu_model_runner.py:1234] Model loading took 15.2683 GiB and 10.5 seconds\n"
        "INFO 05-01 gpu_worker.py:300] Available KV cache memory: 53.05 GiB\n"
        "INFO 05-01 kv_cache_utils.py:700] GPU KV cache size: 434,560 tokens\n"
    )
    logged = vllm.logged_memory(log)
    assert logged.weights == {"GPU": round(15.2683 * (1 << 30))}
    assert (logged.kv_cache_available, logged.kv_cache_tokens) == (round(53.05 * (1 << 30)), 434560)


def _ollama_tree(models: Path, model_file: Path) -> Path:
    """An Ollama models folder: the GGUF as a blob, a manifest naming it as its model layer."""
    digest = "ab" * 32
    (models / "blobs").mkdir(parents=True)
    blob = models / "blobs" / f"sha256-{digest}"
    blob.write_bytes(model_file.read_bytes())
    for host, namespace, name, tag, layer in (
        ("registry.ollama.ai", "library", "other", "latest", "cd" * 32),
        ("registry.ollama.ai", "library", "llama3.2", "3b", digest),
        ("hf.co", "bartowski", "tiny-GGUF", "Q4_K_M", digest),
    ):
        manifest = {
            "schemaVersion": 2,
            "layers": [
                {"mediaType": "application/vnd.ollama.image.template", "digest": f"sha256:{'ef' * 32}"},
                {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{layer}", "size": 1},
            ],
        }
        folder = models / "manifests" / host / namespace / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / tag).write_text(json.dumps(manifest))
    return blob


def test_ollama_blob_is_named_through_the_manifests(tmp_path: Path) -> None:
    from enginespec.engines import ollama

    blob = _ollama_tree(tmp_path / "models", write_gguf(tmp_path / "m.gguf"))
    # two manifests name the blob: the first in sorted order
    assert ollama.model_name(str(blob)) == "hf.co/bartowski/tiny-GGUF:Q4_K_M"
    (tmp_path / "models" / "manifests" / "hf.co" / "bartowski" / "tiny-GGUF" / "Q4_K_M").write_text(
        "{not json"
    )
    assert ollama.model_name(str(blob)) == "llama3.2:3b"
    assert ollama.model_name(str(tmp_path / "m.gguf")) is None


def test_model_command_on_a_running_engine(
    tmp_path: Path, procs: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from enginespec.cli import main

    write_gguf(tmp_path / "m.gguf")
    server = procs.start(
        ["llama-server", "-m", "m.gguf", "-c", "4096", "-np", "3", "-ctk", "q8_0", "--port", "18080"],
        cwd=tmp_path,
    )
    assert main(["model", str(server.pid), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["engine"] == "llamacpp"
    assert document["facts"]["architecture"] == "llama"
    # 4 layers x 4608 cells x (136 + 256) bytes a row pair
    assert document["facts"]["estimate"]["context"] == 4608
    assert sum(document["facts"]["estimate"]["kv_cache"].values()) == 4 * 4608 * (136 + 256)
    assert main(["model", str(server.pid)]) == 0
    text = capsys.readouterr().out
    assert "4608 (3 x 1536)" in text
    assert "K q8_0, V f16" in text
    blob = _ollama_tree(tmp_path / "models", tmp_path / "m.gguf")
    runner = procs.start(["ollama", "runner", "--model", str(blob), "--port", "18081"])
    assert main(["model", str(runner.pid), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["facts"]["registry_name"] == "hf.co/bartowski/tiny-GGUF:Q4_K_M"
    assert document["model_name"] == "hf.co/bartowski/tiny-GGUF:Q4_K_M"  # as ps and the labels say
    assert main(["model", str(runner.pid)]) == 0
    assert capsys.readouterr().out.startswith(
        "model                        hf.co/bartowski/tiny-GGUF:Q4_K_M\n"
    )
    assert main(["model", str(tmp_path / "missing.gguf")]) == 1
    assert "missing.gguf: No such file or directory" in capsys.readouterr().err


def test_engine_process_model_facts_are_read_on_request_and_cached(tmp_path: Path, procs: Any) -> None:
    from enginespec.models import processes as processmodels
    from enginespec.scanning.scanner import Scanner

    model = write_gguf(tmp_path / "m.gguf")
    server = procs.start(["llama-server", "-m", str(model), "-c", "1024", "-np", "1", "--port", "18082"])
    missing = procs.start(["llama-server", "-m", str(tmp_path / "gone.gguf"), "--port", "18083"])
    found = {p.pid: p for p in Scanner().scan()}
    process = found[server.pid]
    assert "model_facts" not in process.__dict__  # the scan read no model
    facts = process.model_facts
    assert facts is not None
    assert facts.estimate is not None
    assert facts.estimate.kv_cache_bytes == 4 * 2 * 256 * 1024
    assert "model_facts" not in process.model_dump()
    # another scan's record of the same process: the cached facts, not a second read
    model.unlink()
    again = {p.pid: p for p in Scanner().scan()}[server.pid]
    assert again.model_facts == facts
    gone = found[missing.pid]
    assert gone.model_facts is None
    assert gone.model_facts_problem is not None
    assert (
        "No such file or directory, and is not in its owner's Hugging Face cache" in gone.model_facts_problem
    )
    assert len(processmodels._cache) <= processmodels.CACHE_SIZE


def test_model_command_sets_logged_figures_beside_the_estimate(
    tmp_path: Path, procs: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from enginespec.cli import main

    write_gguf(tmp_path / "m.gguf")
    server = procs.start(
        ["llama-server", "-m", "m.gguf", "-c", "512", "-np", "1", "--port", "18084"], cwd=tmp_path
    )
    log = tmp_path / "llama.log"
    log.write_text(
        "load_tensors:   CPU_Mapped model buffer size =     1.70 MiB\n"
        "llama_kv_cache:        CPU KV buffer size =     1.00 MiB\n"
        "llama_context:        CPU compute buffer size =    66.51 MiB\n"
    )
    assert main(["model", str(server.pid), "--log", str(log), "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)["facts"]
    assert facts["logged"]["kv_cache"] == {"CPU": MiB}
    assert sum(facts["estimate"]["kv_cache"].values()) == MiB  # 4 x 512 x (256 + 256)
    assert main(["model", str(server.pid), "--log", str(log)]) == 0
    assert "logged KV cache              CPU 1.00 MiB" in capsys.readouterr().out


def test_measured_bytes_come_from_the_gpu_field() -> None:
    from types import SimpleNamespace

    from enginespec.models.processes import measured

    uses = (SimpleNamespace(device="GPU0", memory_bytes=5), SimpleNamespace(device="GPU0", memory_bytes=2))
    assert measured(uses) == {"GPU0": 7}
    assert measured(None) == {}
    assert measured((SimpleNamespace(device="GPU1", memory_bytes=None),)) == {}


def test_ps_shows_the_model_facts_compactly(tmp_path: Path, procs: Any) -> None:
    import subprocess
    import sys

    write_gguf(tmp_path / "m.gguf", ftype=15)
    server = procs.start(
        ["llama-server", "-m", "m.gguf", "-c", "4000", "-np", "1", "--port", "18085"], cwd=tmp_path
    )
    shown = subprocess.run(
        [sys.executable, "-m", "enginespec.cli", "ps", "--no-health", "--wide"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    (row,) = [line for line in shown.splitlines() if line.startswith(f"{server.pid} ")]
    assert "MODEL FACTS" in shown.splitlines()[0]
    assert "llama Q4_K_M 4096" in row  # -c 4000 as llama.cpp pads it


def test_a_blocked_model_read_is_abandoned_at_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from enginespec.models import processes as processmodels

    monkeypatch.setattr(processmodels, "DEADLINE_SECONDS", 0.2)
    monkeypatch.setattr(processmodels, "MAX_STUCK", 1)
    release = threading.Event()

    def blocked() -> Any:
        release.wait(30)  # as a read on a FUSE mount whose daemon never answers
        raise ModelError("released")

    try:
        assert processmodels._with_deadline(blocked) == "reading its model took longer than 0.2 s (abandoned)"
        assert (
            processmodels._with_deadline(blocked)
            == "not read: 1 earlier reads of model files are still blocked"
        )
    finally:
        release.set()
    deadline = time.monotonic() + 10
    while processmodels._stuck and time.monotonic() < deadline:
        time.sleep(0.01)
    assert processmodels._stuck == 0

    def odd() -> Any:
        raise OSError(5, "Input/output error")

    assert (
        processmodels._with_deadline(odd) == "model files unreadable: OSError: [Errno 5] Input/output error"
    )


@pytest.mark.parametrize(
    ("config", "header", "why"),
    [
        (
            b'{"hidden_size": 1' + b"0" * 399 + b', "num_hidden_layers": 2}',
            None,
            "hidden_size: holds an integer of 400",
        ),
        (
            b'{"num_hidden_layers": 2, "rope_theta": 1e400}',
            None,
            "rope_theta: inf is not a finite number",
        ),
        (b'{"num_hidden_layers": NaN}', None, "num_hidden_layers: nan is not a finite number"),
        (
            b'{"num_hidden_layers": 2}',
            b'{"w": {"dtype": "F16", "shape": [2], "data_offsets": [0, 1' + b"0" * 400 + b"]}}",
            "w.data_offsets[1]: holds an integer of 401 digits",
        ),
    ],
)
def test_numbers_no_estimate_can_take_are_errors_naming_the_field(
    tmp_path: Path, config: bytes, header: bytes | None, why: str
) -> None:
    """A 400-digit hidden_size raised OverflowError in every estimate (`ps`, the exporter); an
    offset of 10**400 made every scrape a 500."""
    (tmp_path / "config.json").write_bytes(config)
    if header is not None:
        (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
        facts = hf_facts(str(tmp_path))
        assert [p for p in facts.problems if why in p], facts.problems
        assert facts.weight_bytes is None
    else:
        with pytest.raises(ModelError, match=re.escape(why)):
            hf_facts(str(tmp_path))


def test_vllm_estimate_takes_only_finite_argv_numbers_in_range(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text((CONFIGS / "llama-3.2-1b.json").read_text())
    facts = hf_facts(str(tmp_path))
    for flag, value in [
        ("--max-model-len", "1e400"),
        ("--max-model-len", "nan"),
        ("--gpu-memory-utilization", "2"),
    ]:
        with pytest.raises(ModelError, match=re.escape(f"{flag} {value!r}: out of range")):
            vllm.estimate_memory(facts, ["vllm", "serve", "m", flag, value])
    assert vllm.estimate_memory(facts, ["vllm", "serve", "m", "--max-model-len", "4096"]).context == 4096
