"""SGLang: ``python -m sglang.launch_server`` and the ``sglang serve`` console script."""

from __future__ import annotations

from enginespec.signature import LaunchForm, Signature
from enginespec.spec import EngineSpec, FamilyDefault, HealthState

SIGNATURE = Signature(
    engine="sglang",
    launch_forms=(
        LaunchForm(modules=("sglang.launch_server",)),
        LaunchForm(executables=("sglang",), subcommand=("serve",)),
        # sglang_router.launch_server starts the router together with its SGLang workers and takes
        # the server's own arguments (sgl-router's launch_server.py).
        LaunchForm(modules=("sglang_router.launch_server",)),
    ),
    underscore_is_dash=True,
    # python/sglang/srt/server_args.py: `--model-path` has the alias `--model`; `--tp-size` has
    # `--tp` and `--tensor-parallel-size`.
    aliases={
        "--model": "--model-path",
        "--tp": "--tp-size",
        "--tensor-parallel-size": "--tp-size",
        "--pp": "--pp-size",
        "--pipeline-parallel-size": "--pp-size",
        "--dp": "--dp-size",
        "--data-parallel-size": "--dp-size",
    },
    model_flags=("--model-path",),
    served_name_flags=("--served-model-name",),
    host_flags=("--host",),
    port_flags=("--port",),
    exit_flags=frozenset({"-h", "--help", "--version"}),
    secret_flags=frozenset({"--api-key", "--admin-api-key"}),
    fold_workers=True,
    default_host="127.0.0.1",
    default_port=30000,
)


class SglangSpec(EngineSpec):
    id = "sglang"
    signature = SIGNATURE
    cli_binary = "sglang"
    console_args = ("serve",)
    # `sglang serve` only exists in recent releases; the module works in every release.
    module_args = ("-m", "sglang.launch_server")
    prefer_module = True
    model_flag = "--model-path"
    package = "sglang"
    field_flags = {
        "model_path": ("--model-path",),
        "served_model_name": ("--served-model-name",),
        "host": ("--host",),
        "port": ("--port",),
        "tensor_parallel_size": ("--tp-size",),
        "pipeline_parallel_size": ("--pp-size",),
        "data_parallel_size": ("--dp-size",),
        "max_model_len": ("--context-length",),
        "gpu_memory_utilization": ("--mem-fraction-static",),
        "max_num_seqs": ("--max-running-requests",),
        "kv_cache_dtype": ("--kv-cache-dtype",),
        "dtype": ("--dtype",),
        "quantization": ("--quantization",),
        "trust_remote_code": ("--trust-remote-code",),
        "tool_call_parser": ("--tool-call-parser",),
        "reasoning_parser": ("--reasoning-parser",),
        "chat_template": ("--chat-template",),
        "api_key": ("--api-key",),
    }

    # /health answers 503 until the first warm-up request went through, then 200
    # (python/sglang/srt/entrypoints/http_server.py health()).
    def classify_health(self, status: int, body: bytes) -> tuple[HealthState, str]:
        if status == 503:
            return "starting", "server is warming up (HTTP 503)"
        return super().classify_health(status, body)

    # Parser names from python/sglang/srt/function_call/ and python/sglang/srt/parser/reasoning_parser.py.
    family_defaults = (
        FamilyDefault("qwen3", {"--reasoning-parser": "qwen3", "--tool-call-parser": "qwen25"}),
        FamilyDefault("qwen3-coder", {"--tool-call-parser": "qwen3_coder"}),
        FamilyDefault("deepseek-r1", {"--reasoning-parser": "deepseek-r1"}),
        FamilyDefault("deepseek-v3", {"--tool-call-parser": "deepseekv3"}),
        FamilyDefault("kimi-k2", {"--tool-call-parser": "kimi_k2"}),
        FamilyDefault("glm-4.5", {"--tool-call-parser": "glm45", "--reasoning-parser": "glm45"}),
        FamilyDefault("gpt-oss", {"--tool-call-parser": "gpt-oss", "--reasoning-parser": "gpt-oss"}),
    )


SPEC = SglangSpec()
