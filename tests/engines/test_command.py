"""EngineSpec command building: field mapping, extra_args, defaults, resolution, docker, env."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from enginespec import Command, CommandError, Config, InstallOptionsError, Recipe, get_engine_spec, parse_argv
from enginespec.engines import BUILTIN_ENGINE_SPECS
from helpers.facts import STARTED_BY_CLIENT

# Engines whose server takes its facts as flags (`ollama serve` takes none).
#: LM Studio is started by its client (`lms server start`), which names no model: see
#: test_lm_studio_is_started_by_its_client.
ENGINES = [
    spec.id
    for spec in BUILTIN_ENGINE_SPECS
    if not spec.signature.launch_forms[0].no_arguments and spec.id not in STARTED_BY_CLIENT
]

FLAG_FIELD_NAMES = (
    "served_model_name",
    "port",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "max_model_len",
    "gpu_memory_utilization",
    "gpu_layers",
    "max_num_seqs",
    "kv_cache_dtype",
    "dtype",
    "quantization",
    "trust_remote_code",
    "tool_call_parser",
    "reasoning_parser",
    "chat_template",
    "api_key",
)
ALL_FIELDS: dict[str, Any] = {
    "served_model_name": "served",
    "port": 8123,
    "tensor_parallel_size": 2,
    "pipeline_parallel_size": 3,
    "data_parallel_size": 4,
    "max_model_len": 4096,
    "gpu_memory_utilization": 0.85,
    "gpu_layers": 99,
    "max_num_seqs": 16,
    "kv_cache_dtype": "fp8",
    "dtype": "bfloat16",
    "quantization": "awq",
    "trust_remote_code": True,
    "tool_call_parser": "hermes",
    "reasoning_parser": "deepseek_r1",
    "chat_template": "/t/chat.jinja",
    "api_key": "sk-secret",
}

# The engine's own flag for every structured field (None: the engine has none), as each engine's
# `Flags.fields` declares it (docs/engines.md).
EXPECTED_FLAGS: dict[str, dict[str, str | None]] = {
    "vllm": {
        "served_model_name": "--served-model-name",
        "port": "--port",
        "tensor_parallel_size": "--tensor-parallel-size",
        "pipeline_parallel_size": "--pipeline-parallel-size",
        "data_parallel_size": "--data-parallel-size",
        "max_model_len": "--max-model-len",
        "gpu_memory_utilization": "--gpu-memory-utilization",
        "gpu_layers": None,
        "max_num_seqs": "--max-num-seqs",
        "kv_cache_dtype": "--kv-cache-dtype",
        "dtype": "--dtype",
        "quantization": "--quantization",
        "trust_remote_code": "--trust-remote-code",
        "tool_call_parser": "--tool-call-parser",
        "reasoning_parser": "--reasoning-parser",
        "chat_template": "--chat-template",
        "api_key": "--api-key",
    },
    "sglang": {
        "served_model_name": "--served-model-name",
        "port": "--port",
        "tensor_parallel_size": "--tp-size",
        "pipeline_parallel_size": "--pp-size",
        "data_parallel_size": "--dp-size",
        "max_model_len": "--context-length",
        "gpu_memory_utilization": "--mem-fraction-static",
        "gpu_layers": None,
        "max_num_seqs": "--max-running-requests",
        "kv_cache_dtype": "--kv-cache-dtype",
        "dtype": "--dtype",
        "quantization": "--quantization",
        "trust_remote_code": "--trust-remote-code",
        "tool_call_parser": "--tool-call-parser",
        "reasoning_parser": "--reasoning-parser",
        "chat_template": "--chat-template",
        "api_key": "--api-key",
    },
    "llamacpp": {
        "served_model_name": "--alias",
        "port": "--port",
        "tensor_parallel_size": None,
        "pipeline_parallel_size": None,
        "data_parallel_size": None,
        "max_model_len": "--ctx-size",
        "gpu_memory_utilization": None,
        "gpu_layers": "--n-gpu-layers",
        "max_num_seqs": "--parallel",
        "kv_cache_dtype": "--cache-type-k",
        "dtype": None,
        "quantization": None,
        "trust_remote_code": None,
        "tool_call_parser": None,
        "reasoning_parser": "--reasoning-format",
        "chat_template": "--chat-template-file",
        "api_key": "--api-key",
    },
    "mlx": {
        "served_model_name": None,
        "port": "--port",
        "tensor_parallel_size": None,
        "pipeline_parallel_size": None,
        "data_parallel_size": None,
        "max_model_len": None,
        "gpu_memory_utilization": None,
        "gpu_layers": None,
        "max_num_seqs": "--decode-concurrency",
        "kv_cache_dtype": None,
        "dtype": None,
        "quantization": None,
        "trust_remote_code": "--trust-remote-code",
        "tool_call_parser": None,
        "reasoning_parser": None,
        "chat_template": "--chat-template",
        "api_key": None,
    },
    "tgi": {
        "served_model_name": None,
        "port": "--port",
        "tensor_parallel_size": "--num-shard",
        "pipeline_parallel_size": None,
        "data_parallel_size": None,
        "max_model_len": "--max-total-tokens",
        "gpu_memory_utilization": "--cuda-memory-fraction",
        "gpu_layers": None,
        "max_num_seqs": "--max-batch-size",
        "kv_cache_dtype": "--kv-cache-dtype",
        "dtype": "--dtype",
        "quantization": "--quantize",
        "trust_remote_code": "--trust-remote-code",
        "tool_call_parser": None,
        "reasoning_parser": None,
        "chat_template": None,
        "api_key": "--api-key",
    },
    "lmdeploy": {
        "served_model_name": "--model-name",
        "port": "--server-port",
        "tensor_parallel_size": "--tp",
        "pipeline_parallel_size": None,
        "data_parallel_size": "--dp",
        "max_model_len": "--session-len",
        "gpu_memory_utilization": "--cache-max-entry-count",
        "gpu_layers": None,
        "max_num_seqs": "--max-batch-size",
        "kv_cache_dtype": None,
        "dtype": "--dtype",
        "quantization": "--model-format",
        "trust_remote_code": "--trust-remote-code",
        "tool_call_parser": "--tool-call-parser",
        "reasoning_parser": "--reasoning-parser",
        "chat_template": "--chat-template",
        "api_key": "--api-keys",
    },
    "trtllm": {
        "served_model_name": None,
        "port": "--port",
        "tensor_parallel_size": "--tensor_parallel_size",
        "pipeline_parallel_size": "--pipeline_parallel_size",
        "data_parallel_size": None,
        "max_model_len": "--max_seq_len",
        "gpu_memory_utilization": "--free_gpu_memory_fraction",
        "gpu_layers": None,
        "max_num_seqs": "--max_batch_size",
        "kv_cache_dtype": None,
        "dtype": None,
        "quantization": None,
        "trust_remote_code": "--trust_remote_code",
        "tool_call_parser": "--tool_parser",
        "reasoning_parser": "--reasoning_parser",
        "chat_template": "--chat_template",
        "api_key": None,
    },
    "aphrodite": {
        "served_model_name": "--served-model-name",
        "port": "--port",
        "tensor_parallel_size": "--tensor-parallel-size",
        "pipeline_parallel_size": "--pipeline-parallel-size",
        "data_parallel_size": "--data-parallel-size",
        "max_model_len": "--max-model-len",
        "gpu_memory_utilization": "--gpu-memory-utilization",
        "gpu_layers": None,
        "max_num_seqs": "--max-num-seqs",
        "kv_cache_dtype": "--kv-cache-dtype",
        "dtype": "--dtype",
        "quantization": "--quantization",
        "trust_remote_code": "--trust-remote-code",
        "tool_call_parser": "--tool-call-parser",
        "reasoning_parser": "--reasoning-parser",
        "chat_template": "--chat-template",
        "api_key": "--api-key",
    },
    "mlx-vlm": {
        "served_model_name": None,
        "port": "--port",
        "tensor_parallel_size": None,
        "pipeline_parallel_size": None,
        "data_parallel_size": None,
        "max_model_len": None,
        "gpu_memory_utilization": None,
        "gpu_layers": None,
        "max_num_seqs": "--max-num-seqs",
        "kv_cache_dtype": None,
        "dtype": None,
        "quantization": None,
        "trust_remote_code": "--trust-remote-code",
        "tool_call_parser": None,
        "reasoning_parser": None,
        "chat_template": None,
        "api_key": "--api-key",
    },
    "llamacpp-python": {
        "served_model_name": "--model_alias",
        "port": "--port",
        "tensor_parallel_size": None,
        "pipeline_parallel_size": None,
        "data_parallel_size": None,
        "max_model_len": "--n_ctx",
        "gpu_memory_utilization": None,
        "gpu_layers": "--n_gpu_layers",
        "max_num_seqs": None,
        "kv_cache_dtype": None,
        "dtype": None,
        "quantization": None,
        "trust_remote_code": None,
        "tool_call_parser": None,
        "reasoning_parser": None,
        "chat_template": None,
        "api_key": "--api_key",
    },
    # `ollama serve` takes no arguments: see test_engines_b.py.
    "llamafile": {
        **dict.fromkeys(FLAG_FIELD_NAMES),
        "served_model_name": "--alias",
        "port": "--port",
        "max_model_len": "--ctx-size",
        "gpu_layers": "--n-gpu-layers",
        "max_num_seqs": "--parallel",
        "api_key": "--api-key",
    },
    "koboldcpp": {
        **dict.fromkeys(FLAG_FIELD_NAMES),
        "port": "--port",
        "max_model_len": "--contextsize",
        "gpu_layers": "--gpulayers",
        "api_key": "--password",
    },
    "tabbyapi": {
        **dict.fromkeys(FLAG_FIELD_NAMES),
        "port": "--port",
        "max_model_len": "--max-seq-len",
        "max_num_seqs": "--max-batch-size",
        "kv_cache_dtype": "--cache-mode",
    },
    # host and port in one `--address HOST:PORT` (test_an_address_flag_carries_host_and_port)
    "localai": {**dict.fromkeys(FLAG_FIELD_NAMES), "port": None, "api_key": "--api-keys"},
    "mistralrs": {
        **dict.fromkeys(FLAG_FIELD_NAMES),
        "port": "--port",
        "max_num_seqs": "--max-seqs",
        "dtype": "--dtype",
    },
    "tei": {
        **dict.fromkeys(FLAG_FIELD_NAMES),
        "served_model_name": "--served-model-name",
        "port": "--port",
        "max_num_seqs": "--max-batch-requests",
        "dtype": "--dtype",
        "api_key": "--api-key",
    },
    "infinity": {
        **dict.fromkeys(FLAG_FIELD_NAMES),
        "served_model_name": "--served-model-name",
        "port": "--port",
        "max_num_seqs": "--batch-size",
        "dtype": "--dtype",
        "trust_remote_code": "--trust-remote-code",
        "api_key": "--api-key",
    },
    "whisper-cpp": {**dict.fromkeys(FLAG_FIELD_NAMES), "port": "--port"},
    # servers that load their models at run time, none named at launch (MODELS_AT_RUN_TIME)
    "lemonade": {**dict.fromkeys(FLAG_FIELD_NAMES), "port": "--port"},
    "xinference": {**dict.fromkeys(FLAG_FIELD_NAMES), "port": "--port"},
    "omlx": {**dict.fromkeys(FLAG_FIELD_NAMES), "port": "--port", "api_key": "--api-key"},
    "exo": {**dict.fromkeys(FLAG_FIELD_NAMES), "port": "--api-port"},
    "ramalama": {**dict.fromkeys(FLAG_FIELD_NAMES), "port": "--port"},
    "dynamo": {
        **dict.fromkeys(FLAG_FIELD_NAMES),
        "served_model_name": "--served-model-name",
        "port": "--http-port",
    },
    "fastflowlm": {**dict.fromkeys(FLAG_FIELD_NAMES), "port": "--port"},
    "llmman": dict.fromkeys(FLAG_FIELD_NAMES),
    "max": {
        **dict.fromkeys(FLAG_FIELD_NAMES),
        "served_model_name": "--served-model-name",
        "port": "--port",
        "max_model_len": "--max-length",
        "trust_remote_code": "--trust-remote-code",
    },
}


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return Config(data_dir=tmp_path / "data")


def _plan(engine: str, config: Config, **fields: Any) -> Command:
    recipe = Recipe(engine=engine, model_path=fields.pop("model_path", "org/Model-7B"), **fields)
    return get_engine_spec(engine).plan(recipe, config)


def _value_after(argv: tuple[str, ...], flag: str) -> str | None:
    assert argv.count(flag) == 1, f"{flag} appears {argv.count(flag)} times in {argv}"
    index = argv.index(flag)
    following = argv[index + 1] if index + 1 < len(argv) else None
    return None if following is None or following.startswith("--") else following


def _names_a_model(engine: str) -> bool:
    """Whether the engine's serve command names its model (no: servers that load models at run
    time, Lemonade's, Xinference's, oMLX's, exo's, are started without one)."""
    spec = get_engine_spec(engine)
    return spec.model_flag is not None or spec.signature.launch_forms[0].positional_model


def _address_in_environment(engine: str) -> dict[str, str]:
    """The variables of the engine's settings that carry its address or host (llmman's
    LLMMAN_HOST, MAX's MAX_SERVE_HOST), by the kind of fact each carries."""
    return {
        name: kind
        for name, kind in get_engine_spec(engine).settings.environment.items()
        if kind in ("address", "host")
    }


@pytest.mark.parametrize("engine", ENGINES)
def test_every_structured_field_maps_to_the_engines_flag(engine: str, config: Config) -> None:
    command = _plan(engine, config, **ALL_FIELDS)
    spec = get_engine_spec(engine)
    argv = command.argv
    unsupported = [] if _names_a_model(engine) else ["model_path"]
    # an engine with no host flag, address flag or variable is started on its own default host
    if not (spec.signature.host_flags or spec.signature.address_flags or _address_in_environment(engine)):
        unsupported.append("host")
    in_environment = "address" in _address_in_environment(engine).values() and not (
        spec.signature.host_flags or spec.signature.address_flags
    )
    for field, flag in EXPECTED_FLAGS[engine].items():
        value = ALL_FIELDS[field]
        if field == "port" and flag is None and (spec.signature.address_flags or in_environment):
            continue  # in the address flag or variable, with the host
        if flag is None:
            unsupported.append(field)
            continue
        if value is True:
            assert flag in argv
        else:
            assert _value_after(argv, flag) == str(value), field
    for field in unsupported:
        assert any(f"for {field}=" in w for w in command.warnings), (field, command.warnings)
    assert len(command.warnings) == len(unsupported)
    inv = parse_argv(argv)
    assert inv is not None
    model = "org/Model-7B" if _names_a_model(engine) else None
    assert (inv.engine, inv.model, inv.port) == (engine, model, None if in_environment else 8123)
    if in_environment:
        assert list(command.env.values()) == ["127.0.0.1:8123"]


def test_an_address_flag_carries_host_and_port(config: Config) -> None:
    argv = _plan("localai", config, host="::1", port=9090).argv
    assert _value_after(argv, "--address") == "[::1]:9090"
    assert _value_after(_plan("localai", config).argv, "--address") == "127.0.0.1:8080"  # its default port


def test_lm_studio_is_started_by_its_client(config: Config) -> None:
    command = _plan("lmstudio", config, port=8123)
    assert command.argv[-2:] == ("server", "start")
    assert parse_argv(command.argv) is None  # a client: the server it starts is LM Studio's own
    assert {w.split(" for ")[1].split("=")[0] for w in command.warnings} == {"model_path", "host", "port"}


def test_llamacpp_kv_cache_type_sets_both_halves(config: Config) -> None:
    argv = _plan("llamacpp", config, kv_cache_dtype="q8_0").argv
    assert _value_after(argv, "--cache-type-k") == "q8_0"
    assert _value_after(argv, "--cache-type-v") == "q8_0"


@pytest.mark.parametrize("engine", ENGINES)
def test_unset_fields_emit_nothing(engine: str, config: Config) -> None:
    command = _plan(engine, config)
    spec = get_engine_spec(engine)
    # only the model (flag or positional) and the host: its flag, the address flag (host and
    # default port), or the one variable the engine reads it from (MAX_SERVE_HOST, LLMMAN_HOST)
    variables = _address_in_environment(engine)
    if spec.signature.host_flags or spec.signature.address_flags:
        assert (spec.signature.host_flags or spec.signature.address_flags)[0] in command.argv
    elif variables:
        assert set(command.env) == set(variables)
        assert all(value.startswith("127.0.0.1") for value in command.env.values())
    assert not set(spec.signature.port_flags) & set(command.argv)
    fixed = [a for a in spec.launch.args if a.startswith("--")]  # `llamafile --server`
    addressed = bool(spec.signature.host_flags or spec.signature.address_flags)
    expected = len(fixed) + (spec.model_flag is not None) + addressed
    assert len([a for a in command.argv if a.startswith("--")]) == expected
    said = [w.split(" for ")[1].split("=")[0] for w in command.warnings]
    unset_host = not (spec.signature.host_flags or spec.signature.address_flags or variables)
    assert said == ([] if _names_a_model(engine) else ["model_path"]) + (["host"] if unset_host else [])


@pytest.mark.parametrize("engine", ["llamacpp", "mlx"])
def test_strict_mode_raises_naming_the_field(engine: str, config: Config) -> None:
    recipe = Recipe(engine=engine, model_path="m", tensor_parallel_size=2)
    with pytest.raises(CommandError, match="tensor_parallel_size=2"):
        get_engine_spec(engine).plan(recipe, config, strict=True)


def test_false_trust_remote_code_emits_nothing(config: Config) -> None:
    assert "--trust-remote-code" not in _plan("vllm", config, trust_remote_code=False).argv


def test_golden_sglang_recipe(config: Config) -> None:
    command = _plan(
        "sglang",
        config,
        model_path="zai-org/GLM-5.1-FP4",
        tensor_parallel_size=4,
        max_model_len=202752,
        gpu_memory_utilization=0.94,
        kv_cache_dtype="fp8_e4m3",
        max_num_seqs=1,
        trust_remote_code=True,
        tool_call_parser="glm47",
        reasoning_parser="glm45",
        quantization="modelopt_fp4",
        served_model_name="glm-5.1",
        extra_args={"chunked-prefill-size": 4096, "page-size": 128, "enable-metrics": True},
    )
    argv = command.argv
    assert argv[1:3] == ("-m", "sglang.launch_server")
    expected = {
        "--context-length": "202752",
        "--max-running-requests": "1",
        "--mem-fraction-static": "0.94",
        "--tool-call-parser": "glm47",
        "--reasoning-parser": "glm45",
        "--tp-size": "4",
        "--kv-cache-dtype": "fp8_e4m3",
        "--quantization": "modelopt_fp4",
        "--served-model-name": "glm-5.1",
        "--chunked-prefill-size": "4096",
        "--page-size": "128",
    }
    for flag, value in expected.items():
        assert _value_after(argv, flag) == value
    assert "--enable-metrics" in argv
    assert "--trust-remote-code" in argv
    for absent in (
        "--enable-auto-tool-choice",
        "--max-model-len",
        "--max-num-seqs",
        "--gpu-memory-utilization",
    ):
        assert absent not in argv


def test_golden_vllm_extra_args_override(config: Config) -> None:
    command = _plan(
        "vllm",
        config,
        model_path="deepseek-ai/DeepSeek-V3",  # its family default injects --enable-expert-parallel
        max_model_len=4096,
        extra_args={"enable_expert_parallel": False, "enforce_eager": False, "max-model-len": 8192},
    )
    argv = command.argv
    assert "--enable-expert-parallel" not in argv
    assert "--enforce-eager" not in argv
    assert _value_after(argv, "--max-model-len") == "8192"
    assert argv[argv.index("serve") + 1] == "deepseek-ai/DeepSeek-V3"
    assert "--enable-expert-parallel" not in command.injected_flags


def test_extra_args_conventions(config: Config) -> None:
    vllm = _plan(
        "vllm",
        config,
        extra_args={
            "max_num_batched_tokens": 1024,
            "--enable-prefix-caching": True,
            "disable-log-stats": None,
            "middleware": ["a.b", "c.d"],
            "kv-transfer-config": {"kv_connector": "NixlConnector", "kv_role": "kv_both"},
            "tensor_parallel_size": 2,
            "-O": 3,
        },
        tensor_parallel_size=8,
    ).argv
    assert _value_after(vllm, "--max-num-batched-tokens") == "1024"
    assert "--enable-prefix-caching" in vllm
    assert "--disable-log-stats" not in vllm
    index = vllm.index("--middleware")
    assert vllm[index + 1 : index + 3] == ("a.b", "c.d")
    assert (
        _value_after(vllm, "--kv-transfer-config") == '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
    )
    assert _value_after(vllm, "--tensor-parallel-size") == "2"
    assert _value_after(vllm, "-O") == "3"
    llama = _plan(
        "llamacpp", config, max_model_len=4096, extra_args={"lora": ["a.gguf", "b.gguf"], "c": 8192}
    ).argv
    assert [llama[i + 1] for i, a in enumerate(llama) if a == "--lora"] == ["a.gguf", "b.gguf"]
    # `-c` is llama-server's short form of --ctx-size: the extra value wins, the flag appears once.
    assert "--ctx-size" not in llama
    assert _value_after(llama, "-c") == "8192"


@pytest.mark.parametrize("key", ["--x; rm -rf /", "a b", "", "-", "x=y", "$(id)", "--"])
def test_bad_extra_arg_keys_are_validation_errors(key: str) -> None:
    with pytest.raises(ValidationError, match="extra_args"):
        Recipe(engine="vllm", model_path="m", extra_args={key: "1"})


def test_family_defaults_whole_tokens_and_recipe_wins(config: Config) -> None:
    command = _plan("vllm", config, model_path="PrimeIntellect/INTELLECT-3-FP8")
    assert _value_after(command.argv, "--tool-call-parser") == "qwen3_coder"
    assert _value_after(command.argv, "--reasoning-parser") == "deepseek_r1"
    assert set(command.injected_flags) == {
        "--tool-call-parser",
        "--reasoning-parser",
        "--enable-auto-tool-choice",
    }
    other = _plan("vllm", config, model_path="PrimeIntellect/INTELLECT-2-32B")
    assert "--tool-call-parser" not in other.argv
    assert other.injected_flags == ()
    mine = _plan("vllm", config, model_path="/m/INTELLECT-3", reasoning_parser="mine")
    assert _value_after(mine.argv, "--reasoning-parser") == "mine"
    assert "--reasoning-parser" not in mine.injected_flags
    via_extra = _plan("vllm", config, model_path="/m/INTELLECT-3", extra_args={"tool_call_parser": "x"})
    assert _value_after(via_extra.argv, "--tool-call-parser") == "x"
    off = _plan("vllm", config, model_path="/m/INTELLECT-3", extra_args={"enable_auto_tool_choice": False})
    assert "--enable-auto-tool-choice" not in off.argv
    assert "--tool-call-parser" not in _plan("sglang", config, model_path="Qwen/Qwen2.5-7B").argv
    sglang_qwen3 = _plan("sglang", config, model_path="Qwen/Qwen3-8B", tool_call_parser="qwen25")
    assert _value_after(sglang_qwen3.argv, "--reasoning-parser") == "qwen3"
    assert "--enable-auto-tool-choice" not in sglang_qwen3.argv


def _fake_venv(root: Path, scripts: tuple[str, ...] = ()) -> Path:
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    (root / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (bin_dir / "python").symlink_to(sys.executable)
    for script in scripts:
        (bin_dir / script).write_text("#!/bin/sh\n")
        (bin_dir / script).chmod(0o755)
    return bin_dir


def test_resolution_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    for name in [k for k in os.environ if k.startswith("ENGINESPEC_")]:
        monkeypatch.delenv(name)
    data = tmp_path / "data"
    spec = get_engine_spec("vllm")
    recipe = Recipe(engine="vllm", model_path="m")
    # nothing installed: the bare console script name
    assert spec.plan(recipe, Config(data_dir=data)).argv[:2] == ("vllm", "serve")
    # PATH
    on_path = _fake_venv(tmp_path / "pathvenv", ("vllm",))
    monkeypatch.setenv("PATH", str(on_path))
    assert spec.plan(recipe, Config(data_dir=data)).argv[0] == str(on_path / "vllm")
    # managed venv beats PATH
    managed = _fake_venv(data / "runtimes" / "vllm" / "venv", ("vllm",))
    assert spec.plan(recipe, Config(data_dir=data)).argv[0] == str(managed / "vllm")
    # ENGINESPEC_VLLM_PYTHON beats the managed venv; no console script there: python -m
    env_bin = _fake_venv(tmp_path / "envvenv")
    monkeypatch.setenv("ENGINESPEC_VLLM_PYTHON", str(env_bin / "python"))
    command = spec.plan(recipe, Config(data_dir=data))
    assert command.argv[:4] == (
        str(env_bin / "python"),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
    )
    assert command.launcher == "module"
    # the recipe's python_path beats everything
    recipe_bin = _fake_venv(tmp_path / "recipevenv", ("vllm",))
    mine = Recipe(engine="vllm", model_path="m", python_path=str(recipe_bin / "python"))
    command = spec.plan(mine, Config(data_dir=data))
    assert command.argv[:2] == (str(recipe_bin / "vllm"), "serve")
    assert command.env["PATH"].split(os.pathsep)[0] == str(recipe_bin)
    assert command.env["VIRTUAL_ENV"] == str(recipe_bin.parent)
    for command_argv in (command.argv,):
        inv = parse_argv([str(recipe_bin / "python"), *command_argv])
        assert inv is not None
        assert inv.model == "m"


def test_llamacpp_binary_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("ENGINESPEC_LLAMACPP_BIN", raising=False)
    data = tmp_path / "data"
    spec = get_engine_spec("llamacpp")
    recipe = Recipe(engine="llamacpp", model_path="/m/a.gguf")
    managed = data / "runtimes" / "llamacpp" / "bin"
    managed.mkdir(parents=True)
    (managed / "llama-server").write_text("")
    assert spec.plan(recipe, Config(data_dir=data)).argv[0] == str(managed / "llama-server")
    monkeypatch.setenv("ENGINESPEC_LLAMACPP_BIN", "/opt/llama/bin/llama-server")
    assert spec.plan(recipe, Config(data_dir=data)).argv[0] == "/opt/llama/bin/llama-server"
    with pytest.raises(CommandError, match="python_path"):
        spec.plan(
            Recipe(engine="llamacpp", model_path="m", python_path="/usr/bin/python3"), Config(data_dir=data)
        )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"python_path": "/opt/../usr/bin/python3"}, "python_path: .*'\\.\\.' segment"),
        ({"python_path": "/usr/bin/bash"}, "python_path: .*not a Python interpreter"),
        ({"binary_path": "/opt/bin/vllm-evil"}, "binary_path: .*unexpected executable name"),
        ({"binary_path": "/opt/x/../bin/vllm"}, "binary_path: .*'\\.\\.' segment"),
    ],
)
def test_bad_paths_are_refused_naming_the_field(fields: dict[str, str], message: str, config: Config) -> None:
    with pytest.raises(CommandError, match=message):
        get_engine_spec("vllm").plan(Recipe(engine="vllm", model_path="m", **fields), config)


def test_bad_override_env_names_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGINESPEC_MLX_PYTHON", "/srv/../python3")
    with pytest.raises(CommandError, match="ENGINESPEC_MLX_PYTHON"):
        get_engine_spec("mlx").plan(Recipe(engine="mlx", model_path="m"), Config(data_dir=tmp_path))


def test_vllm_docker_runtime(config: Config) -> None:
    recipe = Recipe(
        engine="vllm",
        model_path="/models/qwen",
        port=8001,
        tensor_parallel_size=2,
        visible_devices=(2, 3),
        env_vars={"HF_HUB_OFFLINE": "1"},
        runtime={"kind": "docker", "image": "vllm/vllm-openai:v0.10.2"},
    )
    command = get_engine_spec("vllm").plan(recipe, config)
    argv = list(command.argv)
    assert command.launcher == "docker"
    assert argv[:3] == ["docker", "run", "--rm"]
    assert argv[argv.index("--gpus") + 1] == '"device=2,3"'
    assert "--ipc=host" in argv
    assert argv[argv.index("-p") + 1] == "127.0.0.1:8001:8001"
    assert argv[argv.index("-v") + 1] == "/models/qwen:/models/qwen:ro"
    assert argv[argv.index("-e") + 1] == "HF_HUB_OFFLINE=1"
    image = argv.index("vllm/vllm-openai:v0.10.2")
    server = argv[image + 1 :]
    assert server[0] == "/models/qwen"
    assert server[server.index("--host") + 1] == "0.0.0.0"
    assert server[server.index("--tensor-parallel-size") + 1] == "2"
    # what the container runs is a vLLM server with the recipe's model and port
    inv = parse_argv(["vllm", "serve", *server])
    assert inv is not None
    assert (inv.model, inv.port) == ("/models/qwen", 8001)
    host_net = Recipe(
        engine="vllm", model_path="org/m", runtime={"kind": "docker", "image": "img", "host_network": True}
    )
    argv = list(get_engine_spec("vllm").plan(host_net, config).argv)
    assert argv[argv.index("--network") + 1] == "host"
    assert "-p" not in argv
    assert argv[argv.index("--gpus") + 1] == "all"
    assert any(a.endswith(":/root/.cache/huggingface") for a in argv)
    with pytest.raises(CommandError, match="runtime: llamacpp"):
        get_engine_spec("llamacpp").plan(
            Recipe(engine="llamacpp", model_path="m", runtime={"kind": "docker", "image": "x"}), config
        )


def test_build_environment(tmp_path: Path, config: Config) -> None:
    venv_bin = _fake_venv(tmp_path / "v", ("mlx_lm.server",))
    recipe = Recipe(
        engine="mlx",
        model_path="m",
        python_path=str(venv_bin / "python"),
        visible_devices=(0, 1),
        env_vars={"HF_HOME": "/cache", "PATH_EXTRA": "x"},
    )
    env = get_engine_spec("mlx").build_environment(recipe, config)
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert env["PATH"].split(os.pathsep)[0] == str(venv_bin)
    assert env["HF_HOME"] == "/cache"
    rocm = Recipe(engine="vllm", model_path="m", visible_devices=(1,), accelerator="rocm")
    env = get_engine_spec("vllm").build_environment(rocm, config)
    assert env["HIP_VISIBLE_DEVICES"] == "1"
    assert "CUDA_VISIBLE_DEVICES" not in env
    for bad in ("1BAD", "A-B", "A B", ""):
        with pytest.raises(ValidationError, match="env_vars"):
            Recipe(engine="vllm", model_path="m", env_vars={bad: "x"})


def test_recipe_validation_messages() -> None:
    with pytest.raises(ValidationError, match="engine 'nope' is not one of vllm, sglang, llamacpp, mlx"):
        Recipe(engine="nope", model_path="m")
    with pytest.raises(ValidationError, match="would be taken for a flag"):
        Recipe(engine="vllm", model_path="--help")
    with pytest.raises(ValidationError, match="port"):
        Recipe(engine="vllm", model_path="m", port=70000)
    with pytest.raises(ValidationError, match="visible_devices"):
        Recipe(engine="vllm", model_path="m", visible_devices=(0, 0))
    with pytest.raises(ValidationError, match="docker runtime needs an image"):
        Recipe(engine="vllm", model_path="m", runtime="docker")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="frozen"):
        Recipe(engine="vllm", model_path="m").port = 1  # type: ignore[misc]


def test_api_key_is_redacted_in_printable_forms(config: Config) -> None:
    command = _plan("vllm", config, api_key="sk-very-secret", extra_args={"hf_token": "hf_abc"})
    assert "sk-very-secret" in command.argv
    assert "sk-very-secret" not in command.shell()
    assert "hf_abc" not in command.shell()
    assert "sk-very-secret" not in repr(Recipe(engine="vllm", model_path="m", api_key="sk-very-secret"))


def test_managed_package_spec() -> None:
    vllm = get_engine_spec("vllm")
    assert vllm.managed_package_spec() == "vllm"
    assert vllm.managed_package_spec("0.10.2") == "vllm==0.10.2"
    assert vllm.managed_package_spec(">=0.10,<0.12") == "vllm<0.12,>=0.10"
    for hostile in ("1.0 --index-url http://x", "latest", "1.0; rm -rf /"):
        with pytest.raises(InstallOptionsError, match="version"):
            vllm.managed_package_spec(hostile)
    with pytest.raises(InstallOptionsError):
        get_engine_spec("llamacpp").managed_package_spec()


@pytest.mark.parametrize("suffix", [".toml", ".yaml", ".json"])
def test_recipe_from_file(tmp_path: Path, suffix: str) -> None:
    data = {"engine": "llamacpp", "model_path": "/m/a.gguf", "port": 9000, "extra_args": {"jinja": True}}
    path = tmp_path / f"r{suffix}"
    if suffix == ".toml":
        path.write_text(
            'engine = "llamacpp"\nmodel_path = "/m/a.gguf"\nport = 9000\n[extra_args]\njinja = true\n'
        )
    elif suffix == ".yaml":
        path.write_text("engine: llamacpp\nmodel_path: /m/a.gguf\nport: 9000\nextra_args:\n  jinja: true\n")
    else:
        path.write_text(json.dumps(data))
    assert Recipe.from_file(path) == Recipe.model_validate(data)


@pytest.mark.parametrize(
    ("text", "suffix", "pattern"),
    [
        ('engine = "vllm"\nmodel_path = "m"\nport = "eighty"\n', ".toml", r"r\.toml: port: .*'eighty'"),
        ("engine: vllm\nmodel_path: m\nmax_num_seqs: 0\n", ".yaml", r"r\.yaml: max_num_seqs: .*\(got 0\)"),
        ('{"engine": "vllm", "model_path": "m", "extra_args": {"a b": 1}}', ".json", r"extra_args: .*'a b'"),
        ('{"engine": "vllm", "model_path": "m", "bogus": 1}', ".json", r"bogus: Extra inputs"),
        ("engine = ", ".toml", r"r\.toml: invalid TOML"),
        ("[1, 2]", ".json", r"r\.json: expected a table"),
        ("engine: vllm", ".ini", r"unknown recipe format '\.ini'"),
    ],
)
def test_recipe_file_errors_name_file_field_and_value(
    tmp_path: Path, text: str, suffix: str, pattern: str
) -> None:
    from enginespec import RecipeFileError

    path = tmp_path / f"r{suffix}"
    path.write_text(text)
    with pytest.raises(RecipeFileError, match=pattern):
        Recipe.from_file(path)


def test_config_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGINESPEC_DATA_DIR", str(tmp_path / "d"))
    monkeypatch.setenv("ENGINESPEC_VLLM_PYTHON", "/opt/v/bin/python3")
    monkeypatch.setenv("ENGINESPEC_LLAMACPP_BIN", "/opt/l/llama-server")
    config = Config()
    assert config.data_dir == tmp_path / "d"
    assert config.pythons == {"vllm": Path("/opt/v/bin/python3")}
    assert config.binaries == {"llamacpp": Path("/opt/l/llama-server")}
    assert config.runtime_dir("vllm") == tmp_path / "d" / "runtimes" / "vllm"
    explicit = Config(pythons={"vllm": "/x/python"})
    assert explicit.pythons["vllm"] == Path("/x/python")


def test_config_scalars_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGINESPEC_DOCKER_SOCKET", str(tmp_path / "docker.sock"))
    monkeypatch.setenv("ENGINESPEC_CONTAINER_API_TIMEOUT", "1.5")
    monkeypatch.setenv("ENGINESPEC_PODMAN_SOCKET", "")  # empty: unset, the default stays
    config = Config()
    assert config.docker_socket == tmp_path / "docker.sock"
    assert config.container_api_timeout == 1.5
    assert config.podman_socket == Path("/run/podman/podman.sock")
    assert Config(container_api_timeout=3).container_api_timeout == 3  # given beats the environment
    monkeypatch.setenv("ENGINESPEC_CONTAINER_API_TIMEOUT", "-1")
    with pytest.raises(ValidationError, match="container_api_timeout"):
        Config()
    with pytest.raises(ValidationError, match="data_dri"):
        Config(data_dri=tmp_path)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        Config().data_dir = tmp_path  # type: ignore[misc]


def test_engine_registry() -> None:
    import enginespec

    assert [spec.id for spec in enginespec.ALL_ENGINE_SPECS][:4] == ["vllm", "sglang", "llamacpp", "mlx"]
    spec = get_engine_spec("llamacpp")
    assert (spec.id, spec.health_path, spec.cli_binary) == ("llamacpp", "/health", "llama-server")
    assert spec.signature.engine == "llamacpp"
    with pytest.raises(ValueError, match="unknown engine 'nope'; known engines: vllm"):
        get_engine_spec("nope")
    assert enginespec.detect_engine(["llama-server", "-m", "x"]) == "llamacpp"


def test_llamacpp_alias_with_commas_gives_several_names(config: Config) -> None:
    inv = parse_argv(_plan("llamacpp", config, served_model_name="a,b").argv)
    assert inv is not None
    assert inv.served_model_names == ("a", "b")


def test_an_engine_id_with_a_dash_has_its_variables_with_an_underscore(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [k for k in os.environ if k.startswith("ENGINESPEC_")]:
        monkeypatch.delenv(name)
    spec = get_engine_spec("llamacpp-python")
    recipe = Recipe(engine="llamacpp-python", model_path="m.gguf")
    data = tmp_path / "data"
    assert spec.plan(recipe, Config(data_dir=data)).argv[:3] == ("python3", "-m", "llama_cpp.server")
    env_bin = _fake_venv(tmp_path / "envvenv")
    monkeypatch.setenv("ENGINESPEC_LLAMACPP_PYTHON_PYTHON", str(env_bin / "python"))
    command = spec.plan(recipe, Config(data_dir=data))
    assert command.argv[:3] == (str(env_bin / "python"), "-m", "llama_cpp.server")
    monkeypatch.setenv("ENGINESPEC_LLAMACPP_PYTHON_PYTHON", "/srv/../python3")
    with pytest.raises(CommandError, match="ENGINESPEC_LLAMACPP_PYTHON_PYTHON"):
        spec.plan(recipe, Config(data_dir=data))


@pytest.mark.parametrize("key", ["0", "-1", "--2x", "9lives"])
def test_an_extra_args_key_that_starts_with_a_digit_is_refused(key: str) -> None:
    """`{"0": ""}` made `-0 ''`: a negative number to an engine's parser (TGI's launcher refuses
    it as an unexpected positional), no flag; found by the hostile-recipe property test."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="is not a flag name"):
        Recipe(engine="tgi", model_path="m", extra_args={key: ""})
