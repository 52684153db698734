"""llama.cpp's ``llama-server``."""

from __future__ import annotations

from enginespec.signature import LaunchForm, Signature

SIGNATURE = Signature(
    engine="llamacpp",
    launch_forms=(LaunchForm(executables=("llama-server",)),),
    # common/arg.cpp: short and long spellings of the same option. `-md`/`--model-draft`,
    # `-hfd`, `-mm`/`--mmproj` are other models and are deliberately absent.
    aliases={
        "-m": "--model",
        "-hf": "--hf-repo",
        "-hfr": "--hf-repo",
        "-dr": "--docker-repo",
        "-mu": "--model-url",
        "-a": "--alias",
    },
    model_flags=("--model", "--hf-repo", "--docker-repo", "--model-url"),
    served_name_flags=("--alias",),
    # `--alias a,b` gives the model several names (tools/server/server.cpp splits on commas).
    served_name_separator=",",
    host_flags=("--host",),
    port_flags=("--port",),
    exit_flags=frozenset(
        {"-h", "--help", "--usage", "--version", "--license", "--list-devices", "--completion-bash"}
    ),
    default_host="127.0.0.1",
    default_port=8080,
)
