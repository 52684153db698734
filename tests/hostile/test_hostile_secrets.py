"""A secrets audit: engines started with secrets in argv and environment, recipes holding them,
and every output path checked for them (repr, JSON, CLI text and JSON, errors, log records)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from pydantic import ValidationError

from enginespec import Recipe, RecipeFileError, Scanner, get_engine_spec, parse_argv, redact_argv
from enginespec.health.checks import check_health
from helpers.cli import enginespec
from helpers.fakeserver import Answer, bound_socket, serving
from helpers.procs import Procs

SECRETS = [f"sk-secret-{i}" for i in range(10)]


def _clean(*outputs: object) -> None:
    for output in outputs:
        text = output.decode("utf-8", "replace") if isinstance(output, bytes) else str(output)
        for secret in SECRETS:
            assert secret not in text, f"{secret} leaked"


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["vllm", "serve", "--api-key", SECRETS[0], SECRETS[1], "--port", "8000"], None),
        (["vllm", "serve", "/m", "--api-ke", SECRETS[2], "--api-k=" + SECRETS[3]], None),
        (["mlx_lm.server", "--model", "m", "--api-key", SECRETS[4]], None),
        (["python3", "-m", "sglang.launch_server", "--model-path", "m", "--admin-api-key", SECRETS[5]], None),
        (
            ["llama-server", "-m", "m.gguf", "--my-service-token", SECRETS[6], "--password=" + SECRETS[7]],
            None,
        ),
        # a secret flag with no value hides nothing else
        (["llama-server", "-m", "m.gguf", "--hf-token", "--port", "8210"], "8210"),
    ],
)
def test_secret_flags_in_every_spelling_are_redacted(argv: list[str], shown: str | None) -> None:
    redacted = redact_argv(argv)
    _clean(redacted)
    if shown:
        assert shown in redacted
        assert parse_argv(argv).effective_port == 8210  # type: ignore[union-attr]
    # several values of vLLM's --api-key are not the model
    assert parse_argv(argv).model not in SECRETS  # type: ignore[union-attr]


def test_engines_with_secrets_show_none_anywhere(procs: Procs, caplog: pytest.LogCaptureFixture) -> None:
    # the engines on `port` hold the socket the fake server answers on, as a real server does
    sock = bound_socket()
    port, held = sock.getsockname()[1], (sock.fileno(),)
    started = [
        procs.start(["vllm", "serve", "/m", "--api-key", SECRETS[0], SECRETS[1], "--port", str(port)], held),
        procs.start(["vllm", "serve", "/n", "--port", "1"], VLLM_API_KEY=SECRETS[2]),
        procs.start(["vllm", "serve", "/k", "--api-key", SECRETS[3] + "\n", "--port", str(port)], held),
        procs.start(["vllm", "serve", "/u", "--api-key", SECRETS[4] + "ключ", "--port", str(port)], held),
        procs.start(["llama-server", "-m", "/m.gguf", "--hf-token", SECRETS[5], "--port", "2"]),
    ]
    pids = {p.pid for p in started}
    caplog.set_level(logging.DEBUG)
    routes = {"/health": [Answer(200)], "/v1/models": [Answer(401, b'{"error":"unauthorized"}')]}
    with serving(routes, sock=sock):
        found = [p for p in Scanner().scan() if p.pid in pids]
        assert len(found) == len(started)
        healths = [check_health(p, verify_identity=True) for p in found]
        outputs = [
            enginespec("ps"),
            enginespec("ps", "--json"),
            *(enginespec("health", str(pid), "--verify-identity") for pid in pids),
            *(enginespec("health", str(pid), "--json") for pid in pids),
        ]
    _clean(*found, *(p.model_dump_json() for p in found), *healths, caplog.text)
    for out in outputs:
        _clean(out.stdout, out.stderr)
    bad_header = [h for h in healths if "cannot be sent" in h.reason]
    assert len(bad_header) == 2  # the keys with a newline and with non-ASCII characters


def test_recipes_and_commands_never_show_secrets(tmp_path: Path) -> None:
    recipe = Recipe(
        engine="vllm",
        model_path="m",
        api_key=SECRETS[0],
        env_vars={"HF_TOKEN": SECRETS[1], "OPENAI_API_KEY": SECRETS[2], "PLAIN": "visible"},
        extra_args={"hf-token": SECRETS[3]},
    )
    command = get_engine_spec("vllm").plan(recipe)
    _clean(repr(recipe), str(recipe), recipe.model_dump_json(), recipe.model_dump())
    _clean(repr(command), str(command), command.model_dump_json(), command.model_dump(), command.shell())
    assert "visible" in repr(recipe)
    # the one explicit way to the real values: what is handed to the OS
    assert SECRETS[0] in command.argv
    assert command.env["HF_TOKEN"] == SECRETS[1]
    docker = Recipe.model_validate(
        {
            **recipe.model_dump(),
            "api_key": SECRETS[0],
            "env_vars": recipe.env_vars,
            "extra_args": {},
            "runtime": {"kind": "docker", "image": "vllm/vllm-openai"},
        }
    )
    _clean(
        get_engine_spec("vllm").plan(docker).shell(), get_engine_spec("vllm").plan(docker).model_dump_json()
    )
    file = tmp_path / "r.toml"
    file.write_text(
        f'engine = "vllm"\nmodel_path = "m"\napi_key = "{SECRETS[4]}"\n'
        f'[env_vars]\nHF_TOKEN = "{SECRETS[5]}"\n'
    )
    text, as_json = enginespec("command", str(file)), enginespec("command", str(file), "--json")
    assert text.returncode == as_json.returncode == 0
    _clean(text.stdout, text.stderr, as_json.stdout)
    assert json.loads(as_json.stdout)["env"]["HF_TOKEN"] == "***"


@pytest.mark.parametrize(
    "document",
    [
        f'engine = "nope"\nmodel_path = "m"\napi_key = "{SECRETS[0]}"\n',
        f'engine = "vllm"\nmodel_path = "m"\napi_kye = "{SECRETS[1]}"\n',
        f'engine = "vllm"\nmodel_path = "m"\n[extra_args]\n"bad key!" = "{SECRETS[2]}"\n',
        f'engine = "vllm"\nmodel_path = "m"\n[env_vars]\n"BAD-NAME" = "{SECRETS[3]}"\n',
        f'engine = "vllm"\nmodel_path = "m"\nruntime = {{ kind = "podman", token = "{SECRETS[4]}" }}\n',
        f'engine = "vllm"\nmodel_path = "m"\n[extra_args]\nhf-token = "-{SECRETS[5]}"\n',
        f'engine = "vllm"\nmodel_path = "m"\napi_key = "-{SECRETS[6]}"\n',
    ],
)
def test_recipe_errors_name_the_field_never_the_secret(tmp_path: Path, document: str) -> None:
    file = tmp_path / "r.toml"
    file.write_text(document)
    with pytest.raises(RecipeFileError) as info:
        Recipe.from_file(file)
    _clean(str(info.value))
    out = enginespec("command", str(file))
    assert out.returncode == 2
    assert len(out.stderr.splitlines()) == 1
    _clean(out.stderr)


def test_yaml_syntax_errors_do_not_quote_the_line(tmp_path: Path) -> None:
    file = tmp_path / "r.yaml"
    file.write_text(f'engine: vllm\nmodel_path: m\napi_key: "{SECRETS[0]}\n  : [\n')
    with pytest.raises(RecipeFileError, match=r"invalid YAML at line \d+, column \d+") as info:
        Recipe.from_file(file)
    _clean(str(info.value))


def test_pydantic_errors_do_not_echo_inputs() -> None:
    with pytest.raises(ValidationError) as info:
        Recipe(engine="nope", model_path="m", api_key=SECRETS[0], env_vars={"HF_TOKEN": SECRETS[1]})
    _clean(str(info.value), repr(info.value))
