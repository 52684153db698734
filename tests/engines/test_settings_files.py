"""Settings an engine reads from its own config files and environment besides argv, as it
applies them (on the active backend): RamaLama's layered ``ramalama.conf`` files (TOML, its
``.d`` drop-ins, ``RAMALAMA_CONFIG``, ``XDG_CONFIG_HOME``) under ``RAMALAMA_HOST``/``_PORT`` and
argv; oMLX's ``settings.json`` in its base path (``--base-path``, ``OMLX_BASE_PATH``, the macOS
app's pointer, ``~/.omlx``) under ``OMLX_HOST``/``_PORT`` and argv. Real processes with the exact
argv and environment, real files in a home made here; hostile files (huge, not TOML or JSON,
wrong types, a link to a root-only file, another user's home) are said, never followed."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from enginespec import EngineProcess, Scanner
from enginespec.definition.records import Settings
from helpers.procs import Procs

RAMALAMA = ["ramalama", "serve", "granite"]
OMLX = ["omlx", "serve", "--model-dir", "/srv/models"]


@pytest.fixture
def home(nobody_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home directory any user can enter, with no XDG or engine variable inherited."""
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "RAMALAMA_CONFIG", "RAMALAMA_HOST", "RAMALAMA_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name in ("OMLX_BASE_PATH", "OMLX_HOST", "OMLX_PORT"):
        monkeypatch.delenv(name, raising=False)
    return nobody_dir


def _write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def _scan(pid: int) -> EngineProcess:
    return next(p for p in Scanner().scan() if p.pid == pid)


def _address(found: EngineProcess) -> tuple[str | None, int | None, str, str]:
    return found.host, found.port, found.sources["host"], found.sources["port"]


# -- RamaLama ---------------------------------------------------------------------------------


def test_ramalama_reads_its_user_config(procs: Procs, home: Path) -> None:
    # ramalama.conf(5), the shipped file's [ramalama] keys: host = "...", port = "..."
    _write(home / ".config/ramalama/ramalama.conf", '[ramalama]\nhost = "0.0.0.0"\nport = "8181"\n')
    found = _scan(procs.start(RAMALAMA, HOME=str(home)).pid)
    assert (found.engine, *_address(found)) == ("ramalama", "0.0.0.0", 8181, "config", "config")
    assert found.problems == ()


def test_ramalama_layers_files_then_dropins_then_environment_then_argv(procs: Procs, home: Path) -> None:
    data, config = home / "data", home / "cfg"
    _write(data / "ramalama/ramalama.conf", '[ramalama]\nhost = "10.0.0.1"\nport = 8100\n')
    _write(config / "ramalama/ramalama.conf", "[ramalama]\nport = 8200\n")
    # sorted(Path.glob("*.conf")): b.conf after a.conf; other endings are not read
    _write(config / "ramalama/ramalama.conf.d/b.conf", "[ramalama]\nport = 8400\n")
    _write(config / "ramalama/ramalama.conf.d/a.conf", "[ramalama]\nport = 8300\n")
    _write(config / "ramalama/ramalama.conf.d/c.conf.bak", "[ramalama]\nport = 8500\n")
    env = {"HOME": str(home), "XDG_DATA_HOME": str(data), "XDG_CONFIG_HOME": str(config)}
    found = _scan(procs.start(RAMALAMA, **env).pid)
    assert _address(found) == ("10.0.0.1", 8400, "config", "config")
    found = _scan(procs.start(RAMALAMA, **env, RAMALAMA_PORT="8600").pid)
    assert _address(found) == ("10.0.0.1", 8600, "config", "environment")
    found = _scan(procs.start([*RAMALAMA[:2], "--port", "8700", "granite"], **env, RAMALAMA_PORT="8600").pid)
    assert _address(found) == ("10.0.0.1", 8700, "config", "argv")
    found = _scan(procs.start(RAMALAMA, **env, RAMALAMA_HOST="127.0.0.2").pid)
    assert _address(found) == ("127.0.0.2", 8400, "environment", "config")


def test_ramalama_config_names_one_file_where_it_exists(procs: Procs, home: Path) -> None:
    _write(home / ".config/ramalama/ramalama.conf", "[ramalama]\nport = 8200\n")
    own = _write(home / "own.conf", "[ramalama]\nport = 9100\n")
    found = _scan(procs.start(RAMALAMA, HOME=str(home), RAMALAMA_CONFIG=str(own)).pid)
    assert _address(found)[1:] == (9100, "default", "config")
    # os.path.exists(config_path) is false: the usual files
    found = _scan(procs.start(RAMALAMA, HOME=str(home), RAMALAMA_CONFIG=str(home / "none.conf")).pid)
    assert _address(found)[1:] == (8200, "default", "config")
    assert found.problems == ()


def test_ramalama_with_no_files_has_its_default(procs: Procs, home: Path) -> None:
    found = _scan(procs.start(RAMALAMA, HOME=str(home)).pid)
    assert (found.port, found.effective_port, found.sources["port"], found.problems) == (
        None,
        8080,
        "default",
        (),
    )


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("[ramalama\nport = 1", "not valid TOML"),
        ("port = 9", None),  # not in [ramalama]: no fact
        ("[ramalama]\nport = [1, 2]\nhost = {a = 1}", None),  # a list gives its first; a table none
        ("[ramalama]\nport = 70000", "'70000' is not a port number"),
        ("x = " + "[" * 3000 + "]" * 3000, "nested deeper"),
        (b"[ramalama]\nport = 1\n#" + b"x" * (1 << 19), "larger than"),
        (b"\xff\xfe", "not valid TOML"),
    ],
)
def test_ramalama_hostile_files_are_said_not_followed(
    procs: Procs, home: Path, content: str | bytes, said: str | None
) -> None:
    _write(home / ".config/ramalama/ramalama.conf", content)
    found = _scan(procs.start(RAMALAMA, HOME=str(home)).pid)
    assert found.engine == "ramalama"
    assert found.host is None
    if said is None:
        assert found.problems == ()
        assert found.port in (None, 1)
    else:
        assert found.port is None
        assert any(said in problem for problem in found.problems), found.problems


@pytest.fixture
def private_file() -> Iterator[Path]:
    """A directory only root can enter."""
    private = Path(tempfile.mkdtemp(prefix="enginespec-private-"))
    try:
        yield private
    finally:
        shutil.rmtree(private, ignore_errors=True)


def test_a_link_to_a_root_only_file_is_not_read_for_its_owner(
    procs: Procs, home: Path, nobody_idle: Path, private_file: Path
) -> None:
    secret = _write(private_file / "ramalama.conf", '[ramalama]\nhost = "10.9.9.9"\nport = 9999\n')
    secret.chmod(0o600)
    place = home / ".config/ramalama"
    place.mkdir(parents=True)
    (home / ".config").chmod(0o755)
    place.chmod(0o755)
    (place / "ramalama.conf").symlink_to(secret)
    proc = procs.start(RAMALAMA, executable=nobody_idle, user="nobody", HOME=str(home))
    found = _scan(proc.pid)
    assert (found.engine, found.host, found.port) == ("ramalama", None, None)
    assert any("not readable by the process's owner" in p for p in found.problems), found.problems


def test_another_users_home_is_not_read_for_nobody(
    procs: Procs, home: Path, nobody_idle: Path, private_file: Path
) -> None:
    # HOME names root's private directory: its files are root's, not the process owner's
    _write(private_file / ".config/ramalama/ramalama.conf", "[ramalama]\nport = 9998\n")
    proc = procs.start(RAMALAMA, executable=nobody_idle, user="nobody", HOME=str(private_file))
    found = _scan(proc.pid)
    assert found.port is None
    assert any("not readable by the process's owner" in p or "Permission" in p for p in found.problems), (
        found.problems
    )


def test_config_files_are_checked() -> None:
    for bad in ("relative/ramalama.conf", "/etc/../root/x", "${lower-~/.config}/x", "${X-rel}/x", "~user/x"):
        with pytest.raises(ValueError, match="config_files"):
            Settings(config_files=(bad,))
    Settings(config_files=("/etc/x.conf", "~/.x.conf", "${XDG_CONFIG_HOME-~/.config}/x/x.conf"))
    with pytest.raises(ValueError, match="need home_config"):
        Settings(home_directory_flag="--base-path")


# -- oMLX ---------------------------------------------------------------------------------------


def test_omlx_reads_settings_json_in_its_home(procs: Procs, home: Path) -> None:
    # omlx/settings.py GlobalSettings.save: {"version": "1.0", "server": {"host", "port", ...}}
    _write(
        home / ".omlx/settings.json",
        json.dumps({"version": "1.0", "server": {"host": "0.0.0.0", "port": 8123}}),
    )
    found = _scan(procs.start(OMLX, HOME=str(home)).pid)
    assert (found.engine, *_address(found)) == ("omlx", "0.0.0.0", 8123, "config", "config")
    found = _scan(procs.start(OMLX, HOME=str(home), OMLX_PORT="8124").pid)
    assert _address(found) == ("0.0.0.0", 8124, "config", "environment")
    found = _scan(procs.start([*OMLX, "--host", "127.0.0.3"], HOME=str(home), OMLX_HOST="127.0.0.2").pid)
    assert _address(found) == ("127.0.0.3", 8123, "argv", "config")
    found = _scan(procs.start(OMLX, HOME=str(home), OMLX_HOST="127.0.0.2").pid)
    assert _address(found) == ("127.0.0.2", 8123, "environment", "config")


def test_omlx_base_path_flag_then_environment_then_pointer(procs: Procs, home: Path) -> None:
    _write(home / ".omlx/settings.json", json.dumps({"server": {"port": 8001}}))
    _write(home / "flag/settings.json", json.dumps({"server": {"port": 8002}}))
    _write(home / "env/settings.json", json.dumps({"server": {"port": 8003}}))
    _write(home / "app/settings.json", json.dumps({"server": {"port": 8004, "bind_address": "10.1.1.1"}}))
    pointer = _write(home / "Library/Application Support/oMLX/base-path", f"  {home / 'app'}\n")
    found = _scan(procs.start(OMLX, HOME=str(home)).pid)
    assert _address(found) == ("10.1.1.1", 8004, "config", "config")
    found = _scan(procs.start(OMLX, HOME=str(home), OMLX_BASE_PATH=str(home / "env")).pid)
    assert found.port == 8003
    argv = [*OMLX, "--base-path", str(home / "flag")]
    found = _scan(procs.start(argv, HOME=str(home), OMLX_BASE_PATH=str(home / "env")).pid)
    assert found.port == 8002
    # `~/...` is under its home; a relative one from its working directory
    found = _scan(procs.start([*OMLX, "--base-path=~/flag"], HOME=str(home)).pid)
    assert found.port == 8002
    found = _scan(procs.start([*OMLX, "--base-path", "env"], cwd=home, HOME=str(home)).pid)
    assert found.port == 8003
    pointer.unlink()
    found = _scan(procs.start(OMLX, HOME=str(home)).pid)
    assert (found.port, found.problems) == (8001, ())


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("{not json", "not valid JSON"),
        ('{"server": "x"}', None),
        ('{"server": {"port": true, "host": null}}', None),
        ('{"server": {"port": "80a"}}', "'80a' is not a port number"),
        ('{"server": {"host": ["127.0.0.5", "10.0.0.1"]}}', None),
    ],
)
def test_omlx_hostile_settings_are_said_not_followed(
    procs: Procs, home: Path, content: str, said: str | None
) -> None:
    _write(home / ".omlx/settings.json", content)
    found = _scan(procs.start(OMLX, HOME=str(home)).pid)
    assert found.engine == "omlx"
    assert found.port is None
    assert found.host in (None, "127.0.0.5")
    if said is None:
        assert found.problems == ()
    else:
        assert any(said in problem for problem in found.problems), found.problems
