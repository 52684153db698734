"""What an operator types, read one way by every command (issue 45): one grammar for durations,
targets people remember (a pid, an engine id, ``:PORT``, ``HOST:PORT``, a URL) and engine names
by their programs. Real CLI runs (tests/helpers/cli.py) against real processes and servers on
127.0.0.1, on the backend ENGINESPEC_BACKEND chooses."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from enginespec.cli.app import _parser
from enginespec.process.record import make_instance_id
from helpers.cli import enginespec
from helpers.fakeserver import Answer, bound_socket, free_port, serving
from helpers.procs import Procs

#: the option names that are times, in any command (a new time flag is caught by its name).
TIME_FLAG = re.compile(r"--(?:.*-)?(?:timeout|interval|grace|after|stopped|deadline|idle)(?:-.*)?$")


def _time_flags() -> list[tuple[str, str]]:
    _top, commands = _parser()
    found = []
    for name, sub in commands.items():
        for action in sub._actions:
            found += [(name, flag) for flag in action.option_strings if TIME_FLAG.fullmatch(flag)]
    return found


def test_every_time_flag_takes_one_grammar() -> None:
    flags = _time_flags()
    assert {
        ("stop", "--grace"),
        ("run", "--timeout"),
        ("health", "--timeout"),
        ("exporter", "--interval"),
    } <= set(flags)
    _top, commands = _parser()
    for name, flag in flags:
        sub = commands[name]
        [action] = [a for a in sub._actions if flag in a.option_strings]
        parse = action.type
        assert callable(parse), (name, flag)
        for text, seconds in (("500ms", 0.5), ("2s", 2.0), ("10m", 600.0), ("1h", 3600.0), ("3", 3.0)):
            assert parse(text) == seconds, (name, flag, text)
        for bad in ("2x", "s", "-1s", "nan", "inf", "1e400"):
            with pytest.raises(argparse.ArgumentTypeError, match=re.escape(repr(bad))):
                parse(bad)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["stop", "1", "--grace", "ten"], "--grace"),
        (["health", "1", "--timeout", "2x"], "--timeout"),
        (["run", "r.toml", "--timeout", "5 min"], "--timeout"),
        (["run", "r.toml", "--stall-timeout", "0"], "--stall-timeout"),
        (["load", "1", "--interval=-2s"], "--interval"),
        (["exporter", "--keep-stopped", "5y"], "--keep-stopped"),
    ],
)
def test_a_bad_duration_is_a_usage_error_naming_the_flag_and_value(args: list[str], flag: str) -> None:
    out = enginespec(*args)
    assert out.returncode == 2
    last = out.stderr.decode().splitlines()[-1]
    value = args[-1].removeprefix(flag + "=")
    assert f"error: argument {flag}: {value!r} is not a duration" in last, last
    assert "500ms, 2s, 10m" in last


def test_stop_and_health_take_units(procs: Procs, held_port: Callable[[], int]) -> None:
    port = held_port()  # nothing answers: health says not ready, after reading its flags
    proc = procs.start(["vllm", "serve", "m", "--port", str(port)])
    checked = enginespec("health", str(proc.pid), "--timeout", "500ms")
    assert checked.returncode == 1, checked.stderr
    assert checked.stdout.decode().split()[0] == "vllm"
    stopped = enginespec("stop", str(proc.pid), "--grace", "2s")
    assert stopped.returncode == 0, stopped.stderr
    assert f"(pid {proc.pid})" in stopped.stdout.decode()
    assert proc.wait(timeout=30) is not None


def test_stop_takes_several_targets_and_stops_each_engine_once(
    procs: Procs, held_port: Callable[[], int]
) -> None:
    """Two engines by pid and by engine id, one of them named twice, and a target that names
    none: both engines stopped (one line each), the bad target said, exit 2."""
    first_port, second_port = held_port(), held_port()
    first = procs.start(["vllm", "serve", "m", "--port", str(first_port)])
    second = procs.start(["vllm", "serve", "m", "--port", str(second_port)])
    second_id = make_instance_id("vllm", "m", second_port)
    stopped = enginespec(
        "stop", str(first.pid), second_id, str(first.pid), "vllm-1-00000000", "--grace", "2s"
    )
    assert stopped.returncode == 2, stopped.stderr
    lines = stopped.stdout.decode().splitlines()
    assert [line.split(": ")[0] for line in lines] == [
        f"stopped {make_instance_id('vllm', 'm', first_port)} (pid {first.pid})",
        f"stopped {second_id} (pid {second.pid})",
    ]
    assert "'vllm-1-00000000'" in stopped.stderr.decode()
    assert first.wait(timeout=30) is not None
    assert second.wait(timeout=30) is not None


def test_stop_of_several_targets_prints_a_list_as_json(procs: Procs, held_port: Callable[[], int]) -> None:
    ports = [held_port(), held_port()]
    started = [procs.start(["vllm", "serve", "m", "--port", str(port)]) for port in ports]
    stopped = enginespec("stop", *(f"{p.pid}" for p in started), "--grace", "2s", "--json")
    assert stopped.returncode == 0, stopped.stderr
    results = json.loads(stopped.stdout)
    assert [result["leftover"] for result in results] == [[], []]
    assert [result["port"] for result in results] == ports
    assert all(p.wait(timeout=30) is not None for p in started)


OK = Answer(200, b'{"status":"ok"}')


def _fields(out: subprocess.CompletedProcess[bytes]) -> dict[str, str]:
    lines = out.stdout.decode().splitlines()
    return {k: v.strip() for k, v in (line.split(":", 1) for line in lines if ":" in line)}


def test_a_port_an_address_or_a_url_names_the_engine_listening_there(procs: Procs) -> None:
    sock = bound_socket()
    port = sock.getsockname()[1]
    with serving({"/health": [OK]}, sock=sock):
        # listening on every address: 127.0.0.1:PORT, localhost:PORT and :PORT all reach it
        proc = procs.start(
            ["llama-server", "-m", "/m/a.gguf", "--host", "0.0.0.0", "--port", str(port)],
            pass_fds=(sock.fileno(),),
        )
        for target in (
            f":{port}",
            str(port),  # no pid of an engine: the port one listens on
            f"127.0.0.1:{port}",
            f"localhost:{port}",
            f"http://127.0.0.1:{port}",
            f"http://127.0.0.1:{port}/v1/models",
        ):
            checked = enginespec("health", target)
            assert checked.returncode == 0, (target, checked.stderr)
            assert checked.stdout.decode().split()[:3] == ["llamacpp", f"http://127.0.0.1:{port}", "ready"]
        described = enginespec("describe", f"[::ffff:127.0.0.1]:{port}", "--no-health")
        assert described.returncode == 0, described.stderr
        assert _fields(described)["PID"] == str(proc.pid)
        assert enginespec("load", f":{port}", "--interval", "100ms").returncode in (0, 1)  # found, read
        listed = enginespec("ps", f":{port}", "-q", "--no-health")
        assert listed.stdout.decode().split() == [str(proc.pid)]
        logs = enginespec("logs", f"http://localhost:{port}")
        assert (logs.returncode, logs.stderr) == (0, b"")  # its output goes to /dev/null: read, empty
        stopped = enginespec("stop", f":{port}", "--grace", "5s")
        assert stopped.returncode == 0, stopped.stderr
        assert f"(pid {proc.pid})" in stopped.stdout.decode()
        proc.wait(timeout=30)


def test_an_address_that_names_several_engines_or_none_says_so(
    procs: Procs, held_port: Callable[[], int]
) -> None:
    shared, alone = held_port(), held_port()
    vllm = procs.start(["vllm", "serve", "m", "--port", str(shared)])
    # a host that is no address, with a terminal escape: named in the listing, shown literally
    sglang = procs.start(
        [
            "python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "m",
            "--host",
            "\x1b[2Jx",
            "--port",
            str(shared),
        ]
    )
    local = procs.start(["vllm", "serve", "m", "--host", "127.0.0.1", "--port", str(alone)])
    for command in (["describe"], ["health"], ["stop"], ["model"]):
        out = enginespec(*command, f":{shared}")
        assert out.returncode in (1, 2), (command, out)
        assert out.stdout == b""
        said = out.stderr.decode()
        assert f"':{shared}' names 2 engines:" in said, (command, said)
        assert f"(pid {vllm.pid}," in said, said
        assert f"(pid {sglang.pid}," in said, said
        assert "give a pid or an engine id" in said
        assert "\x1b" not in said
        assert "\\x1b[2Jx:" in said
    assert vllm.poll() is None  # stop stopped neither
    assert sglang.poll() is None
    # an engine bound to loopback is not at another address on its port
    found = enginespec("describe", f"localhost:{alone}", "--no-health")
    assert _fields(found)["PID"] == str(local.pid)
    elsewhere = enginespec("describe", f"10.9.8.7:{alone}", "--no-health")
    assert elsewhere.returncode == 2
    assert f"no engine server on this host listens on 10.9.8.7:{alone}" in elsewhere.stderr.decode()
    nothing = free_port()
    for name in ("describe", "health", "stop", "logs", "model"):
        out = enginespec(name, f":{nothing}")
        assert out.returncode in (1, 2), (name, out)
        assert f"no engine server on this host listens on :{nothing}" in out.stderr.decode(), (name, out)


@pytest.mark.parametrize(
    "target",
    ["host:", ":0", ":70000", "http://[::1", "http://127.0.0.1:99999/", "1.2.3.4:80x", "\x1b[31m:1"],
)
def test_what_is_no_target_is_one_clear_line(target: str) -> None:
    out = enginespec("describe", target)
    assert out.returncode == 2
    lines = out.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert "is not a pid, an engine id, :PORT, HOST:PORT or a URL" in lines[0], lines
    assert "\x1b" not in lines[0]  # shown literally


def test_every_alias_names_its_own_engine() -> None:
    from enginespec.definition.registry import all_engines, engine_named

    aliases = [(alias, engine.id) for engine in all_engines() for alias in engine.aliases]
    assert ("llama.cpp", "llamacpp") in aliases
    assert ("llama-server", "llamacpp") in aliases
    for alias, engine_id in aliases:
        assert engine_named(alias) == engine_id, alias
        assert engine_named(alias.upper()) == engine_id, alias
    for definition in all_engines():
        assert engine_named(definition.id) == definition.id


@pytest.mark.parametrize(
    ("args", "offered"),
    [
        (["ps", "llama"], "did you mean 'llamacpp', 'llamafile' or 'llamacpp-python'?"),
        (["health", "llama"], "did you mean 'llamacpp', 'llamafile' or 'llamacpp-python'?"),
        (["ps", "--filter", "engine=llama"], "did you mean 'llamacpp', 'llamafile' or 'llamacpp-python'?"),
        (["install", "llama-srv"], "did you mean 'llamacpp'?"),
        (["help", "mlx_lm.serve"], "did you mean 'mlx'?"),
    ],
)
def test_a_prefix_or_a_program_name_wins_over_edit_distance(args: list[str], offered: str) -> None:
    out = enginespec(*args)
    assert out.returncode == 2
    [line] = out.stderr.decode().splitlines()
    assert line.endswith(offered), line
    assert "ollama'?" not in line


def test_a_recipe_naming_an_engine_by_its_program_is_offered_the_id(tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text('engine = "llama-server"\nmodel_path = "/m/a.gguf"\n')
    out = enginespec("command", str(recipe))
    assert out.returncode == 2
    assert "engine 'llama-server' is not one of" in out.stderr.decode()
    assert "; did you mean 'llamacpp'? (got 'llama-server')" in out.stderr.decode()


def test_engines_are_taken_by_their_program_names(procs: Procs, tmp_path: Path) -> None:
    sock = bound_socket()
    port = sock.getsockname()[1]
    with serving({"/health": [OK]}, sock=sock) as server:
        proc = procs.start(
            ["llama-server", "-m", "/m/a.gguf", "--port", str(port)], pass_fds=(sock.fileno(),)
        )
        other = procs.start(["vllm", "serve", "m", "--port", str(free_port())])
        for terms in (["llama.cpp"], ["llama-server"], ["LLAMA.CPP"], ["--filter", "engine=llama-server"]):
            listed = enginespec("ps", *terms, "-q", "--no-health").stdout.decode().split()
            assert str(proc.pid) in listed, terms
            assert str(other.pid) not in listed, terms
        checked = enginespec("health", "llama-server", server.url)
        assert checked.returncode == 0, checked.stderr
        assert checked.stdout.decode().split()[:3] == ["llamacpp", server.url, "ready"]
    info = enginespec("info", "llama.cpp", "--json", "--data-dir", str(tmp_path))
    assert info.returncode == 0, info.stderr
    assert [entry["engine"] for entry in json.loads(info.stdout)] == ["llamacpp"]


def test_the_renamed_commands_answer_to_their_old_names_and_say_so() -> None:
    """`feed` was `export` and `agent` was `serve`: the new names are the ones --help lists; the
    old ones still run the same command, with one line on stderr saying what it is called now."""
    listed = enginespec("--help").stdout.decode()
    assert re.search(r"^    feed \(export\)\s", listed, re.MULTILINE), listed
    assert re.search(r"^    agent \(serve\)\s", listed, re.MULTILINE), listed
    new = enginespec("feed", "--format", "file-sd", "--out", "-", "--timeout", "500ms")
    old = enginespec("export", "--format", "file-sd", "--out", "-", "--timeout", "500ms")
    assert (new.returncode, old.returncode) == (0, 0), (new.stderr, old.stderr)
    assert isinstance(json.loads(old.stdout), list)
    notice = b"enginespec: 'export' is now 'enginespec feed' (the old name works until the next release)\n"
    assert old.stderr.startswith(notice)
    assert b"is now" not in new.stderr
    refused = enginespec("serve", "--listen", "127.0.0.1:notaport")
    assert refused.returncode != 0
    lines = refused.stderr.decode().splitlines()
    assert (
        lines[0]
        == "enginespec: 'serve' is now 'enginespec agent' (the old name works until the next release)"
    )
    assert lines[1].startswith("enginespec agent: "), lines


def test_describe_reads_like_kubectl_describe(procs: Procs, tmp_path: Path) -> None:
    """Workers with their titles, the model's facts and memory, GPUs, where the output goes,
    health and load: one engine's whole story."""
    from modelfacts.test_modelfacts import write_gguf

    model = write_gguf(tmp_path / "tiny.gguf", ftype=15)
    log = tmp_path / "engine.log"
    llama = procs.start(
        ["llama-server", "-m", str(model), "--port", str(free_port()), "-c", "1024"], output=log
    )
    vllm = procs.start(
        ["vllm", "serve", "m", "--port", str(free_port())], HELPER_CHILD_TITLES="VLLM::EngineCore"
    )

    def fields(target: int) -> tuple[dict[str, str], list[str]]:
        shown = enginespec("describe", str(target), "--timeout", "500ms")
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.decode().splitlines()
        named = {
            key: value.strip() for key, _, value in (line.partition(":") for line in lines if line[:1] != " ")
        }
        return named, [line.split() for line in lines if line.startswith("  ")]

    said, _ = fields(llama.pid)
    assert said["Model facts"].startswith("llama, Q4_K_M, context 1024, weights "), said
    assert said["Logs"] == f"file {log}"
    assert said["GPUs"].startswith("-")
    assert said["Health"] == "starting"
    assert said["Reason"] == "process is up, not accepting connections yet"
    assert said["Load"] == "- (/metrics: process is up, not accepting connections yet)"
    said, workers = fields(vllm.pid)
    assert said["Workers"] == str(len(workers))
    assert ["VLLM::EngineCore"] in [row[1:] for row in workers]
