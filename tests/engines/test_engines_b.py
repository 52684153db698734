"""Ollama, llamafile, KoboldCpp and TabbyAPI (on the active backend): launch forms and their
look-alikes, commands that parse back, health against loopback servers answering as each engine
does, and real processes found by a scan (runners under `ollama serve`, an APE loader's argv, a
TabbyAPI checkout)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from enginespec import Config, Recipe, Scanner, get_engine_spec, parse_argv
from enginespec.errors import InstallOptionsError
from enginespec.health.checks import check_health
from enginespec.lifecycle.installing import InstallOptions
from enginespec.process.settings import split_address
from helpers.facts import argv_facts
from helpers.fakeserver import Answer, bound_socket, models, serving
from helpers.faketabby import tabby_checkout
from helpers.procs import Procs, wait_for

BLOB = "/root/.ollama/models/blobs/sha256-2af3b81862c6be03c769683af18efdadb2c33f60ff32ab6f83e42c043d6c7816"
APE = "/root/.ape-1.10"

# argv -> (engine, model, first served name, host, port, role)
GOLDEN: list[tuple[list[str], tuple[Any, ...]]] = [
    # Ollama: the server and every runner generation (llm/server.go, llm/llama_server.go)
    (["ollama", "serve"], ("ollama", None, None, None, None, "server")),
    (["ollama.exe", "start"], ("ollama", None, None, None, None, "server")),
    (
        ["/usr/bin/ollama", "runner", "--model", BLOB, "--port", "1"],
        ("ollama", BLOB, None, None, 1, "runner"),
    ),
    (
        ["/usr/local/lib/ollama/llama-server", "-m", BLOB, "--port", "2", "--host", "127.0.0.1"],
        ("ollama", BLOB, None, "127.0.0.1", 2, "runner"),
    ),
    (
        ["C:\\Users\\u\\AppData\\Local\\Programs\\Ollama\\lib\\ollama\\llama-server.exe", "--model", BLOB],
        ("ollama", BLOB, None, None, None, "runner"),
    ),
    (
        ["/Applications/Ollama.app/Contents/Resources/llama-server", "--model", BLOB, "--port", "3"],
        ("ollama", BLOB, None, None, 3, "runner"),
    ),
    (
        ["/tmp/o/runners/cpu/ollama_llama_server", "--model", BLOB],
        ("ollama", BLOB, None, None, None, "runner"),
    ),
    # the same binary anywhere else is llama.cpp's own server
    (["/opt/lib/llama-server", "-m", "a.gguf"], ("llamacpp", "a.gguf", None, None, None, "server")),
    (
        ["/usr/local/lib/ollama2/llama-server", "-m", "a.gguf"],
        ("llamacpp", "a.gguf", None, None, None, "server"),
    ),
    # llamafile: loaders, the binary, a self-contained file, v2's -l HOST:PORT
    ([APE, "./m.llamafile", "--server"], ("llamafile", "./m.llamafile", None, None, None, "server")),
    (
        ["/usr/bin/ape", "/srv/m.llamafile", "--port", "9"],
        ("llamafile", "/srv/m.llamafile", None, None, 9, "server"),
    ),
    (
        ["ape", "/srv/llamafile", "-m", "a.gguf", "--server"],
        ("llamafile", "a.gguf", None, None, None, "server"),
    ),
    (
        ["ape-x86_64.elf", "/srv/llamafile", "--server", "-a", "n"],
        ("llamafile", None, "n", None, None, "server"),
    ),
    # a llamafile copied under another name (issue 27): the loader and llamafile's own flags
    (
        ["/usr/bin/ape", "./not-a-llamafile", "--server"],
        ("llamafile", "./not-a-llamafile", None, None, None, "server"),
    ),
    (["./m.llamafile", "--server", "-m", "b.gguf"], ("llamafile", "b.gguf", None, None, None, "server")),
    (["m.llamafile.exe", "--server"], ("llamafile", "m.llamafile.exe", None, None, None, "server")),
    (["llamafile", "-p", "x", "--server"], ("llamafile", None, None, None, None, "server")),
    (["llamafile", "--cli", "--server"], ("llamafile", None, None, None, None, "server")),
    (["llamafiler", "-l", "[::1]:8081"], ("llamafile", None, None, "::1", 8081, "server")),
    (["llamafiler", "-l", ":8082"], ("llamafile", None, None, None, 8082, "server")),
    (["llamafiler", "--listen", "h:1", "--port", "2"], ("llamafile", None, None, "h", 2, "server")),
    # KoboldCpp: script, binary, PyInstaller builds, positional model and port
    (["python3", "koboldcpp.py", "m.gguf", "5002"], ("koboldcpp", "m.gguf", None, None, 5002, "server")),
    (
        ["koboldcpp", "--usecublas", "normal", "0", "--model", "m.gguf"],
        ("koboldcpp", "m.gguf", None, None, None, "server"),
    ),
    (["koboldcpp", "--launch", "m.gguf"], ("koboldcpp", "m.gguf", None, None, None, "server")),
    (["./koboldcpp-linux-x64-cuda1210", "m.gguf"], ("koboldcpp", "m.gguf", None, None, None, "server")),
    (["koboldcpp_nocuda.exe", "--contextsize", "8192"], ("koboldcpp", None, None, None, None, "server")),
    (
        ["koboldcpp", "--host", "10.0.0.2", "--port", "5003"],
        ("koboldcpp", None, None, "10.0.0.2", 5003, "server"),
    ),
    # TabbyAPI: --model-name is the folder clients see
    (
        ["python3", "main.py", "--model-name", "Q", "--port", "5001"],
        ("tabbyapi", "Q", "Q", None, 5001, "server"),
    ),
    (
        ["/srv/tabbyAPI/venv/bin/python3", "start.py", "--host", "::"],
        ("tabbyapi", None, None, "::", None, "server"),
    ),
]

NOT_SERVERS: list[list[str]] = [
    ["ollama", "run", "llama3"],
    ["ollama", "pull", "x"],
    ["ollama", "list"],
    ["ollama", "ps"],
    ["ollama", "serve", "--help"],
    ["ollama", "serve", "x"],
    ["ollama", "-v"],
    ["ollama"],
    ["ollama-serve"],
    ["/usr/local/lib/ollama/llama-cli", "-m", BLOB],
    ["tail", "-f", "/usr/local/lib/ollama/llama-server"],
    # llamafile CLI modes and exits (llama.cpp/main/main.cpp)
    ["llamafile", "-m", "a.gguf", "-p", "hi"],
    ["llamafile", "-m", "a.gguf", "-f", "prompt.txt"],
    ["llamafile", "--server", "--cli"],
    ["llamafile", "--server", "--chat"],
    ["llamafile", "--server", "--embedding"],
    ["llamafile", "--chat"],
    ["llamafile", "--v2"],
    ["llamafile", "--version"],
    [APE, "./m.llamafile", "--help"],
    [APE, "./m.llamafile", "--localscore"],
    [APE],
    [APE, "/bin/bash"],
    # an APE loader's program under another name is a llamafile only with llamafile's flags
    ["/usr/bin/ape", "./not-a-llamafile"],
    ["/usr/bin/ape", "./tool", "-p", "x"],
    ["/usr/bin/ape", "./model", "--server", "--cli"],
    ["ape", "vllm", "serve", "m"],
    ["vim", "m.llamafile"],
    [".llamafile", "--server"],
    ["m.llamafile.sh", "--server"],
    # KoboldCpp: benchmark and prompt runs, renamed builds without evidence, look-alikes
    ["koboldcpp", "--model", "m.gguf", "--benchmark"],
    ["koboldcpp", "--model", "m.gguf", "--prompt", "hi"],
    ["koboldcpp", "--help"],
    ["koboldcpp-launcher"],
    ["koboldcpp-linux-x64", "--port", "5001"],
    ["koboldcpp-notes.txt", "m.gguf"],
    ["python", "aiserver.py"],
    # TabbyAPI actions
    ["python3", "main.py", "download", "org/model"],
    ["python3", "main.py", "export-openapi"],
    ["python3", "start.py", "export-config", "--config", "x"],
    ["python3", "main.py", "--help"],
    ["python3", "-m", "main"],
]


@pytest.mark.parametrize(("argv", "facts"), GOLDEN, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_golden_forms(argv: list[str], facts: tuple[Any, ...]) -> None:
    assert argv_facts(argv, first_name=True) == facts


@pytest.mark.parametrize("argv", NOT_SERVERS, ids=lambda v: " ".join(v))
def test_look_alikes_are_not_servers(argv: list[str]) -> None:
    assert parse_argv(argv) is None


def test_tabbyapi_without_a_working_directory_says_it_was_not_checked(tmp_path: Path) -> None:
    inv = parse_argv(["python", "main.py"])
    assert inv is not None
    assert inv.engine == "tabbyapi"
    assert any("not checked" in problem and "common/args.py" in problem for problem in inv.problems)
    # given the working directory, the checkout is looked for there
    assert parse_argv(["python", "main.py"], cwd=tmp_path) is None
    checkout = tabby_checkout(tmp_path / "tabbyAPI")
    found = parse_argv(["python", "main.py", "--port", "5005"], cwd=checkout)
    assert found is not None
    assert (found.engine, found.port, found.problems) == ("tabbyapi", 5005, ())
    assert parse_argv(["python", "tabbyAPI/main.py"], cwd=tmp_path) is not None
    assert parse_argv(["python", str(checkout / "main.py")], cwd="/nonexistent") is not None
    # never through `..`: from /proc/PID/root it would leave the process's root
    assert parse_argv(["python", "../tabbyAPI/main.py"], cwd=checkout) is None
    # a directory or a link where a file should be is no checkout
    (checkout / "common" / "args.py").unlink()
    (checkout / "common" / "args.py").symlink_to(checkout / "main.py")
    assert parse_argv(["python", "main.py"], cwd=checkout) is None


def test_ollama_host_as_the_engine_reads_it() -> None:
    # envconfig/config.go Host(): scheme cut, path dropped, net.SplitHostPort, scheme's port
    assert split_address("0.0.0.0:11434") == ("0.0.0.0", "11434")
    assert split_address(":11435") == (None, "11435")
    assert split_address("10.1.2.3") == ("10.1.2.3", None)
    assert split_address("http://example.org") == ("example.org", "80")
    assert split_address("https://example.org/ollama") == ("example.org", "443")
    assert split_address("http://[::1]:9000/x") == ("::1", "9000")
    assert split_address("[::]") == ("::", None)
    assert split_address("fe80::1") == ("fe80::1", None)
    assert split_address("[::1]x") == (None, None)
    assert split_address("") == (None, None)


@pytest.mark.parametrize("engine", ["llamafile", "koboldcpp", "tabbyapi"])
@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0", "::1"])
def test_commands_parse_back(engine: str, host: str, tmp_path: Path) -> None:
    recipe = Recipe(
        engine=engine, model_path="/models/Qwen3 8B.gguf", host=host, port=7123, max_model_len=8192
    )
    argv = get_engine_spec(engine).build_command(recipe, Config(data_dir=tmp_path))
    inv = parse_argv(argv)
    assert inv is not None, argv
    assert (inv.engine, inv.model, inv.host, inv.port, inv.role) == (
        engine,
        recipe.model_path,
        host,
        7123,
        "server",
    )


def test_ollama_command_puts_the_address_in_its_environment(tmp_path: Path) -> None:
    recipe = Recipe(engine="ollama", model_path="llama3", host="::1", port=11500, extra_args={"x": 1})
    command = get_engine_spec("ollama").plan(recipe, Config(data_dir=tmp_path))
    assert command.argv == ("ollama", "serve")
    assert command.env == {"OLLAMA_HOST": "[::1]:11500"}
    assert any("model_path" in w for w in command.warnings)
    assert any("extra_args" in w for w in command.warnings)
    inv = parse_argv(command.argv)
    assert inv is not None
    assert (inv.engine, inv.role) == ("ollama", "server")
    assert split_address(command.env["OLLAMA_HOST"]) == ("::1", "11500")
    default = get_engine_spec("ollama").plan(
        Recipe(engine="ollama", model_path="m"), Config(data_dir=tmp_path)
    )
    assert default.env == {"OLLAMA_HOST": "127.0.0.1:11434"}


KOBOLD_VERSION = b'{"result":"KoboldCpp","version":"1.76","protected":false,"txt2img":false,"vision":false}'
TABBY_AS_KOBOLD = b'{"result":"KoboldCpp","version":"1.74"}'


@pytest.mark.parametrize(
    ("engine", "routes", "state"),
    [
        ("ollama", {"/": [Answer(200, b"Ollama is running", content_type="text/plain")]}, "ready"),
        ("ollama", {"/": [Answer(200, b"<html>something else</html>")]}, "unknown"),
        ("ollama", {"/": [Answer(500, b"")]}, "unknown"),
        ("koboldcpp", {"/api/extra/version": [Answer(200, KOBOLD_VERSION)]}, "ready"),
        # TabbyAPI impersonates KoboldCpp here (endpoints/Kobold/router.py)
        ("koboldcpp", {"/api/extra/version": [Answer(200, TABBY_AS_KOBOLD)]}, "unknown"),
        ("koboldcpp", {"/api/extra/version": [Answer(200, b'{"result":"other"}')]}, "unknown"),
        ("tabbyapi", {"/health": [Answer(200, b'{"status":"healthy","issues":[]}')]}, "ready"),
        ("tabbyapi", {"/health": [Answer(503, b'{"status":"unhealthy","issues":[{"t":1}]}')]}, "unhealthy"),
        ("tabbyapi", {"/health": [Answer(200, b"garbage")]}, "unknown"),
        ("llamafile", {"/v1/models": [models("m.gguf")]}, "ready"),
        ("llamafile", {"/v1/models": [Answer(503, b"")]}, "unhealthy"),
    ],
)
def test_health_by_engine(engine: str, routes: dict[str, list[Answer]], state: str) -> None:
    with serving(routes) as server:
        health = check_health(engine, server.url, timeout=10)  # a loaded host answers late
    assert health.state == state, health
    assert (health.engine, health.http_status) == (engine, routes[next(iter(routes))][0].status)


def test_an_ollama_runner_is_checked_as_the_llama_server_it_is(procs: Procs) -> None:
    answers = [Answer(503, b'{"status":"loading model"}'), Answer(200, b'{"status":"ok"}')]
    sock = bound_socket()  # the runner holds the socket it answers on, as a real one does
    port = sock.getsockname()[1]
    runner = procs.start(
        ["/usr/lib/ollama/llama-server", "--model", BLOB, "--port", str(port)], pass_fds=(sock.fileno(),)
    )
    # origins: only this test's own checks move the script (other watchers may check the runner)
    routes = {"/health": answers, "/": [Answer(200, b"Ollama is running")]}
    with serving(routes, sock=sock, origins=True) as server:
        scanned = next(p for p in Scanner(listen_ports=False).scan() if p.pid == runner.pid)
        assert scanned.role == "runner"
        assert check_health(scanned, timeout=2).state == "loading"
        assert check_health(scanned, timeout=2).state == "ready"
        # the server itself is checked at `GET /`
        assert check_health("ollama", server.url, timeout=2).state == "ready"
    assert [path for _method, path, _headers in server.script.ours] == ["/health", "/health", "/", "/api/ps"]


@pytest.mark.parametrize(
    ("answer", "names"),
    [
        (
            Answer(200, b'{"models":[{"name":"llama3:8b","digest":"2af3"},{"name":"qwen3:0.6b"}]}'),
            ("llama3:8b", "qwen3:0.6b"),
        ),
        (Answer(200, b'{"models":[]}'), ()),
        (Answer(200, b"garbage"), ()),
        (Answer(500, b""), ()),
        (Answer(200, b"", hang=True), ()),
    ],
)
def test_a_ready_ollama_says_which_models_it_has_loaded(answer: Answer, names: tuple[str, ...]) -> None:
    with serving({"/": [Answer(200, b"Ollama is running")], "/api/ps": [answer]}) as server:
        health = check_health("ollama", server.url, timeout=1)
    assert (health.state, health.model_ids) == ("ready", names)


def test_tabbyapi_is_no_package_to_install(tmp_path: Path) -> None:
    with pytest.raises(
        InstallOptionsError, match=r"git checkout \(https://github\.com/theroyallab/tabbyAPI\)"
    ):
        get_engine_spec("tabbyapi").install(InstallOptions(), Config(data_dir=tmp_path))


@pytest.mark.parametrize("engine", ["ollama", "llamafile", "koboldcpp"])
def test_binaries_install_from_a_configured_command_only(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(f"ENGINESPEC_{engine.upper()}_INSTALL_CMD", raising=False)
    with pytest.raises(InstallOptionsError, match=f"ENGINESPEC_{engine.upper()}_INSTALL_CMD"):
        get_engine_spec(engine).install(InstallOptions(), Config(data_dir=tmp_path))


def _children(pid: int) -> set[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return {int(c) for c in path.read_text().split()} if path.exists() else set()


def _cmdline(pid: int) -> list[bytes]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]


def test_ollama_serve_and_its_runners(procs: Procs) -> None:
    arg, sep = "\x1f", "\x1e"
    runners = [
        ["/usr/local/lib/ollama/llama-server", "--model", BLOB, "--port", "41301", "--host", "127.0.0.1"],
        ["/usr/local/bin/ollama", "runner", "--ollama-engine", "--model", BLOB, "--port", "41302"],
    ]
    server = procs.start(
        ["/usr/local/bin/ollama", "serve"],
        HELPER_SPAWN=sep.join(arg.join(r) for r in runners),
        OLLAMA_HOST="0.0.0.0:11500",
    )
    wanted = {tuple(os.fsencode(a) for a in r) for r in runners}
    wait_for(lambda: {tuple(_cmdline(c)) for c in _children(server.pid)} == wanted)
    found = {p.pid: p for p in Scanner(listen_ports=False).scan()}
    top = found[server.pid]
    assert (top.engine, top.role, top.supervisor, top.model) == ("ollama", "server", None, None)
    assert (top.host, top.port, top.base_url) == ("0.0.0.0", 11500, "http://127.0.0.1:11500")
    assert top.sources["host"] == top.sources["port"] == "environment"
    children = [found[c] for c in _children(server.pid)]
    by_port = {p.port: p for p in children}
    assert set(by_port) == {41301, 41302}
    for runner in children:
        assert (runner.engine, runner.role, runner.supervisor, runner.model) == (
            "ollama",
            "runner",
            "ollama",
            BLOB,
        )
    # a runner inherits OLLAMA_HOST but listens where its argv says (or on loopback)
    assert by_port[41301].host == "127.0.0.1"
    assert by_port[41302].host is None
    assert by_port[41302].effective_host == "127.0.0.1"


def test_ape_loader_argv_is_found(procs: Procs, tmp_path: Path) -> None:
    model = str(tmp_path / "Qwen3-0.6B.llamafile")
    proc = procs.start([str(tmp_path / ".ape-1.10"), model, "--server", "--port", "41303", "-ngl", "0"])
    cli = procs.start([str(tmp_path / ".ape-1.10"), model, "-p", "hello"])
    found = {p.pid: p for p in Scanner(listen_ports=False).scan()}
    assert cli.pid not in found
    served = found[proc.pid]
    assert (served.engine, served.model, served.port, served.role) == ("llamafile", model, 41303, "server")


def test_pyinstaller_parent_and_child_are_one_koboldcpp(procs: Procs) -> None:
    argv = ["/opt/koboldcpp-linux-x64-cuda1210", "--model", "/m/a.gguf", "--port", "41304"]
    parent = procs.start(argv, HELPER_SPAWN="\x1f".join(argv))
    wait_for(lambda: len(_children(parent.pid)) == 1)
    (child,) = _children(parent.pid)
    found = {p.pid: p for p in Scanner(listen_ports=False).scan()}
    assert child not in found
    assert (found[parent.pid].engine, found[parent.pid].port) == ("koboldcpp", 41304)
    assert found[parent.pid].worker_pids == (child,)


def test_tabbyapi_is_found_only_inside_its_checkout(procs: Procs, tmp_path: Path) -> None:
    checkout = tabby_checkout(tmp_path / "tabbyAPI")
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "main.py").write_text("print('not tabby')\n")
    inside = procs.start(["python3", "main.py", "--port", "41305"], cwd=checkout)
    by_path = procs.start(["python3", str(checkout / "start.py")], cwd=other)
    relative = procs.start(["python3", "tabbyAPI/main.py"], cwd=tmp_path)
    outside = procs.start(["python3", "main.py", "--port", "41306"], cwd=other)
    found = {p.pid: p for p in Scanner(listen_ports=False).scan()}
    assert outside.pid not in found
    assert (found[inside.pid].engine, found[inside.pid].port) == ("tabbyapi", 41305)
    assert found[inside.pid].problems == ()
    assert found[by_path.pid].engine == found[relative.pid].engine == "tabbyapi"


# What each binary prints for its version arguments (Ollama v0.32.15 cmd/cmd.go versionHandler with
# no server up; llamafile 0.9.3 main.cpp line 187; KoboldCpp v1.76's parser description).
VERSION_OUTPUT = {
    "ollama": (
        "-v",
        "Warning: could not connect to a running Ollama instance\nWarning: client version is 0.32.15",
    ),
    "llamafile": ("--version", "llamafile v0.9.3"),
    "koboldcpp": ("--help", "usage: koboldcpp [-h]\n\nKoboldCpp Server - Version 1.76"),
}


@pytest.mark.parametrize("engine", sorted(VERSION_OUTPUT))
def test_binary_installed_by_its_configured_command_and_probed(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argument, output = VERSION_OUTPUT[engine]
    executable = get_engine_spec(engine).launch.executable
    # The binary answers only the engine's own version arguments; the configured command copies it
    # where install() wants it.
    built = tmp_path / "built"
    built.write_text(f'#!/bin/sh\n[ "$1" = "{argument}" ] || exit 2\ncat <<"OUT"\n{output}\nOUT\n')
    built.chmod(0o755)
    installer = tmp_path / "install.sh"
    installer.write_text(f'#!/bin/sh\ncp "{built}" "$ENGINESPEC_PREFIX/bin/{executable}"\n')
    installer.chmod(0o755)
    monkeypatch.setenv(f"ENGINESPEC_{engine.upper()}_INSTALL_CMD", str(installer))
    config = Config(data_dir=tmp_path / "data")
    result = get_engine_spec(engine).install(InstallOptions(), config)
    version = {"ollama": "0.32.15", "llamafile": "0.9.3", "koboldcpp": "1.76"}[engine]
    assert (result.version, result.already_installed) == (version, False)
    assert get_engine_spec(engine).install(InstallOptions(), config).already_installed


def test_tabbyapi_facts_from_its_config_yml(procs: Procs, tmp_path: Path) -> None:
    checkout = tabby_checkout(tmp_path / "tabbyAPI")
    (checkout / "config.yml").write_text(
        "network:\n  host: 0.0.0.0\n  port: 41307\nmodel:\n  model_dir: models\n  model_name: Qwen3-8B-exl3\n"
    )
    (checkout / "other.yml").write_text("network:\n  port: 41308\n")
    bare = procs.start(["python3", "main.py"], cwd=checkout)
    flagged = procs.start(["python3", "main.py", "--port", "41309"], cwd=checkout)
    named = procs.start(["python3", "main.py", "--config", "other.yml"], cwd=checkout)
    found = {p.pid: p for p in Scanner(listen_ports=False).scan()}
    served = found[bare.pid]
    assert (served.model, served.served_model_name, served.host, served.port) == (
        "Qwen3-8B-exl3",
        "Qwen3-8B-exl3",
        "0.0.0.0",
        41307,
    )
    assert served.sources["port"] == served.sources["model"] == "config"
    assert found[flagged.pid].port == 41309  # argv wins
    assert (found[named.pid].port, found[named.pid].model) == (41308, None)
    # no config.yml: the defaults, and no problem
    (checkout / "config.yml").unlink()
    fresh = procs.start(["python3", "start.py"], cwd=checkout)
    plain = next(p for p in Scanner(listen_ports=False).scan() if p.pid == fresh.pid)
    assert (plain.port, plain.effective_port, plain.problems) == (None, 5000, ())
