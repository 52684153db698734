"""Roles: what a recognised process is to its engine (server, runner, follower), on the active
backend; and every record of tests/data/argv-new-public.jsonl for the built-in engines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import enginespec
from enginespec import Scanner, parse_argv
from enginespec._host.backend import MatcherType
from enginespec.definition.signature import LaunchForm, Signature, signatures_json
from enginespec.health.checks import check_health
from helpers.facts import argv_facts
from helpers.procs import Procs

NEW_CORPUS = Path(__file__).parents[1] / "data" / "argv-new-public.jsonl"
BUILT_IN = set(enginespec.engine_ids())
VENV_PY = "/srv/venv/bin/python3"


def _records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in NEW_CORPUS.read_text().splitlines() if line.strip()]


def test_new_corpus_is_the_shared_one() -> None:
    records = _records()
    assert len(records) >= 130
    assert sum(r["engine"] in BUILT_IN for r in records) >= 11
    assert {r.get("role") for r in records if r["engine"] in BUILT_IN} == {"server", "follower", "runner"}


@pytest.mark.parametrize(
    "record",
    [r for r in _records() if r["engine"] in BUILT_IN or r["engine"] is None],
    ids=lambda r: f"{r['engine']}:{' '.join(r['argv'])[:70]}",
)
def test_new_corpus_built_in_and_null_records(record: dict[str, Any]) -> None:
    expected = (
        (
            record["engine"],
            record["model"],
            record["served_model_name"],
            record["host"],
            record["port"],
            record["role"],
        )
        if record["engine"] is not None
        else None
    )
    assert argv_facts(record["argv"], first_name=True) == expected


ROLES: list[tuple[list[str], str]] = [
    # vLLM: --headless starts engine cores only (vllm/entrypoints/cli/serve.py)
    (["vllm", "serve", "m", "--headless"], "follower"),
    (["vllm", "serve", "--headless", "m", "--data-parallel-start-rank", "2"], "follower"),
    ([VENV_PY, "/srv/venv/bin/vllm", "serve", "m", "--headless", "-dp", "4"], "follower"),
    (["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--headless"], "follower"),
    (["vllm", "serve", "m", "--no-headless"], "server"),
    # an external-LB data-parallel rank is a full server with its own port
    (["vllm", "serve", "m", "--data-parallel-rank", "1", "--port", "8001"], "server"),
    (["vllm", "serve", "m", "--data-parallel-size-local", "0"], "server"),
    # SGLang: a node rank other than 0 runs scheduler workers only
    (["python", "-m", "sglang.launch_server", "--model-path", "m", "--node-rank", "1"], "follower"),
    (["python", "-m", "sglang.launch_server", "--model-path", "m", "--node-rank=3"], "follower"),
    (["python", "-m", "sglang.launch_server", "--model-path", "m", "--node-rank=1"], "follower"),
    # SGLang does not read `_` as `-` (0.5.23): `--node_rank` is no flag of its, the rank stays 0
    (["python", "-m", "sglang.launch_server", "--model-path", "m", "--node_rank", "1"], "server"),
    (["sglang", "serve", "--model-path", "m", "--nnodes", "2", "--node-rank", "1"], "follower"),
    (["python", "-m", "sglang_router.launch_server", "--model-path", "m", "--node-rank", "2"], "follower"),
    (["python", "-m", "sglang.launch_server", "--model-path", "m", "--node-rank", "0"], "server"),
    (["python", "-m", "sglang.launch_server", "--model-path", "m", "--node-rank", "00"], "server"),
    (["python", "-m", "sglang.launch_server", "--model-path", "m", "--node-rank", "$RANK"], "server"),
    (["python", "-m", "sglang.launch_server", "--model-path", "m", "--nnodes", "2"], "server"),
    # the last occurrence wins, as in argparse
    (
        ["python", "-m", "sglang.launch_server", "--model-path", "m", "--node-rank", "1", "--node-rank", "0"],
        "server",
    ),
    # vLLM has no rank flag that makes a follower, SGLang no --headless
    (["vllm", "serve", "m", "--node-rank", "1"], "server"),
    (["python", "-m", "sglang.launch_server", "--model-path", "m", "--headless"], "server"),
    # the others
    (["llama-server", "-m", "a.gguf"], "server"),
    (["mlx_lm.server", "--model", "m"], "server"),
]


@pytest.mark.parametrize(("argv", "role"), ROLES, ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_roles(argv: list[str], role: str) -> None:
    inv = parse_argv(argv)
    assert inv is not None
    assert inv.role == role


def test_follower_keeps_its_facts() -> None:
    argv = [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "q/w",
        "--node-rank",
        "1",
        "--port",
        "40000",
    ]
    inv = parse_argv(argv)
    assert inv is not None
    assert (inv.engine, inv.model, inv.port, inv.role) == ("sglang", "q/w", 40000, "follower")
    assert inv.model_dump()["role"] == "follower"


def _signature(**fields: Any) -> Signature:
    return Signature(engine="toy", default_host="127.0.0.1", default_port=7000, **fields)


def test_role_of_a_form_is_data() -> None:
    sig = _signature(
        launch_forms=(
            LaunchForm(executables=("toy",), subcommand=("serve",)),
            LaunchForm(executables=("toy",), subcommand=("runner",), role="runner"),
            LaunchForm(executables=("toy-rpc",), role="follower"),
        ),
        model_flags=("--model",),
        no_value_flags=frozenset({"--headless"}),
        follower_flags=frozenset({"--headless"}),
        follower_rank_flags=("--rank",),
    )
    matcher = MatcherType(signatures_json([sig]))
    assert matcher.parse(["toy", "serve", "--model", "m"]) == (0, "m", [], None, None, "server")
    assert matcher.parse(["toy", "runner", "--model", "m", "--port", "1"]) == (
        0,
        "m",
        [],
        None,
        None,
        "runner",
    )
    assert matcher.parse(["/usr/bin/toy-rpc"]) == (0, None, [], None, None, "follower")
    assert matcher.parse(["toy", "serve", "--headless"]) == (0, None, [], None, None, "follower")
    assert matcher.parse(["toy", "serve", "--rank", "2"]) == (0, None, [], None, None, "follower")
    # a runner stays a runner whatever its flags say
    assert matcher.parse(["toy", "runner", "--headless", "--rank", "1"]) == (
        0,
        None,
        [],
        None,
        None,
        "runner",
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"follower_flags": frozenset({"port"})}, "not a flag name"),
        ({"follower_rank_flags": ("--port",), "port_flags": ("--port",)}, "two different facts"),
        ({"follower_flags": frozenset({"--model"}), "model_flags": ("--model",)}, "two different facts"),
        ({"follower_rank_flags": ("-r",), "aliases": {"-r": "--rank"}}, "is an alias"),
        ({"follower_rank_flags": tuple(f"--r{i}" for i in range(9))}, "at most 8"),
    ],
)
def test_bad_follower_data_is_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _signature(launch_forms=(LaunchForm(executables=("toy",)),), **fields)


def test_bad_role_is_refused() -> None:
    with pytest.raises(ValueError, match="role"):
        LaunchForm(executables=("toy",), role="leader")  # type: ignore[arg-type]


def test_scanned_processes_carry_their_role(procs: Procs) -> None:
    started = {
        procs.start(["vllm", "serve", "/models/a", "--headless", "--port", "41201"]).pid: "follower",
        procs.start(["vllm", "serve", "/models/a", "--port", "41202"]).pid: "server",
        procs.start(
            ["python3", "-m", "sglang.launch_server", "--model-path", "/m", "--node-rank", "1"]
        ).pid: "follower",
        procs.start(
            ["python3", "-m", "sglang.launch_server", "--model-path", "/m", "--node-rank", "0"]
        ).pid: "server",
    }
    found = {p.pid: p.role for p in Scanner(listen_ports=False).scan() if p.pid in started}
    assert found == started
    assert {p.pid: p.role for p in enginespec.scan(listen_ports=False) if p.pid in started} == started


@pytest.mark.parametrize(
    ("argv", "facts"),
    [
        (["rpc-server", "-H", "0.0.0.0", "-p", "50052"], ("0.0.0.0", 50052)),
        (["rpc-server", "--port", "50053", "--host", "::"], ("::", 50053)),
        (["/opt/llama.cpp/build/bin/rpc-server", "-d", "CUDA0,CUDA1", "-c"], (None, None)),
        # rpc_server_params_parse takes the next argument as the value, whatever it is
        (["rpc-server", "-H", "--help"], ("--help", None)),
        (["rpc-server", "--help"], None),
        (["rpc-server", "-h"], None),
        # a host or port flag with no value: rpc-server exits ("Invalid parameters")
        (["rpc-server", "-H", "0.0.0.0", "-p"], None),
        (["rpc-server", "-p", "50052", "--host"], None),
    ],
)
def test_llama_cpps_rpc_server_is_a_follower_with_its_own_address(
    argv: list[str], facts: tuple[str | None, int | None] | None
) -> None:
    inv = parse_argv(argv)
    if facts is None:
        assert inv is None
        return
    assert inv is not None
    # its -H/-p are its RPC socket's: reported as its address, never as an HTTP server's
    assert (inv.engine, inv.role, inv.model, inv.host, inv.port) == ("llamacpp", "follower", None, *facts)
    # where it listens: rpc-server's own defaults (127.0.0.1:50052), not llama-server's 8080
    assert (inv.effective_host, inv.effective_port) == (facts[0] or "127.0.0.1", facts[1] or 50052)


def test_an_rpc_server_is_scanned_as_a_follower_and_not_checked(procs: Procs) -> None:
    proc = procs.start(["rpc-server", "-H", "127.0.0.1", "-p", "50052"])
    (found,) = [p for p in Scanner().scan() if p.pid == proc.pid]
    assert (found.engine, found.role, found.base_url) == ("llamacpp", "follower", None)
    assert check_health(found).state == "not_serving"
