"""TGI, LMDeploy, TensorRT-LLM, Aphrodite and mlx-vlm on the active backend: launch forms and
look-alikes, commands from a Recipe, health against real loopback servers, install and version,
and scans of real processes with the exact argv."""

from __future__ import annotations

import json
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from enginespec import (
    CommandError,
    Config,
    InstallError,
    InstallOptions,
    Recipe,
    Scanner,
    get_engine_spec,
    parse_argv,
    redact_argv,
)
from enginespec._host.hardware import host_accelerator
from enginespec.errors import InstallOptionsError
from enginespec.health.checks import check_health
from helpers.facts import argv_facts
from helpers.fakeserver import Answer, bound_socket, models, serving
from helpers.procs import Procs, children_of, wait_for

VENV_PY = "/srv/venv/bin/python3"
CONFIG = Config(data_dir=Path("/nonexistent/enginespec-engines-a"))
ENGINES = ("tgi", "lmdeploy", "trtllm", "aphrodite", "mlx-vlm")


@pytest.fixture(autouse=True)
def _no_settings_inherited(monkeypatch: pytest.MonkeyPatch) -> None:
    # The engines read these from their environment (TGI's clap `env` twins; Docker exports HOSTNAME
    # in every container): processes started here must not inherit the test runner's.
    for name in ("MODEL_ID", "HOSTNAME", "PORT", "API_KEY", "MLX_VLM_PRELOAD_MODEL"):
        monkeypatch.delenv(name, raising=False)


SERVERS: list[tuple[list[str], tuple[Any, ...]]] = [
    # TGI. clap gives `-p` to the first option that claims it, --port (clap_builder MKeyMap::get).
    (
        ["text-generation-launcher", "--model-id", "m/a", "-p", "8080"],
        ("tgi", "m/a", (), None, 8080, "server"),
    ),
    (
        ["/usr/local/bin/text-generation-launcher", "--model-id=m/a", "--hostname", "::", "--port=81"],
        ("tgi", "m/a", (), "::", 81, "server"),
    ),
    (
        ["text-generation-launcher", "--trust-remote-code", "--json-output", "--model-id", "/data/m"],
        ("tgi", "/data/m", (), None, None, "server"),
    ),
    (
        ["text-generation-launcher", "--model-id", "m", "--sharded", "true", "--num-shard", "2", "-e"],
        ("tgi", "m", (), None, None, "server"),
    ),
    # clap also takes `-p8080`; short flags are never taken for a missing value
    (["text-generation-launcher", "-p8080", "--model-id", "m"], ("tgi", "m", (), None, None, "server")),
    # clap reads no `_` as `-`: --model_id is no option of the launcher's (it would refuse it)
    (["text-generation-launcher", "--model_id", "m"], ("tgi", None, (), None, None, "server")),
    (
        ["text-generation-router-llamacpp", "--model-id", "q/w", "--model-gguf", "q.gguf", "--port", "3001"],
        ("tgi", "q/w", (), None, 3001, "server"),
    ),
    # LMDeploy
    (
        ["lmdeploy", "serve", "api_server", "internlm/x", "--server-port", "23334", "--model-name", "x"],
        ("lmdeploy", "internlm/x", ("x",), None, 23334, "server"),
    ),
    (
        [VENV_PY, "/srv/venv/bin/lmdeploy", "serve", "api_server", "--tp", "2", "/m/a"],
        ("lmdeploy", "/m/a", (), None, None, "server"),
    ),
    (
        ["lmdeploy", "serve", "api_server", "--trust-remote-code", "--enable-prefix-caching", "/m/a"],
        ("lmdeploy", "/m/a", (), None, None, "server"),
    ),
    # lmdeploy's FlexibleArgumentParser reads `_` as `-`
    (
        [
            "python3",
            "-m",
            "lmdeploy",
            "serve",
            "api_server",
            "/m/a",
            "--server_name",
            "127.0.0.1",
            "--server_port=9",
        ],
        ("lmdeploy", "/m/a", (), "127.0.0.1", 9, "server"),
    ),
    (
        ["lmdeploy", "serve", "api_server", "/m/a", "--api-keys", "k1", "k2", "--model-name", "n"],
        ("lmdeploy", "/m/a", ("n",), None, None, "server"),
    ),
    # TensorRT-LLM: `serve` is click's default command
    (["trtllm-serve", "m/a"], ("trtllm", "m/a", (), None, None, "server")),
    (
        ["trtllm-serve", "serve", "m/a", "--host", "0.0.0.0", "--port", "8001"],
        ("trtllm", "m/a", (), "0.0.0.0", 8001, "server"),
    ),
    (
        ["python3", "-m", "tensorrt_llm.commands.serve", "serve", "/engine", "--tp_size", "2"],
        ("trtllm", "/engine", (), None, None, "server"),
    ),
    (
        ["trtllm-serve", "m/a", "--trust_remote_code", "--backend", "pytorch", "--port", "9"],
        ("trtllm", "m/a", (), None, 9, "server"),
    ),
    (["trtllm-serve", "mm_embedding_serve", "m/v"], ("trtllm", "m/v", (), None, None, "server")),
    # a model directory named like no command is still the model
    (["trtllm-serve", "./serve"], ("trtllm", "./serve", (), None, None, "server")),
    (["trtllm-serve", "grpc", "m/a", "--port", "50051"], ("trtllm", "m/a", (), None, 50051, "follower")),
    (
        ["trtllm-serve", "disaggregated_mpi_worker", "-c", "cfg.yaml"],
        ("trtllm", None, (), None, None, "follower"),
    ),
    (["python3", "-m", "tensorrt_llm.llmapi.mgmn_worker_node"], ("trtllm", None, (), None, None, "follower")),
    # rank 0's MPI comm server beside the HTTP server (tensorrt_llm/llmapi/trtllm-llmapi-launch)
    (["python3", "-m", "tensorrt_llm.llmapi.mgmn_leader_node"], ("trtllm", None, (), None, None, "follower")),
    # Aphrodite
    (
        [VENV_PY, "/srv/venv/bin/aphrodite", "run", "m/a", "--port", "2243"],
        ("aphrodite", "m/a", (), None, 2243, "server"),
    ),
    (
        ["aphrodite", "serve", "m/a", "--served-model-name", "a", "b", "--max_model_len", "4096"],
        ("aphrodite", "m/a", ("a", "b"), None, None, "server"),
    ),
    (["aphrodite", "run", "--enforce-eager", "/m/a"], ("aphrodite", "/m/a", (), None, None, "server")),
    (
        ["aphrodite", "run", "--no-enable-prefix-caching", "/m/a"],
        ("aphrodite", "/m/a", (), None, None, "server"),
    ),
    (["aphrodite", "run", "pos", "--model", "flag"], ("aphrodite", "pos", (), None, None, "server")),
    # its no-value flags are vLLM's: a short spelling, an EnableDisableAction inverse, a dropped flag
    (["aphrodite", "run", "-ep", "/m/a"], ("aphrodite", "/m/a", (), None, None, "server")),
    (
        ["aphrodite", "run", "--disable-chunked-prefill", "/m/a"],
        ("aphrodite", "/m/a", (), None, None, "server"),
    ),
    (["aphrodite", "run", "--enable-lora-bias", "/m/a"], ("aphrodite", "/m/a", (), None, None, "server")),
    (["aphrodite", "run", "m", "--headless", "-dp", "2"], ("aphrodite", "m", (), None, None, "follower")),
    (
        ["python3", "-m", "aphrodite.entrypoints.openai.api_server", "--model", "m", "--host", "::1"],
        ("aphrodite", "m", (), "::1", None, "server"),
    ),
    (
        ["python3", "-m", "aphrodite.endpoints.openai.api_server", "--model", "m", "--launch-kobold-api"],
        ("aphrodite", "m", (), None, None, "server"),
    ),
    # mlx-vlm
    (
        ["mlx_vlm.server", "--model", "mlx-community/x"],
        ("mlx-vlm", "mlx-community/x", (), None, None, "server"),
    ),
    (
        ["python", "-m", "mlx_vlm.server", "--port", "8081", "--host", "127.0.0.1"],
        ("mlx-vlm", None, (), "127.0.0.1", 8081, "server"),
    ),
    (
        [
            "mlx_vlm.server",
            "--trust-remote-code",
            "--model",
            "m",
            "--draft-model",
            "d",
            "--adapter-path",
            "a",
        ],
        ("mlx-vlm", "m", (), None, None, "server"),
    ),
]

LOOK_ALIKES: list[list[str]] = [
    ["text-generation-launcher", "--help"],
    ["text-generation-launcher", "-V"],
    # clap refuses an option without its value: "a value is required for '--port <PORT>'"
    ["text-generation-launcher", "--model-id"],
    ["text-generation-launcher", "--model-id", "m", "--port"],
    ["text-generation-launcher", "--quantize", "--model-id", "m"],
    ["text-generation-benchmark", "--tokenizer-name", "m"],
    # the launcher's children, never engines of their own
    ["text-generation-router", "--hostname", "0.0.0.0", "--port", "3000", "--tokenizer-name", "m"],
    ["text-generation-server", "serve", "m", "--uds-path", "/tmp/text-generation-server"],
    ["text-generation-server", "download-weights", "m"],
    # the image's entrypoint before it execs the launcher
    ["/bin/bash", "/tgi-entrypoint.sh", "--model-id", "m"],
    ["lmdeploy", "chat", "internlm/x"],
    ["lmdeploy", "serve", "gradio", "http://localhost:23333"],
    ["lmdeploy", "serve", "proxy", "--server-port", "8000"],
    ["lmdeploy", "serve", "api_client", "http://localhost:23333"],
    ["lmdeploy", "lite", "auto_awq", "/m/a", "--work-dir", "/m/b"],
    ["lmdeploy", "serve", "api_server", "/m/a", "--help"],
    ["lmdeploy", "-v"],
    ["lmdeploy", "check_env"],
    ["trtllm-serve", "disaggregated", "-c", "disagg.yaml"],
    ["trtllm-serve", "--help"],
    ["trtllm-serve", "m/a", "--help"],
    ["trtllm-build", "--checkpoint_dir", "/c", "--output_dir", "/e"],
    ["trtllm-bench", "--model", "m", "throughput"],
    # the comm server asked to stop (trtllm-llmapi-launch, after its task ends)
    ["python3", "-m", "tensorrt_llm.llmapi.mgmn_leader_node", "--action", "stop"],
    ["aphrodite", "--version"],
    ["aphrodite", "run", "m", "-h"],
    ["aphrodite", "run-batch", "-i", "in.jsonl", "-o", "out.jsonl", "--model", "m"],
    ["pkill", "-if", "aphrodite run"],
    ["mlx_vlm.generate", "--model", "m", "--image", "x.jpg"],
    ["python", "-m", "mlx_vlm.generate", "--model", "m"],
    ["mlx_vlm.chat_ui", "--model", "m"],
    ["mlx_vlm.server", "--help"],
]


@pytest.mark.parametrize(
    ("argv", "facts"), SERVERS, ids=lambda v: " ".join(v)[:60] if isinstance(v, list) else ""
)
def test_launch_forms(argv: list[str], facts: tuple[Any, ...]) -> None:
    assert argv_facts(argv) == facts


@pytest.mark.parametrize("argv", LOOK_ALIKES, ids=lambda v: " ".join(v)[:60])
def test_look_alikes_are_not_servers(argv: list[str]) -> None:
    assert parse_argv(argv) is None


def test_every_engine_has_golden_forms_and_look_alikes() -> None:
    assert {facts[0] for _, facts in SERVERS} == set(ENGINES)


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (
            ["lmdeploy", "serve", "api_server", "/m", "--api-keys", "k1", "k2", "--model-name", "n"],
            ["lmdeploy", "serve", "api_server", "/m", "--api-keys", "***", "***", "--model-name", "n"],
        ),
        (
            ["text-generation-launcher", "--api-key", "sk", "--ngrok-authtoken", "tok", "--port", "1"],
            ["text-generation-launcher", "--api-key", "***", "--ngrok-authtoken", "***", "--port", "1"],
        ),
        (
            ["aphrodite", "run", "m", "--api-key", "a", "b", "--hf-token", "h"],
            ["aphrodite", "run", "m", "--api-key", "***", "***", "--hf-token", "***"],
        ),
        (
            ["mlx_vlm.server", "--api-key=zz", "--port", "1"],
            ["mlx_vlm.server", "--api-key=***", "--port", "1"],
        ),
    ],
)
def test_secret_flags_are_masked(argv: list[str], shown: list[str]) -> None:
    assert redact_argv(argv) == shown


def _recipe(engine: str, **fields: Any) -> Recipe:
    return Recipe(engine=engine, model_path="/models/some model", host="127.0.0.1", port=8123, **fields)


@pytest.mark.parametrize("engine", ENGINES)
def test_recipe_round_trips_through_the_command(engine: str) -> None:
    spec = get_engine_spec(engine)
    recipe = _recipe(
        engine, served_model_name="alias", max_num_seqs=8, trust_remote_code=True, api_key="sk-rt"
    )
    command = spec.plan(recipe, CONFIG)
    inv = parse_argv(list(command.argv))
    assert inv is not None, command.argv
    assert (inv.engine, inv.model, inv.host, inv.port, inv.role) == (
        engine,
        "/models/some model",
        "127.0.0.1",
        8123,
        "server",
    )
    if spec.signature.served_name_flags:
        assert inv.served_model_names == ("alias",)
    else:
        # TGI, TensorRT-LLM and mlx-vlm have no served-name flag: dropped with a warning
        assert inv.served_model_names == ()
        assert any("served_model_name" in warning for warning in command.warnings)
    if spec.serving.api_key_flag:
        assert command.argv[command.argv.index(spec.serving.api_key_flag) + 1] == "sk-rt"
    else:
        # TensorRT-LLM's trtllm-serve takes no API key
        assert "sk-rt" not in command.argv
        assert any("api_key=***" in warning for warning in command.warnings)
    assert "sk-rt" not in command.shell()


def test_commands_start_the_server_form() -> None:
    model = "/models/some model"

    def before_model(engine: str, count: int) -> list[str]:
        argv = get_engine_spec(engine).build_command(_recipe(engine), CONFIG)
        return argv[argv.index(model) - count : argv.index(model)]

    assert before_model("tgi", 1) == ["--model-id"]
    assert before_model("lmdeploy", 2) == ["serve", "api_server"]
    assert before_model("trtllm", 1) == ["serve"]
    assert before_model("aphrodite", 1) == ["run"]
    assert before_model("mlx-vlm", 1) == ["--model"]


def test_a_dashed_engine_id_has_underscored_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENGINESPEC_MLX_VLM_PYTHON", "/srv/../python3")
    with pytest.raises(CommandError, match="ENGINESPEC_MLX_VLM_PYTHON"):
        get_engine_spec("mlx-vlm").plan(_recipe("mlx-vlm"), Config(data_dir=tmp_path))
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    monkeypatch.setenv("ENGINESPEC_MLX_VLM_PYTHON", str(python))
    argv = get_engine_spec("mlx-vlm").build_command(_recipe("mlx-vlm"), Config(data_dir=tmp_path))
    assert argv[:3] == [str(python), "-m", "mlx_vlm.server"]


@pytest.mark.parametrize(
    ("engine", "program"), [("tgi", ["text-generation-launcher"]), ("aphrodite", ["aphrodite", "run"])]
)
def test_docker_commands_serve_on_the_published_port(engine: str, program: list[str]) -> None:
    recipe = Recipe(engine=engine, model_path="org/m", runtime={"kind": "docker", "image": "img:1"})
    argv = get_engine_spec(engine).build_command(recipe, CONFIG)
    port = get_engine_spec(engine).default_port
    assert argv[argv.index("-p") + 1] == f"127.0.0.1:{port}:{port}"
    # the image's entrypoint runs the server with what follows the image name
    inv = parse_argv([*program, *argv[argv.index("img:1") + 1 :]])
    assert inv is not None
    assert (inv.engine, inv.model, inv.host, inv.port) == (engine, "org/m", "0.0.0.0", port)


LMDEPLOY_UNINITIALISED = b'{"status":"unhealthy","message":"Engine health monitor is not initialized."}'


@pytest.mark.parametrize(
    ("engine", "answer", "state"),
    [
        ("tgi", Answer(200, b""), "ready"),
        ("tgi", Answer(503, b'{"error":"unhealthy","error_type":"healthcheck"}'), "unhealthy"),
        ("tgi", Answer(500, b""), "unknown"),
        ("lmdeploy", Answer(200, b'{"status":"healthy","message":""}'), "ready"),
        ("lmdeploy", Answer(200, b'{"status":"sleeping","message":"sleeping"}'), "unhealthy"),
        ("lmdeploy", Answer(503, b'{"status":"initializing","message":"waiting"}'), "starting"),
        ("lmdeploy", Answer(503, LMDEPLOY_UNINITIALISED), "starting"),
        ("lmdeploy", Answer(503, b'{"status":"unhealthy","message":"engine loop died"}'), "unhealthy"),
        ("lmdeploy", Answer(200, b"<html>"), "unknown"),
        ("trtllm", Answer(200, b""), "ready"),
        (
            "trtllm",
            Answer(503, b"LLM is unavailable. Please check the server logs for more details."),
            "unhealthy",
        ),
        ("aphrodite", Answer(200, b""), "ready"),
        ("aphrodite", Answer(503, b""), "unhealthy"),
        ("mlx-vlm", Answer(200, b'{"status":"healthy","loaded_model":null}'), "ready"),
        ("mlx-vlm", Answer(200, b"[]"), "unknown"),
        ("mlx-vlm", Answer(401, b'{"detail":"Invalid API key"}'), "unknown"),
    ],
)
def test_health_states(engine: str, answer: Answer, state: str) -> None:
    with serving({"/health": [answer]}) as server:
        health = check_health(engine, server.url, timeout=2)
    assert (health.engine, health.state) == (engine, state), health


def _scanned(procs: Procs, argv: list[str], sock: socket.socket | None = None, **env: str) -> Any:
    """The scanned engine process; ``sock``: the server socket it holds, as a real engine holds
    the socket it answers on (see fakeserver.bound_socket)."""
    proc = procs.start(argv, pass_fds=(sock.fileno(),) if sock is not None else (), **env)
    return next(p for p in Scanner(listen_ports=False).scan() if p.pid == proc.pid)


def test_tgi_refuses_while_shards_load_then_is_ready(procs: Procs) -> None:
    sock = bound_socket()
    port = sock.getsockname()[1]
    launcher = _scanned(procs, ["text-generation-launcher", "--model-id", "m", "--port", str(port)], sock)
    assert check_health(launcher).state == "starting"
    with serving({"/health": [Answer(200)], "/v1/models": [models("m")]}, sock=sock):
        health = check_health(launcher, verify_identity=True)
    assert (health.state, health.model_ids) == ("ready", ("m",))


def test_trtllm_identity_is_the_model_directorys_name(procs: Procs) -> None:
    routes = {"/health": [Answer(200)], "/v1/models": [models("DeepSeek-R1")]}
    sock = bound_socket()
    port = str(sock.getsockname()[1])
    with serving(routes, sock=sock):
        proc = _scanned(procs, ["trtllm-serve", "/models/deepseek-ai/DeepSeek-R1/", "--port", port], sock)
        named = check_health(proc, verify_identity=True)
        other = _scanned(procs, ["trtllm-serve", "/models/Other", "--port", port], sock)
        mismatch = check_health(other, verify_identity=True)
    assert named.state == "ready", named
    assert (mismatch.state, mismatch.reason) == (
        "unhealthy",
        "serves DeepSeek-R1, expected /models/Other, Other",
    )


def test_mlx_vlm_health_is_asked_with_the_servers_key(procs: Procs) -> None:
    sock = bound_socket()
    port = sock.getsockname()[1]
    proc = _scanned(procs, ["mlx_vlm.server", "--port", str(port), "--api-key", "sk-vlm"], sock)
    with serving({"/health": [Answer(200, b'{"status":"healthy"}')]}, sock=sock, origins=True) as server:
        health = check_health(proc)
    assert health.state == "ready"
    assert [h.get("Authorization") for _, path, h in server.script.ours if path == "/health"] == [
        "Bearer sk-vlm"
    ]
    assert "sk-vlm" not in proc.model_dump_json()


@pytest.mark.parametrize("engine", ["lmdeploy", "trtllm", "aphrodite"])
def test_cuda_only_engines_refuse_to_install_without_an_nvidia_gpu(engine: str, tmp_path: Path) -> None:
    if host_accelerator() == "cuda":
        pytest.skip("this host has an NVIDIA GPU")
    config = Config(data_dir=tmp_path)
    with pytest.raises(InstallError, match="NVIDIA GPU") as refused:
        get_engine_spec(engine).install(InstallOptions(installer="pip"), config)
    assert refused.value.command == ()  # nothing ran
    assert not config.runtime_dir(engine).exists()
    cli = subprocess.run(
        [sys.executable, "-m", "enginespec.cli", "install", engine, "--data-dir", str(tmp_path / "cli")],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert cli.returncode == 2  # refused before anything ran, as every install refusal
    assert f"{engine} runs only on an NVIDIA GPU (CUDA)" in cli.stderr
    assert not (tmp_path / "cli" / "runtimes").exists()


def test_tgi_installs_from_a_configured_command_and_reads_its_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = get_engine_spec("tgi")
    with pytest.raises(InstallOptionsError, match="ENGINESPEC_TGI_INSTALL_CMD"):
        spec.install(InstallOptions(), Config(data_dir=tmp_path))
    # a stand-in for `cargo install` that leaves a launcher printing what clap prints for v3.3.7
    script = tmp_path / "install.sh"
    script.write_text(
        "#!/bin/sh\nprintf '#!/bin/sh\\necho \"text-generation-launcher 3.3.6-dev0\"\\n' "
        '> "$ENGINESPEC_PREFIX/bin/text-generation-launcher"\n'
        'chmod +x "$ENGINESPEC_PREFIX/bin/text-generation-launcher"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("ENGINESPEC_TGI_INSTALL_CMD", str(script))
    result = spec.install(InstallOptions(), Config(data_dir=tmp_path))
    assert (result.version, result.already_installed) == ("3.3.6-dev0", False)
    assert result.binary_path == str(
        Config(data_dir=tmp_path).runtime_dir("tgi") / "bin" / "text-generation-launcher"
    )


def test_requirements() -> None:
    linux = sys.platform.startswith("linux")
    assert get_engine_spec("mlx-vlm").managed_package_spec("0.7.10") == (
        "mlx-vlm[cpu]==0.7.10" if linux else "mlx-vlm==0.7.10"
    )
    assert get_engine_spec("lmdeploy").managed_package_spec(">=0.16") == "lmdeploy>=0.16"


def test_versions() -> None:
    tgi = get_engine_spec("tgi")
    assert tgi.parse_version("text-generation-launcher 3.3.6-dev0\n") == "3.3.6-dev0"
    assert tgi.parse_version("error: unexpected argument") is None
    # Python engines read the installed distribution's version; these are what they are called
    assert {e: get_engine_spec(e).package.distributions[0] for e in ENGINES if e != "tgi"} == {
        "lmdeploy": "lmdeploy",
        "trtllm": "tensorrt-llm",
        "aphrodite": "aphrodite-engine",
        "mlx-vlm": "mlx-vlm",
    }


def test_tgi_children_are_folded_into_the_launcher(procs: Procs) -> None:
    sep, arg = "\x1e", "\x1f"
    children = sep.join(
        arg.join(child)
        for child in (
            ["text-generation-server", "serve", "org/m", "--uds-path", "/tmp/text-generation-server"],
            [
                "text-generation-router",
                "--hostname",
                "0.0.0.0",
                "--port",
                "8090",
                "--tokenizer-name",
                "org/m",
            ],
        )
    )
    launcher = procs.start(
        ["text-generation-launcher", "--model-id", "org/m", "--port", "8090"], HELPER_SPAWN=children
    )
    wait_for(lambda: len(children_of(launcher.pid)) == 2)
    spawned = children_of(launcher.pid)
    wait_for(
        lambda: all(Path(f"/proc/{c}/cmdline").read_bytes().startswith(b"text-generation-") for c in spawned)
    )
    mine = {p.pid: p for p in Scanner().scan() if p.pid in spawned | {launcher.pid}}
    assert list(mine) == [launcher.pid]
    found = mine[launcher.pid]
    assert (found.engine, found.model, found.port, found.role) == ("tgi", "org/m", 8090, "server")
    assert set(found.worker_pids) == spawned


@pytest.mark.parametrize(
    "argv",
    [
        ["python3", "/srv/venv/bin/lmdeploy", "serve", "api_server", "/m/l", "--server-port", "23399"],
        ["python3", "/srv/venv/bin/trtllm-serve", "/m/t", "--port", "8399"],
        ["python3", "/srv/venv/bin/aphrodite", "run", "/m/a", "--port", "2299"],
    ],
)
def test_engine_processes_children_are_its_workers(procs: Procs, argv: list[str]) -> None:
    # forked children keep the server's argv (and spawned ones run `python -c ...`)
    server = procs.start(argv, HELPER_CHILD_TITLES="=,python3")
    wait_for(lambda: len(children_of(server.pid)) == 2)
    children = children_of(server.pid)
    wait_for(lambda: any(children_of(c) for c in children))
    descendants = children | set().union(*(children_of(c) for c in children))
    mine = {p.pid: p for p in Scanner().scan() if p.pid in descendants | {server.pid}}
    assert list(mine) == [server.pid]
    assert set(mine[server.pid].worker_pids) == descendants


def test_tgi_image_entrypoint_is_found_once_it_execs_the_launcher(
    helper: Path, procs: Procs, tmp_path: Path
) -> None:
    # As the image's /tgi-entrypoint.sh ends in `exec text-generation-launcher $@` (it waits for a
    # line on stdin here instead of running ldconfig, so the test does not depend on timing).
    entrypoint = tmp_path / "tgi-entrypoint.sh"
    entrypoint.write_text(f'#!/bin/bash\nread -r _\nexec -a text-generation-launcher {helper} "$@"\n')
    shell = subprocess.Popen(
        ["/bin/bash", str(entrypoint), "--model-id", "org/m", "--port", "8097"],
        stdin=subprocess.PIPE,
        start_new_session=True,
    )
    procs.started.append(shell)  # type: ignore[arg-type]
    scanner = Scanner()
    assert shell.pid not in {p.pid for p in scanner.scan()}
    assert shell.stdin is not None
    shell.stdin.write(b"go\n")
    shell.stdin.flush()
    wait_for(
        lambda: Path(f"/proc/{shell.pid}/cmdline").read_bytes().startswith(b"text-generation-launcher\0")
    )
    found = {p.pid: p for p in scanner.scan()}
    assert (found[shell.pid].engine, found[shell.pid].model, found[shell.pid].port) == ("tgi", "org/m", 8097)


def test_tgi_settings_from_its_environment(procs: Procs) -> None:
    found = _scanned(procs, ["text-generation-launcher", "--num-shard", "1"], MODEL_ID="org/env", PORT="80")
    assert (found.model, found.port, found.effective_port) == ("org/env", 80, 80)
    assert found.sources["model"] == "environment"
    # argv wins over the environment
    argv_first = _scanned(procs, ["text-generation-launcher", "--port", "8081"], PORT="80")
    assert (argv_first.port, argv_first.sources["port"]) == (8081, "argv")


def test_mlx_vlm_model_from_its_environment(procs: Procs) -> None:
    found = _scanned(procs, ["mlx_vlm.server", "--port", "8082"], MLX_VLM_PRELOAD_MODEL="mlx-community/env")
    assert (found.model, found.sources["model"]) == ("mlx-community/env", "environment")


def test_scan_and_ps_show_every_engine(procs: Procs) -> None:
    argvs = [argv for argv, facts in SERVERS if facts[5] == "server"]
    started = {procs.start(argv).pid: argv_facts(argv) for argv in argvs}
    found = {p.pid: p for p in Scanner().scan() if p.pid in started}
    assert {
        pid: (p.engine, p.model, p.served_model_names, p.host, p.port, p.role) for pid, p in found.items()
    } == started
    script = Path(sys.executable).with_name("enginespec")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "enginespec.cli"]
    out = subprocess.run(
        [*command, "ps", "--json", "--no-health"], capture_output=True, text=True, check=True, timeout=120
    )
    rows = {row["pid"]: row for row in json.loads(out.stdout)}
    assert {pid: rows[pid]["engine"] for pid in started} == {pid: facts[0] for pid, facts in started.items()}
    tgi = next(pid for pid, facts in started.items() if facts[0] == "tgi" and facts[4] == 8080)
    assert rows[tgi]["base_url"] == "http://127.0.0.1:8080"  # 0.0.0.0 by default, reached on loopback
