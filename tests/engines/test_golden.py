"""Golden tests: each engine's launch forms, argv conventions and look-alikes."""

from __future__ import annotations

import pytest

import enginespec
from enginespec import Invocation, parse_argv
from helpers.facts import argv_facts

VENV_PY = "/srv/venv/bin/python3"


SERVERS: list[tuple[list[str], tuple[object, ...]]] = [
    # vLLM
    (["vllm", "serve", "m/a"], ("vllm", "m/a", (), None, None)),
    ([VENV_PY, "/srv/venv/bin/vllm", "serve", "m/a", "--port", "8001"], ("vllm", "m/a", (), None, 8001)),
    (
        ["python3", "-m", "vllm.entrypoints.cli.main", "serve", "m/a", "--host=::1"],
        ("vllm", "m/a", (), "::1", None),
    ),
    (
        ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m/a", "--port=9000"],
        ("vllm", "m/a", (), None, 9000),
    ),
    # positional after options, also after a flag that takes no value
    (["vllm", "serve", "--host", "0.0.0.0", "/models/a"], ("vllm", "/models/a", (), "0.0.0.0", None)),
    (["vllm", "serve", "--trust-remote-code", "/models/a"], ("vllm", "/models/a", (), None, None)),
    (["vllm", "serve", "--no-enable-prefix-caching", "/models/a"], ("vllm", "/models/a", (), None, None)),
    # the positional model wins over --model (vllm/entrypoints/cli/serve.py)
    (["vllm", "serve", "pos", "--model", "flag"], ("vllm", "pos", (), None, None)),
    # several served names; `_` and `-` alike
    (
        ["vllm", "serve", "m", "--served_model_name", "a", "b", "--max_model_len", "8192", "--port", "1"],
        ("vllm", "m", ("a", "b"), None, 1),
    ),
    (["vllm", "serve", "--config", "cfg.yaml"], ("vllm", None, (), None, None)),
    (["vllm", "serve", "m", "--uds", "/tmp/v.sock"], ("vllm", "m", (), None, None)),
    # SGLang
    (
        ["python3", "-m", "sglang.launch_server", "--model-path", "q/w", "--port", "30001"],
        ("sglang", "q/w", (), None, 30001),
    ),
    (["python", "-m", "sglang.launch_server", "--model", "q/w"], ("sglang", "q/w", (), None, None)),
    # SGLang's argparse does not read `_` as `-` (0.5.23: "--model_path" is unrecognised): no model
    (["python", "-m", "sglang.launch_server", "--model_path", "q/w"], ("sglang", None, (), None, None)),
    # llama.cpp does (0c1e57098, common_params_parse_ex)
    (["llama-server", "--ctx_size", "4096", "--model", "m.gguf"], ("llamacpp", "m.gguf", (), None, None)),
    (
        ["sglang", "serve", "--model-path", "q/w", "--served-model-name", "n", "--host", "0.0.0.0"],
        ("sglang", "q/w", ("n",), "0.0.0.0", None),
    ),
    (
        ["python", "-m", "sglang.launch_server", "--model-path", "q", "--dist-init-addr", "10.0.0.1:5000"],
        ("sglang", "q", (), None, None),
    ),
    (["python", "-m", "sglang.launch_server", "--config", "c.yaml"], ("sglang", None, (), None, None)),
    # llama.cpp
    (["llama-server", "-m", "a.gguf", "--port", "8081"], ("llamacpp", "a.gguf", (), None, 8081)),
    (["./llama-server", "--model=a.gguf", "-a", "x,y"], ("llamacpp", "a.gguf", ("x", "y"), None, None)),
    (["llama-server", "-hf", "org/repo:Q4_K_M"], ("llamacpp", "org/repo:Q4_K_M", (), None, None)),
    (["llama-server", "--hf-repo", "org/repo"], ("llamacpp", "org/repo", (), None, None)),
    (
        ["llama-server", "-m", "a.gguf", "-md", "draft.gguf", "--mmproj", "p.gguf", "-ngl", "-1"],
        ("llamacpp", "a.gguf", (), None, None),
    ),
    (["llama-server", "--models-dir", "./models"], ("llamacpp", None, (), None, None)),
    (["llama-server", "--rpc", "10.0.0.2:50052", "-m", "a"], ("llamacpp", "a", (), None, None)),
    (["C:\\llama\\llama-server.exe", "-m", "a"], ("llamacpp", "a", (), None, None)),
    # MLX
    (["mlx_lm.server", "--model", "mlx/a"], ("mlx", "mlx/a", (), None, None)),
    (
        ["python", "-m", "mlx_lm.server", "--model", "mlx/a", "--port", "8083"],
        ("mlx", "mlx/a", (), None, 8083),
    ),
    (["python", "-m", "mlx_lm", "server", "--model", "mlx/a"], ("mlx", "mlx/a", (), None, None)),
    ([VENV_PY, "/srv/venv/bin/mlx_lm.server", "--model", "mlx/a"], ("mlx", "mlx/a", (), None, None)),
    (
        ["python", "-m", "mlx_lm.server", "--draft-model", "d", "--adapter-path", "ad", "--model", "m"],
        ("mlx", "m", (), None, None),
    ),
    (["python", "-m", "mlx_lm.server", "--draft-model", "d"], ("mlx", None, (), None, None)),
]

NOT_SERVERS: list[list[str]] = [
    ["grep", "llama-server"],
    ["tail", "-f", "llama-server.log"],
    ["pip", "install", "vllm"],
    ["uv", "pip", "install", "sglang"],
    ["vllm", "bench", "serve", "--model", "m"],
    ["vllm", "chat"],
    ["vllm", "complete"],
    ["vllm", "run-batch", "-i", "x"],
    ["vllm", "collect-env"],
    ["vllm", "--version"],
    ["vllm", "serve", "--help"],
    ["vllm", "serve", "--help=all"],
    ["vllm", "serve", "m", "-h"],
    [VENV_PY, "/srv/venv/bin/vllm", "serve", "--version"],
    ["python", "-m", "sglang.bench_serving", "--backend", "sglang"],
    ["python", "-m", "sglang.check_env"],
    ["python", "-m", "sglang.launch_server", "--help"],
    ["llama-cli", "-m", "a.gguf"],
    ["llama-bench", "-m", "a.gguf"],
    ["llama-server", "--version"],
    ["llama-server", "--list-devices"],
    ["mlx_lm.generate", "--model", "m"],
    ["python", "-m", "mlx_lm", "generate", "--model", "m"],
    ["python", "-m", "mlx_lm.server", "--help"],
    ["vim", "/opt/llama.cpp/tools/server/README.md"],
    ["less", "/srv/venv/bin/vllm"],
    ["nano", "llama-server"],
    ["python", "-c", "import vllm"],
    ["python", "/srv/venv/bin/vllm"],
    ["python", "-m"],
    ["python"],
    ["/bin/sh", "-c", "vllm serve m"],
    ["docker", "run", "vllm/vllm-openai", "--model", "m"],
    ["ollama", "serve", "--timeout", "600"],
    ["python-config", "-m", "vllm.entrypoints.openai.api_server"],
    [],
    [""],
]


@pytest.mark.parametrize(
    ("argv", "expected"), SERVERS, ids=lambda v: " ".join(v) if isinstance(v, list) else ""
)
def test_servers(argv: list[str], expected: tuple[object, ...]) -> None:
    assert argv_facts(argv, role=False) == expected


@pytest.mark.parametrize("argv", NOT_SERVERS, ids=lambda v: " ".join(v) or "<empty>")
def test_not_servers(argv: list[str]) -> None:
    assert parse_argv(argv) is None
    assert enginespec.detect_engine(argv) is None


def test_effective_defaults() -> None:
    defaults = {
        "vllm": ["vllm", "serve", "m"],
        "sglang": ["python", "-m", "sglang.launch_server", "--model-path", "m"],
        "llamacpp": ["llama-server", "-m", "m"],
        "mlx": ["mlx_lm.server", "--model", "m"],
    }
    got = {}
    for engine, argv in defaults.items():
        inv = parse_argv(argv)
        assert inv is not None
        assert inv.host is None
        assert inv.port is None
        got[engine] = (inv.effective_host, inv.effective_port)
    assert got == {
        "vllm": ("0.0.0.0", 8000),
        "sglang": ("127.0.0.1", 30000),
        "llamacpp": ("127.0.0.1", 8080),
        "mlx": ("127.0.0.1", 8080),
    }
    inv = parse_argv(["llama-server", "-m", "m", "--host", "10.1.2.3", "--port", "9"])
    assert inv is not None
    assert (inv.effective_host, inv.effective_port) == ("10.1.2.3", 9)


def test_invocation_model() -> None:
    inv = parse_argv(["vllm", "serve", "m", "--served-model-name", "a", "b"])
    assert isinstance(inv, Invocation)
    assert inv.served_model_name == "a"
    assert inv.model_dump()["served_model_name"] == "a"
    with pytest.raises(Exception, match="frozen"):
        inv.model = "x"  # type: ignore[misc]
    assert parse_argv(["vllm", "serve", "m"]).served_model_name is None  # type: ignore[union-attr]


def test_port_must_be_a_port() -> None:
    for bad in ("$PORT", "80a", "65536", "-1", "", "+80", " 80"):
        inv = parse_argv(["llama-server", "-m", "m", "--port", bad])
        assert inv is not None
        assert inv.port is None
        # an invalid port is not the default port: unknown, and said so
        assert inv.effective_port is None
        assert inv.problems == (f"port '{bad}' is not a port number (1-65535)",)


def test_single_string_is_refused() -> None:
    with pytest.raises(TypeError, match="sequence of strings"):
        parse_argv("vllm serve m")  # type: ignore[arg-type]
