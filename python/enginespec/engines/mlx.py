"""MLX: ``mlx_lm.server`` (console script and module) and ``mlx_lm server``."""

from __future__ import annotations

import sys

from enginespec.definition import Flags, Launch, Package, Serving
from enginespec.signature import LaunchForm, Signature
from enginespec.spec import EngineSpec

SIGNATURE = Signature(
    engine="mlx",
    launch_forms=(
        LaunchForm(executables=("mlx_lm.server",), modules=("mlx_lm.server",)),
        # mlx_lm/cli.py dispatches `mlx_lm server ...` (also `python -m mlx_lm server`).
        LaunchForm(executables=("mlx_lm",), modules=("mlx_lm",), subcommand=("server",)),
    ),
    # mlx_lm/server.py: `--draft-model` and `--adapter-path` are other models, not the one served.
    model_flags=("--model",),
    host_flags=("--host",),
    port_flags=("--port",),
    exit_flags=frozenset({"-h", "--help"}),
    abbreviations=True,
    fold_workers=True,
    default_host="127.0.0.1",
    default_port=8080,
)


class MlxSpec(EngineSpec):
    def requirement(self, version: str | None = None) -> str:
        # On Linux plain `mlx-lm` brings no `mlx` (and plain `mlx` lacks libmlx.so): the CPU build
        # comes with the `cpu` extra.
        requirement = super().requirement(version)
        if sys.platform.startswith("linux"):
            return requirement.replace("mlx-lm", "mlx-lm[cpu]", 1)
        return requirement


SPEC = MlxSpec(
    id="mlx",
    signature=SIGNATURE,
    launch=Launch(kind="console_script", executable="mlx_lm.server", module_args=("-m", "mlx_lm.server")),
    flags=Flags(
        fields={
            "max_num_seqs": ("--decode-concurrency",),
            "trust_remote_code": ("--trust-remote-code",),
            "chat_template": ("--chat-template",),
        }
    ),
    package=Package(distributions=("mlx-lm",)),
    # mlx_lm/server.py answers /health 200 while the model is still loading, and 503
    # {"status": "unavailable"} when loading failed (the process stays up): readiness is /v1/models.
    serving=Serving(readiness_needs_models=True),
)
