"""NVIDIA TensorRT-LLM: ``trtllm-serve [serve] MODEL``.

No release could be pinned: the facts are from tensorrt_llm/commands/serve.py at commit
``00209af1`` and tensorrt_llm/serve/openai_server.py at ``00057725`` (NVIDIA/TensorRT-LLM).
"""

from __future__ import annotations

import enginespec.engines._libraries as _libraries
from enginespec.definition.records import Flags, HealthRule, Launch, Package, Serving, Settings
from enginespec.definition.signature import LaunchForm, Signature
from enginespec.failures import FailurePattern, Failures
from enginespec.spec import EngineSpec

# Commands of the `trtllm-serve` click group (`main = DefaultGroup(..., default="serve")`).
_COMMANDS = ("serve", "grpc", "disaggregated", "disaggregated_mpi_worker", "mm_embedding_serve")

SIGNATURE = Signature(
    engine="trtllm",
    launch_forms=(
        LaunchForm(
            executables=("trtllm-serve",),
            modules=("tensorrt_llm.commands.serve",),
            subcommand=("serve",),
            positional_model=True,
        ),
        # The OpenAI server of a multimodal encoder (serve_encoder): same MODEL, --host, --port.
        LaunchForm(
            executables=("trtllm-serve",),
            modules=("tensorrt_llm.commands.serve",),
            subcommand=("mm_embedding_serve",),
            positional_model=True,
        ),
        # `grpc MODEL` serves pre-tokenized gRPC requests to an external router, no HTTP API;
        # `disaggregated_mpi_worker -c CFG` is one MPI rank of a disaggregated deployment started by
        # its leader (`_launch_disaggregated_leader`): both are workers of something else.
        LaunchForm(
            executables=("trtllm-serve",),
            modules=("tensorrt_llm.commands.serve",),
            subcommand=("grpc",),
            positional_model=True,
            role="follower",
        ),
        # Its leader rank Popens `python3 sys.argv[0] disaggregated_mpi_worker -c CFG --log_level L`
        # with TLLM_DISAGG_RUN_REMOTE_MPI_SESSION_CLIENT=1, and that child is the instance's HTTP
        # server (launch_server on the config's hostname/port) while the leader serves MPI work
        # (`_launch_disaggregated_leader`): Settings.server_environment tells them apart.
        LaunchForm(
            executables=("trtllm-serve",),
            modules=("tensorrt_llm.commands.serve",),
            subcommand=("disaggregated_mpi_worker",),
            role="follower",
        ),
        # DefaultGroup: a first argument that is no command means `serve`, so `trtllm-serve MODEL`
        # is `trtllm-serve serve MODEL`. `disaggregated -c CFG` is the router of a disaggregated
        # deployment: it holds no model and is not matched at all.
        LaunchForm(
            executables=("trtllm-serve",),
            modules=("tensorrt_llm.commands.serve",),
            other_subcommands=_COMMANDS,
            positional_model=True,
        ),
        # `trtllm-llmapi-launch` (a bash script) runs ranks > 0 of a multi-node LLM API job as this
        # module: MPI workers with no HTTP API (tensorrt_llm/llmapi/trtllm-llmapi-launch).
        LaunchForm(modules=("tensorrt_llm.llmapi.mgmn_worker_node",), role="follower"),
        # On rank 0 it runs the command given (`trtllm-serve ...`: the HTTP server) in the
        # background and this module in the foreground: the MPI comm server that hands the LLM's
        # work to the other ranks, a follower. When the command ends it runs this module with
        # `--action stop`, which only asks that server to stop (click Choice start|stop,
        # tensorrt_llm/llmapi/mgmn_leader_node.py): see exit_values.
        LaunchForm(modules=("tensorrt_llm.llmapi.mgmn_leader_node",), role="follower"),
    ),
    # click: option names are exactly as declared (with underscores), no prefix matching.
    aliases={
        "--tp_size": "--tensor_parallel_size",
        "--pp_size": "--pipeline_parallel_size",
        "--cp_size": "--context_parallel_size",
        "--ep_size": "--moe_expert_parallel_size",
        "--cluster_size": "--moe_cluster_parallel_size",
        "--kv_cache_free_gpu_memory_fraction": "--free_gpu_memory_fraction",
        "--extra_llm_api_options": "--config",
    },
    host_flags=("--host",),
    port_flags=("--port",),
    # click `is_flag=True` options of `serve`; --custom_module_dirs is `multiple=True`, which click
    # spells as a repeated option, one value each.
    no_value_flags=frozenset(
        {"--trust_remote_code", "--fail_fast_on_attention_window_too_large", "--enable_chunked_prefill"}
    ),
    # no --version option on the group or on `serve`: only --help exits
    exit_flags=frozenset({"--help"}),
    exit_values={"--action": ("stop",)},
    # The LLM's MPI workers are its children, and a disaggregated_mpi_worker leader re-runs itself
    # as a child (`_launch_disaggregated_leader`): folded into the process that started them.
    fold_workers=True,
    default_host="localhost",
    default_port=8000,
)


# TensorRT's and TensorRT-LLM's own words for an allocation that failed, before PyTorch's and
# the rest: TensorRT's logger (`[TRT] [E] ... Error Code 2: OutOfMemory (Requested size was N
# bytes.)`, `Error Code 1: Cuda Runtime (out of memory)`, `Requested amount of GPU memory (N bytes)
# could not be allocated`, as TensorRT-LLM 0.12 to 0.14 print them), then `Failed to deserialize
# cuda engine` (its consequence, unrecognised) and the C++ stack. TensorRT's library is closed
# source: these are seen in logs only (https://github.com/guidance-ai/llgtrt/issues/7).
FAILURES = (
    Failures(
        patterns=(
            FailurePattern(
                kind="gpu_oom",
                pattern=r"Error Code \d+: OutOfMemory \(Requested size was (?P<requested>\d+ bytes)\.?\)",
            ),
            FailurePattern(
                kind="gpu_oom",
                pattern=r"Requested amount of GPU memory \((?P<requested>\d+ bytes)\) could not be allocated",
            ),
            FailurePattern(kind="gpu_oom", pattern=r"Error Code \d+: Cuda Runtime \(out of memory\)"),
            # cpp/tensorrt_llm/runtime/tllmRuntime.cpp TllmRuntime (at NVIDIA/TensorRT-LLM
            # 0165bd7a): `TLLM_CHECK_WITH_INFO(mEngine != nullptr, "Failed to deserialize cuda
            # engine.")`: TensorRT cannot read the engine file (built by another TensorRT(-LLM)
            # version or for another GPU)
            # The runtime reading the engine's config.json with nlohmann/json (`[json.exception.
            # out_of_range.403] key 'X' not found`, nlohmann's exception 403): a key this
            # runtime needs that the engine's builder did not write (another TensorRT-LLM
            # version's engine); seen in logs under Triton's backend only
            FailurePattern(
                kind="corrupt_model",
                pattern=r"\[json\.exception\.out_of_range\.403\] key '[^']*' not found",
                hint="the engine was built by another TensorRT-LLM version: rebuild it with the "
                "TensorRT-LLM that serves it",
            ),
            FailurePattern(
                kind="corrupt_model",
                pattern=r"Failed to deserialize cuda engine",
                hint="the engine was built by another TensorRT-LLM version or for another GPU: rebuild it "
                "with the TensorRT-LLM that serves it",
            ),
            # The PyTorch backend's executor creation, with the memory it saw on the lines after
            # (seen in logs only: https://github.com/NVIDIA/TensorRT-LLM/issues/5872)
            FailurePattern(
                kind="gpu_oom",
                pattern=r"Executor creation failed due to insufficient GPU memory",
                hint="the GPU has too little free memory for the model and its KV cache: lower "
                "kv_cache_config.free_gpu_memory_fraction or max_batch_size / max_num_tokens, or add GPUs",
            ),
            FailurePattern(
                kind="gpu_oom", role="context", pattern=r"Total GPU memory \(GiB\): (?P<total_gib>[\d.]+)"
            ),
            FailurePattern(
                kind="gpu_oom",
                role="context",
                pattern=r"Free GPU memory before component creation attempt \(GiB\): (?P<free_gib>[\d.]+)",
            ),
        )
    )
    + _libraries.PYTHON_SERVER
)

SPEC = EngineSpec(
    id="trtllm",
    aliases=("tensorrt-llm", "tensorrt_llm", "trtllm-serve"),
    signature=SIGNATURE,
    launch=Launch(
        kind="console_script",
        executable="trtllm-serve",
        args=("serve",),
        module_args=("-m", "tensorrt_llm.commands.serve", "serve"),
    ),
    flags=Flags(
        fields={
            "tensor_parallel_size": ("--tensor_parallel_size",),
            "pipeline_parallel_size": ("--pipeline_parallel_size",),
            "max_model_len": ("--max_seq_len",),
            # the share of free GPU memory the KV cache takes once the weights are loaded
            "gpu_memory_utilization": ("--free_gpu_memory_fraction",),
            "max_num_seqs": ("--max_batch_size",),
            "trust_remote_code": ("--trust_remote_code",),
            "tool_call_parser": ("--tool_parser",),
            "reasoning_parser": ("--reasoning_parser",),
            "chat_template": ("--chat_template",),
        },
        list_style="repeat",
    ),
    # PyPI `tensorrt-llm` is a stub sdist that fetches NVIDIA's CUDA wheel at install time; the
    # engine needs an NVIDIA GPU (get_llm_args raises "No GPU devices found on the node").
    package=Package(distributions=("tensorrt-llm",), accelerator="cuda"),
    # `--config FILE.yaml` (alias --extra_llm_api_options) holds LLM API arguments, not flag names,
    # so it is not read as a flag file (Settings.config_flag).
    # launch_server binds the socket (without listening), builds the LLM, then serves on it, so
    # connections are refused while loading. GET /health is 200 with an empty body, or 503 with
    # the text "LLM is unavailable. ..." once the executor died (openai_server.py `health`).
    serving=Serving(
        health_rules=(
            HealthRule(status=503, state="unhealthy", reason="the LLM executor is unavailable (HTTP 503)"),
        )
    ),
    settings=Settings(server_environment={"TLLM_DISAGG_RUN_REMOTE_MPI_SESSION_CLIENT": "1"}),
    failures=FAILURES,
)
