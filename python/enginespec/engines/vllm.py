"""vLLM: ``vllm serve`` and the OpenAI-compatible ``api_server`` module."""

from __future__ import annotations

from enginespec.signature import LaunchForm, Signature

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
        {"--served-model-name", "--lora-modules", "--prompt-adapters", "--cuda-graph-sizes", "--middleware"}
    ),
    exit_flags=frozenset({"-h", "--help", "--version"}),
    # vLLM binds every interface when --host is not given.
    default_host="0.0.0.0",
    default_port=8000,
)
