"""LM Studio: the app and the llmster daemon recognised from real processes, their Electron
helpers and llmworker node processes folded in as workers, the `lms` CLI left alone, and the
server's address read from LM Studio's own http-server-config.json in its owner's home, as that
owner would read it (a huge file, a FIFO, a link to a root-only file, not JSON, a port out of
range: said, never followed)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from enginespec import EngineProcess, Scanner, get_engine_spec, parse_argv
from enginespec.definition.records import HealthAnswer, Settings
from enginespec.health.checks import check_health
from helpers.fakeserver import Answer, serving
from helpers.procs import Procs, children_of, wait_for

# Real command lines (sources in the comments); the corpus has two more.
SERVERS = [
    # lmstudio-ai/lmstudio-bug-tracker#1068: what `lms` spawns for the AppImage app
    ["/tmp/.mount_lmstuda4m8BB/lm-studio", "--run-as-service"],
    # sterlenjohnson/Headless-LMStudio-Server lmstudio-run.sh (extracted AppImage)
    ["./lm-studio", "--no-sandbox", "--headless"],
    ["./LM_Studio.AppImage"],
    # lms#502: llmster under ~/.lmstudio/llmster/<version>/, started with no arguments
    ["/home/jirka/.lmstudio/llmster/0.0.6-1/llmster"],
    ["llmster"],
]
NOT_SERVERS = [
    # lms clients (raine-works/lmstudio-docker entrypoint.sh; opj161/comfyui-lmstudio docs)
    ["lms", "daemon", "up"],
    ["/home/u/.lmstudio/bin/lms", "load", "openai/gpt-oss-20b", "--yes"],
    ["lms", "server", "start", "--bind", "0.0.0.0", "--port", "1234"],
    ["lms", "ps"],
    ["lms", "get", "qwen/qwen3-4b"],
    # Electron helpers of the app (lmstudio-bug-tracker#588: `lm-studio --type=broker`)
    ["/tmp/.mount_LM-StumEkll2/lm-studio", "--type=broker"],
    ["/tmp/.mount_x/lm-studio", "--type=renderer", "--enable-sandbox", "--lang=en-US"],
    ["/tmp/.mount_x/lm-studio", "--type=gpu-process", "--no-sandbox"],
    ["/tmp/.mount_x/lm-studio", "--type=utility", "--utility-sub-type=node.mojom.NodeService"],
    ["/tmp/.mount_x/lm-studio", "--type=zygote", "--no-zygote-sandbox"],
    # the model worker, alone (lms#502): node, not the server
    ["/home/u/.lmstudio/.internal/utils/node", "/home/u/.lmstudio/llmster/0.0.6-1/.bundle/lib/llmworker.js"],
    # look-alikes
    ["tail", "-f", "lm-studio"],
    ["vim", "/home/u/.lmstudio/llmster/0.0.6-1/llmster"],
    ["lm-studio-launcher.sh"],
]


@pytest.mark.parametrize("argv", SERVERS)
def test_app_and_daemon_forms_are_servers(argv: list[str]) -> None:
    found = parse_argv(argv)
    assert found is not None
    assert (found.engine, found.role, found.model, found.host, found.port) == (
        "lmstudio",
        "server",
        None,
        None,
        None,
    )


@pytest.mark.parametrize("argv", NOT_SERVERS)
def test_clients_helpers_and_look_alikes_are_not(argv: list[str]) -> None:
    found = parse_argv(argv)
    assert found is None or found.engine != "lmstudio"


@pytest.fixture
def home(nobody_dir: Path) -> Path:
    """A home directory any user can enter (the helper may run as nobody)."""
    return nobody_dir


def _config(home: Path, text: str | bytes, lmstudio: str = ".lmstudio") -> Path:
    internal = home / lmstudio / ".internal"
    internal.mkdir(parents=True, exist_ok=True)
    path = internal / "http-server-config.json"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def _scan(pid: int) -> EngineProcess:
    return next(p for p in Scanner().scan() if p.pid == pid)


def test_port_and_interface_from_its_home_config(procs: Procs, home: Path) -> None:
    # lms src/subcommands/server.ts HttpServerConfig: {port: number, networkInterface: string}
    _config(home, json.dumps({"port": 4321, "networkInterface": "0.0.0.0", "cors": False}))
    app = procs.start(["/tmp/.mount_lmstu1/lm-studio", "--run-as-service"], HOME=str(home))
    found = _scan(app.pid)
    assert (found.engine, found.role, found.port, found.host) == ("lmstudio", "server", 4321, "0.0.0.0")
    assert found.sources["port"] == "config"
    assert found.sources["host"] == "config"
    assert found.problems == ()


def test_no_config_is_the_default_port(procs: Procs, home: Path) -> None:
    daemon = procs.start([str(home / ".lmstudio/llmster/0.0.6-1/llmster")], HOME=str(home))
    found = _scan(daemon.pid)
    assert (found.engine, found.port, found.effective_port, found.problems) == ("lmstudio", None, 1234, ())
    assert found.base_url == "http://127.0.0.1:1234"


def test_the_home_pointer_moves_lmstudio_home(procs: Procs, home: Path) -> None:
    # findLMStudioHome: ~/.lmstudio-home-pointer holds the directory (trimmed)
    _config(home, json.dumps({"port": 1111}))
    _config(home, json.dumps({"port": 2222}), lmstudio="elsewhere")
    (home / ".lmstudio-home-pointer").write_text(f"{home / 'elsewhere'}\n")
    found = _scan(procs.start(["llmster"], HOME=str(home)).pid)
    assert (found.port, found.sources["port"]) == (2222, "config")
    (home / ".lmstudio-home-pointer").write_text("relative/dir")
    found = _scan(procs.start(["llmster"], HOME=str(home)).pid)
    assert found.port is None
    assert any("absolute directory" in problem for problem in found.problems)


@pytest.mark.parametrize(
    ("content", "effective", "said"),
    [
        ("{not json", 1234, "not valid JSON"),
        ("[1234]", 1234, "not a mapping"),
        # a port that is none is not the default either: where it listens is not known
        ('{"port": 70000}', None, "'70000' is not a port number"),
        ('{"port": "80a"}', None, "'80a' is not a port number"),
        ('{"port": 0}', None, "'0' is not a port number"),
        # a boolean is no value at all: the default stands
        ('{"port": true}', 1234, None),
        (b'{"port": 1234, "pad": "' + b"x" * (1 << 19) + b'"}', 1234, "larger than"),
    ],
)
def test_hostile_config_files_are_said_not_followed(
    procs: Procs, home: Path, content: str | bytes, effective: int | None, said: str | None
) -> None:
    _config(home, content)
    found = _scan(procs.start(["llmster"], HOME=str(home)).pid)
    assert found.engine == "lmstudio"
    assert found.port is None
    assert found.effective_port == effective, found.problems
    if said is not None:
        assert any(said in problem for problem in found.problems), found.problems


def test_a_fifo_config_does_not_block_the_scan(procs: Procs, home: Path) -> None:
    path = _config(home, "")
    path.unlink()
    os.mkfifo(path)
    found = _scan(procs.start(["llmster"], HOME=str(home)).pid)
    assert found.port is None
    assert any("not a regular file" in problem or "fifo" in problem.lower() for problem in found.problems)


def test_a_link_to_a_root_only_file_is_not_read_for_its_owner(procs: Procs, home: Path) -> None:
    private = Path(tempfile.mkdtemp(prefix="enginespec-private-"))
    try:
        secret = private / "http-server-config.json"
        secret.write_text(json.dumps({"port": 4444, "networkInterface": "10.9.9.9"}))
        secret.chmod(0o600)
        internal = home / ".lmstudio" / ".internal"
        internal.mkdir(parents=True)
        (home / ".lmstudio").chmod(0o755)
        internal.chmod(0o755)
        (internal / "http-server-config.json").symlink_to(secret)
        shared = Path(tempfile.mkdtemp(prefix="enginespec-shared-"))
        shared.chmod(0o755)
        try:
            idle = shared / "llmster"
            shutil.copy(procs.helper, idle)
            idle.chmod(0o755)
            proc = procs.start([str(idle)], executable=idle, user="nobody", HOME=str(home))
            found = _scan(proc.pid)
            assert (found.engine, found.port, found.host) == ("lmstudio", None, None)
            assert any("not readable by the process's owner" in p for p in found.problems), found.problems
        finally:
            shutil.rmtree(shared, ignore_errors=True)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def test_electron_helpers_and_llmworkers_fold_into_the_app(procs: Procs, home: Path) -> None:
    children = "\x1e".join(
        "\x1f".join(argv)
        for argv in (
            ["/tmp/.mount_x/lm-studio", "--type=zygote", "--no-zygote-sandbox"],
            ["/tmp/.mount_x/lm-studio", "--type=gpu-process", "--no-sandbox"],
            [f"{home}/.lmstudio/.internal/utils/node", f"{home}/.lmstudio/llmster/.bundle/lib/llmworker.js"],
        )
    )
    app = procs.start(["/tmp/.mount_x/lm-studio", "--run-as-service"], HELPER_SPAWN=children, HOME=str(home))
    wait_for(lambda: len(children_of(app.pid)) == 3)
    spawned = children_of(app.pid)
    wait_for(lambda: all(Path(f"/proc/{c}/cmdline").read_bytes().count(b"\0") >= 2 for c in spawned))
    mine = {p.pid: p for p in Scanner().scan() if p.pid in spawned | {app.pid}}
    assert list(mine) == [app.pid]
    assert set(mine[app.pid].worker_pids) == spawned


GREETING = b'{"lmstudio":true}'


def test_health_is_its_greeting() -> None:
    with serving({"/lmstudio-greeting": [Answer(200, GREETING)]}) as server:
        assert check_health("lmstudio", server.url).state == "ready"
    # mistral.rs (or anything else) on 1234 answers otherwise
    for body in (b'{"lmstudio": "true"}', b"not json", b'{"status": "ok"}', b"[" * 100000):
        with serving({"/lmstudio-greeting": [Answer(200, body)]}) as server:
            assert check_health("lmstudio", server.url).state == "unknown"


def test_identity_probe_tells_it_from_mistralrs() -> None:
    probe = get_engine_spec("lmstudio").serving.identity
    assert probe is not None
    assert probe.path == "/lmstudio-greeting"
    assert probe.matches(HealthAnswer(200, GREETING))
    assert probe.matches(HealthAnswer(200, b'{ "lmstudio" : true, "version": "0.4.8" }'))
    assert not probe.matches(HealthAnswer(200, b'{"lmstudio": 1}'))
    assert not probe.matches(HealthAnswer(404, b'{"lmstudio": true}'))
    assert not probe.matches(HealthAnswer(200, b'{"object":"list","data":[]}'))


def test_home_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="leaves the home"):
        Settings(home_config=".lmstudio/../../etc/passwd")
    with pytest.raises(ValueError, match="leading directory"):
        Settings(home_config=".lmstudio/x.json", home_pointer=("p", ".other"))
    with pytest.raises(ValueError, match="not a path under the home"):
        Settings(home_config=".lmstudio/x.json", home_pointer=("a/../b", ".lmstudio"))
    with pytest.raises(ValueError, match="not a path under the home"):
        Settings(home_config=".lmstudio/x.json", home_pointer=("/etc/p", ".lmstudio"))
