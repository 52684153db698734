"""llama.cpp's forks that keep `llama-server` (issue 41): ik_llama.cpp is recognised as llama.cpp,
with the fork named (``EngineProcess.fork``) where its options or its checkout's directory show it,
in the scan, `ps` and its JSON, and the exporter. Real processes with the exact argv of public
command lines (each with its source), on the active backend."""

from __future__ import annotations

import json

import pytest

import enginespec.cli.app as cli
from enginespec import EngineProcess
from enginespec.definition.forks import Fork, fork_of
from enginespec.definition.registry import find_engine
from enginespec.fleet.exporter import _INFO_LABELS, _info_labels
from enginespec.scanning.scanner import Scanner
from helpers.procs import Procs, wait_for

IK = "ik_llama.cpp"

#: (argv, model, host, port): ik_llama.cpp's own servers as their users posted them
IK_SERVERS = [
    # ikawrakow/ik_llama.cpp#260 (2025-03-17; its -ot list cut after the first)
    (
        [
            *("./llama-server", "-m", "/models/DeepSeek-R1-GGUF/DeepSeek-R1-GGUF-iq4_xs__iq3_s_q8.gguf"),
            *("-amb", "1024", "-fmoe", "-mla", "2", "-fa", "-c", "16384", "-ub", "1024"),
            *("--n-gpu-layers", "100", "--seed", "3704", "--host", "0.0.0.0", "--port", "8080"),
        ],
        "/models/DeepSeek-R1-GGUF/DeepSeek-R1-GGUF-iq4_xs__iq3_s_q8.gguf",
        "0.0.0.0",
        8080,
    ),
    # ikawrakow/ik_llama.cpp#476 (a llama-swap `cmd:`, 2025-06-02): found by its options and its
    # checkout's directory; `--flash-attn` a switch in that release
    (
        [
            "/ssd/share/Software/backends/ik_llama.cpp/build/bin/llama-server",
            *("--host", "localhost", "--port", "9999", "--flash-attn", "--cache-type-k", "f16"),
            *("--ctx-size", "40960", "-ngl", "0", "-rtr", "-fmoe", "-ser", "7,1", "--threads", "31"),
            *("--model", "/models/gguf/MoE/Qwen3-30B-A3B-128K-UD-Q4_K_XL.gguf"),
        ],
        "/models/gguf/MoE/Qwen3-30B-A3B-128K-UD-Q4_K_XL.gguf",
        "localhost",
        9999,
    ),
]
#: mainline llama-server lines: no fork (llama.cpp's own README form; a -ot and -fa on, which both have)
MAINLINE = [
    ["llama-server", "-m", "/m/model.gguf", "--port", "8080"],
    ["/opt/llama.cpp/build/bin/llama-server", "-m", "/m/x.gguf", "-fa", "on", "-ot", "exps=CPU"],
]


def _labels(process: EngineProcess) -> dict[str, str]:
    """The exporter's info labels of ``process``."""
    return dict(zip(_INFO_LABELS, _info_labels(process, process.instance_id), strict=True))


def _scanned(procs: Procs, argv: list[str]) -> EngineProcess:
    proc = procs.start(argv)

    def found() -> EngineProcess | None:
        return next((p for p in Scanner(listen_ports=False).scan() if p.pid == proc.pid), None)

    wait_for(lambda: found() is not None, timeout=20)
    process = found()
    assert process is not None
    return process


@pytest.mark.parametrize(("argv", "model", "host", "port"), IK_SERVERS)
def test_ik_llama_cpp_is_llama_cpp_with_the_fork_named(
    procs: Procs, argv: list[str], model: str, host: str, port: int
) -> None:
    process = _scanned(procs, argv)
    assert (process.engine, process.model, process.host, process.port) == ("llamacpp", model, host, port)
    assert process.fork == IK
    assert json.loads(process.model_dump_json())["fork"] == IK
    assert _labels(process)["fork"] == IK


@pytest.mark.parametrize("argv", MAINLINE)
def test_mainline_llama_server_names_no_fork(procs: Procs, argv: list[str]) -> None:
    process = _scanned(procs, argv)
    assert process.engine == "llamacpp"
    assert process.fork is None
    assert _labels(process)["fork"] == ""


def test_ps_shows_the_fork_beside_the_engine(procs: Procs, capsys: pytest.CaptureFixture[str]) -> None:
    ik = _scanned(procs, IK_SERVERS[0][0])
    assert cli.main(["ps", "--no-health"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(str(ik.pid)))
    assert f"llamacpp ({IK})" in row
    assert cli.main(["ps", "--json", "--no-health"]) == 0
    documents = json.loads(capsys.readouterr().out)
    assert next(d for d in documents if d["pid"] == ik.pid)["fork"] == IK


def test_a_fork_is_told_by_its_options_or_its_directory_only() -> None:
    forks = find_engine("llamacpp").forks
    assert fork_of(forks, ["llama-server", "--mla-use=3"], None) == IK
    assert fork_of(forks, ["llama-server"], "/home/u/ik_llama.cpp/build/bin/llama-server") == IK
    # an option's value, a file named so, a directory that only contains the name: no fork
    assert fork_of(forks, ["llama-server", "-m", "/m/ik_llama.cpp"], None) is None
    assert fork_of(forks, ["/opt/my-ik_llama.cpp-tests/llama-server"], None) is None
    assert fork_of(forks, [], None) is None


def test_a_fork_declares_options_and_directory_names_only() -> None:
    with pytest.raises(ValueError, match="flags"):
        Fork(name="x", flags=("mla",))
    with pytest.raises(ValueError, match="directories"):
        Fork(name="x", directories=("a/b",))
