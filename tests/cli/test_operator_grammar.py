"""What an operator types, read one way by every command (issue 45): one grammar for durations,
targets people remember (a pid, an engine id, ``:PORT``, ``HOST:PORT``, a URL) and engine names
by their programs. Real CLI runs (tests/helpers/cli.py) against real processes and servers on
127.0.0.1, on the backend ENGINESPEC_BACKEND chooses."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

import pytest

from enginespec.cli import _parser
from helpers.cli import enginespec
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
