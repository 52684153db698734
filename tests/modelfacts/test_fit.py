"""`enginespec fit` on recorded GPU ledgers (tests/data/ledgers): a recipe that fits, one that fits
with a smaller context, one refused because other processes hold the memory."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from enginespec import Scanner
from enginespec.cli import main
from helpers.fakeserver import free_port
from helpers.gpuhost import Host, build_nvml
from helpers.procs import Procs

gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")

DATA = Path(__file__).parents[1] / "data"
LEDGERS = DATA / "ledgers"
GIB = 1 << 30


def big_gguf(path: Path) -> Path:
    """An 8B-like Llama GGUF (32 layers of 4096, 8 of 32 heads for K and V, 128k context): its
    header as the gguf package writes it, the tensor data a sparse hole of the right size."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(131072)
    writer.add_embedding_length(4096)
    writer.add_block_count(32)
    writer.add_head_count(32)
    writer.add_head_count_kv(8)
    sizes = {"token_embd.weight": (128256, 4096), "output.weight": (128256, 4096)}
    for il in range(32):
        sizes[f"blk.{il}.ffn.weight"] = (24576, 4096)
    total = 0
    for name, shape in sizes.items():
        nbytes = shape[0] * shape[1] * 2
        writer.add_tensor_info(name, shape, np.dtype(np.float16), nbytes)
        total += nbytes + (-nbytes % 32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    header = path.stat().st_size
    os.truncate(path, header + (-header % 32) + total)
    return path


def hf_folder(folder: Path) -> Path:
    """Qwen3-8B's config, its weights one sparse safetensors file of 16 GB (a header only)."""
    folder.mkdir()
    (folder / "config.json").write_text((DATA / "hf-configs" / "qwen3-8b.json").read_text())
    size = 16 * GIB
    header = json.dumps({"w": {"dtype": "BF16", "shape": [size // 2], "data_offsets": [0, size]}}).encode()
    path = folder / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    os.truncate(path, 8 + len(header) + size)
    return folder


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, object]]:
    code = main(["fit", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_llama_server_fits_on_an_idle_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = big_gguf(tmp_path / "m.gguf")
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        f'engine = "llamacpp"\nmodel_path = "{model}"\nmax_model_len = 8192\nmax_num_seqs = 1\n'
    )
    code, result = run(capsys, str(recipe), "--ledger", str(LEDGERS / "idle.json"))
    assert code == 0
    assert result["fits"] is True
    placements = result["placements"]
    assert isinstance(placements, list)
    assert [p["devices"] for p in placements] == [["GPU0"], ["GPU1"]]
    assert placements[0]["settings"] == {"-ngl": "33", "-c": "8192", "-np": "1"}
    assert placements[0]["changed"] == []
    # 32 layers of 192 MiB, output 1002 MiB (token_embd stays on the CPU), 8192 x 128 KiB of KV
    assert placements[0]["needed_bytes"]["GPU0"] == 32 * 192 * (
        1 << 20
    ) + 128256 * 4096 * 2 + 8192 * 131072 + (512 << 20)


def test_llama_server_gets_a_smaller_context_where_memory_is_short(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = big_gguf(tmp_path / "m.gguf")
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        f'engine = "llamacpp"\nmodel_path = "{model}"\nmax_model_len = 131072\nmax_num_seqs = 1\n'
    )
    code, result = run(capsys, str(recipe), "--ledger", str(LEDGERS / "busy.json"))
    assert code == 0
    (placement,) = result["placements"]  # type: ignore[misc]
    assert placement["devices"] == ["GPU1"]
    context = int(placement["settings"]["-c"])
    assert context % 256 == 0
    assert 8192 < context < 131072
    assert placement["changed"] == [f"-c 131072 -> {context}"]
    assert placement["needed_bytes"]["GPU1"] <= placement["free_bytes"]["GPU1"]
    (refusal,) = result["refusals"]  # type: ignore[misc]
    assert refusal == (
        "GPU0 has 0.32 of 79.25 GiB free: 78.90 GiB held by engine vllm-8000-1a2b3c4d"
        " (the weights alone need 6.98 GiB)"
    )


def test_vllm_is_refused_where_a_foreign_process_holds_the_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = hf_folder(tmp_path / "qwen")
    recipe = tmp_path / "r.toml"
    recipe.write_text(f'engine = "vllm"\nmodel_path = "{folder}"\nmax_model_len = 32768\n')
    code, result = run(capsys, str(recipe), "--ledger", str(LEDGERS / "busy.json"), "--gpus", "0")
    assert code == 1
    assert result["fits"] is False
    assert result["refusals"] == [
        "GPU0 has 0.32 of 79.25 GiB free: 78.90 GiB held by engine vllm-8000-1a2b3c4d"
    ]
    # on the idle host: 0.9 of the device, the whole context
    code, result = run(capsys, str(recipe), "--ledger", str(LEDGERS / "idle.json"), "--gpus", "1")
    assert code == 0
    (placement,) = result["placements"]  # type: ignore[misc]
    assert placement["environment"] == {"CUDA_VISIBLE_DEVICES": "1"}
    assert placement["settings"] == {"--gpu-memory-utilization": "0.90", "--max-model-len": "32768"}
    # on GPU1 of the busy host (9.25 GiB free): a lower utilization, and the context that fits
    code, result = run(capsys, str(recipe), "--ledger", str(LEDGERS / "busy.json"), "--gpus", "1")
    assert code == 1  # 16 GiB of weights do not fit in 9.25 GiB
    assert result["refusals"] == ["GPU1 has 9.25 of 79.25 GiB free: 70.00 GiB held by pid 5151 (python3)"]


def test_bad_ledgers_and_devices_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = big_gguf(tmp_path / "m.gguf")
    recipe = tmp_path / "r.toml"
    recipe.write_text(f'engine = "llamacpp"\nmodel_path = "{model}"\n')
    bad = tmp_path / "ledger.json"
    bad.write_text('{"devices": 3}')
    assert main(["fit", str(recipe), "--ledger", str(bad)]) == 2
    assert "not a list of devices" in capsys.readouterr().err
    assert main(["fit", str(recipe), "--ledger", str(LEDGERS / "idle.json"), "--gpus", "7"]) == 2
    assert "--gpus '7': no device 7 in the ledger" in capsys.readouterr().err


def test_fit_reads_the_live_ledger_of_this_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], procs: Procs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``--ledger``, the GPUs as they are held now (here through the test NVML library):
    a running vLLM engine of this host holds most of GPU0, GPU1 is idle."""
    library = build_nvml(tmp_path, 3)
    host = Host(tmp_path / "host")
    engine = procs.start(["vllm", "serve", "Qwen/Qwen3-8B", "--port", str(free_port())])
    instance_id = next(p.instance_id for p in Scanner().scan() if p.pid == engine.pid)
    host.nvml_gpu("GPU-0", "0000:17:00.0", "NVIDIA H100 80GB HBM3", 80 * GIB, 79 * GIB)
    host.nvml_gpu("GPU-1", "0000:65:00.0", "NVIDIA H100 80GB HBM3", 80 * GIB, 0)
    host.nvml_process("GPU-0", engine.pid, 79 * GIB)
    monkeypatch.setenv("ENGINESPEC_NVML_LIBRARY", str(library))
    monkeypatch.setenv("ENGINESPEC_TEST_NVML_HOST", str(host.nvml_file()))
    model = big_gguf(tmp_path / "m.gguf")
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        f'engine = "llamacpp"\nmodel_path = "{model}"\nmax_model_len = 8192\nmax_num_seqs = 1\n'
    )
    code, result = run(capsys, str(recipe))
    assert code == 0
    (placement,) = result["placements"]  # type: ignore[misc]
    assert placement["devices"] == ["GPU-1"]
    assert placement["environment"] == {"CUDA_VISIBLE_DEVICES": "1"}
    (refusal,) = result["refusals"]  # type: ignore[misc]
    assert refusal.startswith(f"GPU-0 has 1.00 of 80.00 GiB free: 79.00 GiB held by engine {instance_id}")
    code, result = run(capsys, str(recipe), "--gpus", "0")
    assert code == 1
    assert result["fits"] is False
