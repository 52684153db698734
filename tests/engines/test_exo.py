"""exo (on the active backend): the `exo` console script of exo 1.x and 0.x (also run by its venv's
interpreter), `--no-api` nodes as followers, one-prompt runs and usage errors not servers, the
corpus's record, health on /v1/models against a loopback server, and a real process found by a
scan."""

from __future__ import annotations

from typing import Any

from enginespec.health.checks import check_health
from helpers.fakeserver import Answer
from helpers.procs import Procs
from helpers.simpleservers import engine_process, scanned
from helpers.tabletests import argv_tests, health_test

# argv -> (engine, model, first served name, host, port, role)
GOLDEN: list[tuple[list[str], tuple[Any, ...]]] = [
    (["exo"], ("exo", None, None, None, None, "server")),
    (["/opt/exo/venv/bin/python3", "/opt/exo/venv/bin/exo"], ("exo", None, None, None, None, "server")),
    # exo 1.x Args.parse
    (["exo", "--api-port", "52416", "-v", "-m"], ("exo", None, None, None, 52416, "server")),
    (["exo", "--offline", "--no-downloads", "--api-port=8080"], ("exo", None, None, None, 8080, "server")),
    (["exo", "--no-api", "--no-downloads"], ("exo", None, None, None, None, "follower")),
    # exo 0.x
    (
        ["exo", "--chatgpt-api-port", "52416", "--inference-engine", "tinygrad", "--disable-tui"],
        ("exo", None, None, None, 52416, "server"),
    ),
    (
        ["exo", "--discovery-module", "manual", "--discovery-config-path", "c.json"],
        ("exo", None, None, None, None, "server"),
    ),
]

NOT_SERVERS: list[list[str]] = [
    # exo 0.x: one prompt in the terminal, then exit
    ["exo", "run", "llama-3.2-3b"],
    ["exo", "run", "llama-3.2-3b", "--prompt", "hi"],
    ["exo", "--run-model", "llama-3.2-3b"],
    # argparse errors: no positional in 1.x, `command` choices=["run"] in 0.x
    ["exo", "llama-3.2-3b"],
    # Exoscale's CLI, also called `exo`, always with a command
    ["exo", "compute", "instance", "list"],
    ["exo", "--help"],
    ["exo-server"],
    ["pip", "install", "exo"],
]


test_golden_forms, test_look_alikes_are_not_servers = argv_tests(GOLDEN, NOT_SERVERS)


# src/exo/master/api.py get_models: an OpenAI-style list of every model card
MODELS = b'{"object":"list","data":[{"id":"llama-3.2-1b","hugging_face_id":"mlx-community/Llama-3.2-1B"}]}'


test_health = health_test(
    "exo",
    "/v1/models",
    [
        (Answer(200, MODELS), "ready"),
        (Answer(503, b""), "unhealthy"),
        (Answer(200, b"[" * 200_000), "ready"),
    ],
)


def test_a_running_node_is_found_and_checked(procs: Procs) -> None:
    routes = {"/v1/models": [Answer(200, MODELS)]}
    with engine_process(procs, ["exo", "--api-port", "{port}", "-v"], routes) as (process, _server):
        node = scanned(procs.start(["exo", "--no-api"]).pid)
        assert (process.engine, process.role) == ("exo", "server")
        assert check_health(process, timeout=5).state == "ready"
        assert (node.engine, node.role) == ("exo", "follower")
        assert check_health(node, timeout=5).state == "not_serving"
