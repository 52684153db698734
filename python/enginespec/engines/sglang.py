"""SGLang: ``python -m sglang.launch_server`` and the ``sglang serve`` console script."""

from __future__ import annotations

from enginespec.signature import LaunchForm, Signature

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
    default_host="127.0.0.1",
    default_port=30000,
)
