"""Strings from processes and servers reach the terminal literally: no rich markup, no escape
sequence, no forged line. JSON output stays exact."""

from __future__ import annotations

import json

from helpers.cli import enginespec
from helpers.fakeserver import Answer, bound_socket, serving
from helpers.procs import Procs

EVIL_MODELS = [
    "/models/[red]evil[/red].gguf",
    "/models/paint\x1b[41mred.gguf",
    "/models/title\x1b]0;TITLE\x07.gguf",
    "/models/forged\n4242 llamacpp /models/fake.gguf.gguf",
    "/models/rtl\u202egguf.exe",
    "/models/caf\udce9.gguf",  # a byte that is not UTF-8, as os.fsdecode gives it
]
CONTROL_BYTES = {0x07, 0x1B, 0x9B}


def _no_controls(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    assert not CONTROL_BYTES & set(data), "a raw control byte reached the terminal"
    assert "\u202e" not in text


def test_ps_shows_argv_literally(procs: Procs) -> None:
    started = [procs.start(["llama-server", "-m", model]) for model in EVIL_MODELS]
    # the default table shows GGUF file names (see test_cli_table), the wide one whole paths:
    # both literally, one row each
    short = enginespec("ps", "--no-health")
    assert short.returncode == 0, short.stderr
    _no_controls(short.stdout)
    short_rows = [line for line in short.stdout.decode().splitlines() if line.split()[:1] != ["PID"]]
    assert len([row for row in short_rows if int(row.split()[0]) in {p.pid for p in started}]) == len(
        EVIL_MODELS
    )
    assert "paint\\x1b[41mred.gguf" in short.stdout.decode()
    out = enginespec("ps", "--no-health", "--wide")
    assert out.returncode == 0, out.stderr
    _no_controls(out.stdout)
    text = out.stdout.decode()
    assert "[red]evil[/red]" in text  # markup shown, not applied
    assert "\\x1b[41m" in text
    assert "\\x1b]0;TITLE\\x07" in text
    assert "\\u202e" in text
    assert "caf\\xe9" in text
    rows = [line for line in text.splitlines() if line.split()[:1] and line.split()[0].isdigit()]
    ours = [line for line in rows if int(line.split()[0]) in {p.pid for p in started}]
    assert len(ours) == len(EVIL_MODELS)  # one row each: the newline forged nothing
    assert not any(line.startswith("4242") for line in rows)
    # JSON is exact: the same strings come back
    document = json.loads(enginespec("ps", "--json", "--no-health").stdout)
    models_seen = {p["model"] for p in document if p["pid"] in {s.pid for s in started}}
    assert models_seen == set(EVIL_MODELS)  # lone surrogates as JSON \udcXX escapes


def test_parse_errors_and_health_reasons_are_literal(procs: Procs) -> None:
    out = enginespec("parse", "--", "vim", "\x1b]0;pwned\x07", "[bold]x[/bold]")
    assert out.returncode == 1
    _no_controls(out.stderr)
    assert "\\x1b]0;pwned\\x07" in out.stderr.decode()
    sock = bound_socket()  # held by the engine process too: the answer is its own
    port = sock.getsockname()[1]
    served = "mine\x1b[2J"
    argv = ["vllm", "serve", "/m", "--port", str(port), "--served-model-name", served]
    proc = procs.start(argv, pass_fds=(sock.fileno(),))
    evil_id = Answer(200, json.dumps({"object": "list", "data": [{"id": "other\x1b]0;T\x07model"}]}).encode())
    with serving({"/health": [Answer(200)], "/v1/models": [evil_id]}, sock=sock):
        checked = enginespec("health", str(proc.pid), "--verify-identity")
    assert checked.returncode == 1
    _no_controls(checked.stdout)
    line = checked.stdout.decode()
    assert "unhealthy" in line
    assert "other\\x1b]0;T\\x07model" in line
    assert "mine\\x1b[2J" in line
    assert len(line.splitlines()) == 1
