"""The agent's model routes (issue 40), in llama.cpp's router management API shapes: `GET
/v1/engines/TARGET/models`, and with `--allow-control` `POST .../models/load|unload` and
`.../sleep|wake`, done through the engine's own API. A real agent on loopback and a fake llama.cpp
router (a real process holding the socket a fake server answers on); both backends."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from fleet.test_agent import _token_file, _until, agent
from fleet.test_agent_hostile import ATTACKER, fetched_as, root_only, shared  # noqa: F401 (a fixture)
from helpers.fakeserver import Answer, FakeEngine, bound_socket, free_port, serving
from helpers.procs import Procs

ROUTER = ["llama-server", "--models-dir", "/m", "--host", "127.0.0.1", "--port", "{port}"]
TOKEN = "models-token-" + "z" * 32
AUTH = {"authorization": f"Bearer {TOKEN}"}


def _router(*states: tuple[str, str]) -> Answer:
    """llama.cpp router's GET /models (tools/server/server-models.cpp get_router_models)."""
    data = [{"id": name, "object": "model", "status": {"value": value, "args": []}} for name, value in states]
    return Answer(200, json.dumps({"object": "list", "data": data}).encode())


@contextmanager
def _router_engine(procs: Procs, routes: dict[str, list[Answer]]) -> Iterator[tuple[int, FakeEngine]]:
    sock = bound_socket()
    port = sock.getsockname()[1]
    with serving({"/health": [Answer(200, b'{"status":"ok"}')], **routes}, sock=sock) as server:
        proc = procs.start([a.format(port=port) for a in ROUTER], pass_fds=(sock.fileno(),))
        yield proc.pid, server


def _posted(server: FakeEngine) -> list[tuple[str, object]]:
    return [
        (path, json.loads(body) if body else None)
        for method, path, body in server.script.bodies
        if method == "POST"
    ]


def test_the_agent_lists_and_controls_models_as_llamacpps_router_does(tmp_path: Path, procs: Procs) -> None:
    routes = {
        "/models": [_router(("qwen", "loaded"), ("phi", "unloaded"), ("bad", "unloaded"))],
        "/models/load": [Answer(200, b'{"success":true}')],
        "/models/unload": [Answer(200, b'{"success":true}')],
    }
    token = _token_file(tmp_path, TOKEN)
    port, plain = free_port(), free_port()
    with (
        _router_engine(procs, routes) as (pid, server),
        agent("--listen", f"127.0.0.1:{port}", "--token-file", str(token), "--allow-control"),
        agent("--listen", f"127.0.0.1:{plain}"),
    ):
        base = f"http://127.0.0.1:{port}/v1/engines/{pid}"

        def listed() -> dict[str, object] | None:
            answer = httpx.get(f"{base}/models", headers=AUTH, timeout=10)
            return answer.json() if answer.status_code == 200 else None

        document = _until("the agent lists the router's models", listed)
        assert isinstance(document, dict)
        assert document["object"] == "list"
        entries = {entry["id"]: entry for entry in document["data"]}  # type: ignore[index]
        assert {name: entry["status"]["value"] for name, entry in entries.items()} == {
            "qwen": "loaded",
            "phi": "unloaded",
            "bad": "unloaded",
        }
        assert entries["qwen"]["owned_by"] == "llamacpp"
        assert entries["qwen"]["enginespec"]["state"] == "loaded"
        # the plain agent (no token, a root client on loopback) lists them too
        assert httpx.get(f"http://127.0.0.1:{plain}/v1/engines/{pid}/models", timeout=10).status_code == 200
        # load and unload, as a client of llama.cpp's router sends them
        loaded = httpx.post(f"{base}/models/load", headers=AUTH, json={"model": "qwen"}, timeout=60)
        assert (loaded.status_code, loaded.json()) == (200, {"success": True})
        unloaded = httpx.post(f"{base}/models/unload", headers=AUTH, json={"model": "phi"}, timeout=60)
        assert (unloaded.status_code, unloaded.json()) == (200, {"success": True})
        assert _posted(server) == [("/models/load", {"model": "qwen"}), ("/models/unload", {"model": "phi"})]
        # errors in the router's error shape
        missing = httpx.post(f"{base}/models/load", headers=AUTH, content=b"{}", timeout=10)
        assert missing.status_code == 400
        assert missing.json()["error"]["type"] == "invalid_request_error"
        no_sleep = httpx.post(f"{base}/sleep", headers=AUTH, timeout=10)
        assert no_sleep.status_code == 501
        assert no_sleep.json()["error"]["type"] == "not_supported_error"
        huge = httpx.post(f"{base}/models/load", headers=AUTH, content=b"x" * 20_000, timeout=10)
        assert huge.status_code == 413
        nobody = httpx.get(f"http://127.0.0.1:{port}/v1/engines/999999999/models", headers=AUTH, timeout=10)
        assert (nobody.status_code, nobody.json()["error"]["type"]) == (404, "not_found_error")
        # without the token, or on an agent without --allow-control, nothing is done
        assert httpx.post(f"{base}/models/load", json={"model": "qwen"}, timeout=10).status_code == 401
        assert (
            httpx.post(
                f"http://127.0.0.1:{plain}/v1/engines/{pid}/models/load", json={"model": "q"}, timeout=10
            ).status_code
            == 405
        )
        time.sleep(0.2)
        assert len(_posted(server)) == 2  # nothing more reached the engine


@root_only
def test_another_user_is_not_shown_what_roots_engine_serves(procs: Procs, shared: Path) -> None:  # noqa: F811
    """A client of another uid on loopback: 403 on the models route, and `models` withheld from
    `/v1/engines` (it was read with the engine's API key)."""
    routes = {"/models": [_router(("qwen", "loaded"))]}
    port = free_port()
    with _router_engine(procs, routes) as (pid, _server), agent("--listen", f"127.0.0.1:{port}"):
        base = f"http://127.0.0.1:{port}"

        def served() -> bool:
            documents = httpx.get(f"{base}/v1/engines", timeout=10).json()
            return any(d["pid"] == pid and d.get("models") for d in documents)

        _until("the agent read what the router serves", served)
        refused = fetched_as(ATTACKER, shared, port, "get", f"/v1/engines/{pid}/models").decode()
        assert refused.startswith("HTTP/1.1 403"), refused[:200]
        assert '"permission_error"' in refused
        assert "qwen" not in refused
        listed = fetched_as(ATTACKER, shared, port, "get", "/v1/engines").decode()
        (mine,) = [d for d in json.loads(listed.split("\r\n\r\n", 1)[1]) if d["pid"] == pid]
        assert mine["models"] is None
        assert "models" in mine["withheld"]
        # of this engine's document: other engines on a busy host (a test run beside) may serve a qwen
        assert "qwen" not in json.dumps(mine)
