"""Real command lines of the classes issue 27 found misread (tests/data/argv-issue27-public.jsonl),
on the active backend: forks that keep a launcher's name (IBM's TGIS), argv the engine's strict
parser refuses, TensorRT-LLM's MPI helpers, APE loaders of any version running a llamafile under
any name, and a follower's own listen address (llama.cpp's rpc-server)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from enginespec import Scanner, parse_argv
from enginespec.health.checks import check_health
from helpers.facts import argv_facts
from helpers.procs import Procs, children_of, wait_for

CORPUS = Path(__file__).parents[1] / "data" / "argv-issue27-public.jsonl"


def _records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]


def test_every_class_has_real_records() -> None:
    records = _records()
    sources = {r["source"].split(":")[0].split("#")[0] for r in records}
    assert {
        "IBM/text-generation-inference",
        "opendatahub-io/caikit-tgis-serving",
        "huggingface/text-generation-inference",
        "NVIDIA/TensorRT-LLM",
        "samirma/cookbook",
        "Marcushadow/DistributedMacInference",
    } <= sources
    assert {r["role"] for r in records if r["engine"]} == {"server", "follower"}
    assert sum(r["engine"] is None for r in records) >= 5


@pytest.mark.parametrize("record", _records(), ids=lambda r: f"{r['source']}:{' '.join(r['argv'])[:60]}")
def test_record(record: dict[str, Any]) -> None:
    expected = (
        None
        if record["engine"] is None
        else (
            record["engine"],
            record["model"],
            record["served_model_name"],
            record["host"],
            record["port"],
            record["role"],
        )
    )
    assert argv_facts(record["argv"], first_name=True) == expected


TGIS = ["text-generation-launcher", "--model-name=/mnt/models/", "--port=3000"]


@pytest.mark.parametrize(
    "argv",
    [
        # clap refuses any positional of the launcher and of the llama.cpp backend's router
        [*TGIS, "/bin/sh", "-c", "text-generation-launcher --model-id m"],
        [*TGIS, " "],
        ["text-generation-launcher", " ", "--model-id", "m"],
        [*TGIS, "--", "x"],
        ["text-generation-router-llamacpp", "--model-id", "m", "extra"],
        # a long option given no value: "a value is required for '--port <PORT>'"
        [*TGIS, "--port"],
        ["text-generation-launcher", "--model-name", "--port", "3000"],
        # TensorRT-LLM's comm server asked to stop, in either spelling
        ["python3", "-m", "tensorrt_llm.llmapi.mgmn_leader_node", "--action=stop"],
        ["python3", "-m", "tensorrt_llm.llmapi.mgmn_leader_node", "--action", "start", "--action", "stop"],
        # an APE loader's program of any name is llamafile only with llamafile's own flags; sh only
        # with --server (sh runs any script)
        ["/root/.ape-1.10", "./model"],
        ["/root/.ape-1.11", "./tool", "--port", "8080"],
        ["sh", "./train.sh", "-m", "x.gguf"],
        ["sh", "-c", "./model --server"],
        ["/usr/bin/ape", "./model", "--server", "--chat"],
        # rpc-server exits on a host or port flag with no value, and on --help
        ["rpc-server", "-H", "0.0.0.0", "-p"],
        ["rpc-server", "--host"],
        ["rpc-server", "-p", "50052", "-h"],
    ],
    ids=" ".join,
)
def test_refused(argv: list[str]) -> None:
    assert parse_argv(argv) is None


@pytest.mark.parametrize(
    ("argv", "facts"),
    [
        # no-value flags of TGI and TGIS leave the next flag alone; the model never is a positional
        (
            [*TGIS, "--json-output", "--output-special-tokens"],
            ("tgi", "/mnt/models/", None, None, 3000, "server"),
        ),
        (
            ["text-generation-launcher", "--model-id", "a", "--model-name", "b"],
            ("tgi", "a", None, None, None, "server"),
        ),
        (
            ["python3", "-m", "tensorrt_llm.llmapi.mgmn_leader_node", "--action", "start"],
            ("trtllm", None, None, None, None, "follower"),
        ),
        (
            [
                "python3",
                "-m",
                "tensorrt_llm.llmapi.mgmn_leader_node",
                "--action",
                "stop",
                "--action",
                "start",
            ],
            ("trtllm", None, None, None, None, "follower"),
        ),
        # loaders of every version, llamafile's flags in any spelling
        (
            ["/tmp/.ape-1.11", "/opt/model", "--model", "w.gguf"],
            ("llamafile", "w.gguf", None, None, None, "server"),
        ),
        # --server with --v2 runs the v2 server (determine_program)
        (
            ["/root/.ape-1.9", "./model", "--server", "--v2"],
            ("llamafile", "./model", None, None, None, "server"),
        ),
        (["ape-x86_64.elf", "./m", "--server", "-a", "n"], ("llamafile", "./m", "n", None, None, "server")),
        (["sh", "./x.llamafile"], ("llamafile", "./x.llamafile", None, None, None, "server")),
        (
            ["sh", "/usr/local/bin/llamafile", "--server", "-m", "a.gguf"],
            ("llamafile", "a.gguf", None, None, None, "server"),
        ),
        # rpc-server: the last of each flag wins; -t/-d/-c are no address
        (
            ["rpc-server", "-p", "1", "--port", "50053", "-H", "a", "--host", "10.0.0.5", "-t", "4", "-c"],
            ("llamacpp", None, None, "10.0.0.5", 50053, "follower"),
        ),
        (["rpc-server", "-p", "99999"], ("llamacpp", None, None, None, None, "follower")),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else "",
)
def test_read(argv: list[str], facts: tuple[Any, ...] | None) -> None:
    assert argv_facts(argv, first_name=True) == facts


def test_a_scanned_rpc_server_shows_its_address_and_is_not_probed(procs: Procs) -> None:
    proc = procs.start(["rpc-server", "-H", "127.0.0.1", "-p", "50052"])
    bare = procs.start(["rpc-server", "-d", "CUDA0"])
    found = {p.pid: p for p in Scanner().scan() if p.pid in (proc.pid, bare.pid)}
    given, defaults = found[proc.pid], found[bare.pid]
    assert (given.engine, given.role, given.host, given.port) == ("llamacpp", "follower", "127.0.0.1", 50052)
    assert given.base_url is None
    assert check_health(given).state == "not_serving"
    # no -H/-p: where rpc-server listens by default, not llama-server's 8080
    assert (defaults.host, defaults.port) == (None, None)
    assert (defaults.effective_host, defaults.effective_port, defaults.base_url) == ("127.0.0.1", 50052, None)


def test_a_scanned_renamed_llamafile_and_tgis(procs: Procs) -> None:
    started = {
        procs.start(["/root/.ape-1.10", "./model", "--server", "--port", "41391"]).pid: (
            "llamafile",
            "./model",
            41391,
        ),
        procs.start(["text-generation-launcher", "--model-name=/mnt/models/", "--port=41392"]).pid: (
            "tgi",
            "/mnt/models/",
            41392,
        ),
    }
    refused = {
        procs.start(["text-generation-launcher", "--model-name=/m", " "]).pid,
        procs.start(["python3", "-m", "tensorrt_llm.llmapi.mgmn_leader_node", "--action", "stop"]).pid,
    }
    found = {p.pid: p for p in Scanner(listen_ports=False).scan() if p.pid in started.keys() | refused}
    assert {pid: (p.engine, p.model, p.port) for pid, p in found.items()} == started


def test_the_disaggregated_leaders_child_is_the_server(procs: Procs) -> None:
    """`_launch_disaggregated_leader` (tensorrt_llm/commands/serve.py) Popens the same subcommand
    with TLLM_DISAGG_RUN_REMOTE_MPI_SESSION_CLIENT=1: the child serves HTTP, the leader (and a
    rank started alike without it) stays a follower; argv alone cannot tell them apart."""
    leader_argv = [
        "/usr/bin/python3",
        "/usr/local/bin/trtllm-serve",
        "disaggregated_mpi_worker",
        "-c",
        "d.yaml",
    ]
    child_argv = ["python3", "/usr/local/bin/trtllm-serve", "disaggregated_mpi_worker", "-c", "d.yaml"]
    child_argv += ["--log_level", "info"]
    assert argv_facts(child_argv, first_name=True) == ("trtllm", None, None, None, None, "follower")
    leader = procs.start(
        leader_argv,
        HELPER_SPAWN="\x1f".join(child_argv),
        HELPER_SPAWN_ENV="TLLM_DISAGG_RUN_REMOTE_MPI_SESSION_CLIENT=1",
    )
    rank = procs.start(leader_argv, TLLM_DISAGG_RUN_REMOTE_MPI_SESSION_CLIENT="0")
    wait_for(lambda: len(children_of(leader.pid)) == 1)
    (child,) = children_of(leader.pid)
    wait_for(lambda: Path(f"/proc/{child}/cmdline").read_bytes().startswith(b"python3\0"))
    scanner = Scanner(listen_ports=False)
    for _ in range(2):  # a second poll keeps the same answer
        found = {p.pid: p for p in scanner.scan() if p.pid in {leader.pid, child, rank.pid}}
        assert {pid: p.role for pid, p in found.items()} == {
            leader.pid: "follower",
            child: "server",
            rank.pid: "follower",
        }
        assert found[child].base_url == "http://localhost:8000"
        assert child not in found[leader.pid].worker_pids
