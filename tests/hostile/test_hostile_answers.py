"""What another user's engine answers, and the model files and argv it names, never stop, blind or
mislead enginespec (issue 44: one bounded reader). Every answer goes through one reader with a
depth, size and value limit; numbers are finite and in range or a problem naming the field;
every JSON enginespec prints is strict. Real processes of `nobody` holding real sockets on
127.0.0.1, real model files on disk, the real CLI in a subprocess."""

from __future__ import annotations

import json
import os
import socket
import stat
import struct
import sys
from pathlib import Path

import pytest

from enginespec import EngineProcess, Scanner
from enginespec.fleet.remote import fetch_remote
from enginespec.health.checks import check_health
from enginespec.health.load import check_load
from enginespec.lifecycle.probing import installed_versions
from enginespec.modelfacts import hf_facts
from enginespec.untrusted.documents import DocumentError, parse_json
from helpers.cli import enginespec
from helpers.fakeserver import Answer, bound_socket, serving
from helpers.procs import Procs

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="starts processes as nobody: needs root")

OK = b'{"status":"ok"}'
#: the hostile bodies: a nesting of 100,000 (RecursionError in json.loads), numbers no float
#: holds or JSON writes (OverflowError, `Infinity` in -o json), a 400-digit integer.
DEEP = b"[" * 100_000 + b"]" * 100_000
HOSTILE_BODIES = {
    "deep": DEEP,
    "deep-object": b'{"status":' * 50_000 + b'"ok"' + b"}" * 50_000,
    "infinite": b'{"status":"ok","data":[{"id":"m","size":1e400}]}',
    "nan": b'{"status":"ok","data":[{"id":"m","size":NaN}]}',
    "long-integer": b'{"status":"ok","data":[{"id":"m","size":' + b"9" * 400 + b"}]}",
}


def strict(text: str | bytes) -> object:
    """``text`` parsed as strict JSON: ``NaN``/``Infinity`` (which Python writes unless told not
    to) fail the test."""

    def refuse(literal: str) -> object:
        raise AssertionError(f"not strict JSON: {literal}")

    return json.loads(text, parse_constant=refuse)


def _scanned(pid: int) -> EngineProcess:
    found = [p for p in Scanner().scan() if p.pid == pid]
    assert len(found) == 1, pid
    return found[0]


def _engine_of_nobody(procs: Procs, nobody_idle: Path, argv: list[str], sock: socket.socket) -> EngineProcess:
    """A process of `nobody` with ``argv``, holding ``sock`` (the engine's listening socket,
    answered by this test's fake server)."""
    port = str(sock.getsockname()[1])
    proc = procs.start([*argv, "--port", port], (sock.fileno(),), executable=nobody_idle, user="nobody")
    return _scanned(proc.pid)


def _ps(*extra: str) -> list[dict[str, object]]:
    listed = enginespec("ps", "--json", "--timeout", "5", *extra)
    assert listed.returncode == 0, listed.stderr.decode(errors="replace")[-2000:]
    documents = strict(listed.stdout)
    assert isinstance(documents, list)
    return documents


# --- the reader ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(HOSTILE_BODIES))
def test_the_reader_refuses_hostile_documents_with_its_one_error(name: str) -> None:
    with pytest.raises(DocumentError) as raised:
        parse_json(HOSTILE_BODIES[name])
    assert isinstance(raised.value, ValueError)  # callers that refuse malformed answers refuse it


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b'{"data":[{"id":"m","size":1e400}]}', "data[0].size: inf is not a finite number"),
        (b'{"a":{"b":-Infinity}}', "a.b: -inf is not a finite number"),
        (b'{"n":' + b"1" * 400 + b"}", "n: holds an integer of 400 digits (at most 64)"),
        (b'{"n":' + b"1" * 30 + b"}", "n: holds an integer of 30 digits, out of range (64 bits)"),
        # past the 4,300 digits Python's parser converts: still named by its length and field
        (b'{"n":[0,' + b"1" * 5000 + b"]}", "n[1]: holds an integer of 5000 digits (at most 64)"),
        (b"[" + b"0," * 300 + b"-1e999]", "[300]: -inf is not a finite number"),
        (b"[" * 40 + b"]" * 40, "nested deeper than 32 levels"),
        (b'"' + b"x" * 100 + b'"', "larger than 64 bytes"),
    ],
)
def test_a_refused_number_is_named_with_its_field(body: bytes, why: str) -> None:
    with pytest.raises(DocumentError) as raised:
        parse_json(body, max_bytes=64 if b"xxxx" in body else None)
    assert why in str(raised.value)
    assert len(str(raised.value)) < 200  # never the document echoed


def test_a_document_of_more_values_than_allowed_is_refused_whatever_it_holds() -> None:
    """An 800 KB answer of 400,000 numbers (a hostile /health) is refused for its count; one of
    exactly the allowed count is taken."""
    many = b'{"status":"ok","data":[' + b",".join([b"0"] * 400_000) + b"]}"
    with pytest.raises(DocumentError, match="holds more than 10000 values"):
        parse_json(many)
    assert parse_json(b"[" + b",".join([b"0"] * 9_999) + b"]") == [0] * 9_999  # the list is a value too
    with pytest.raises(DocumentError, match="holds more than 10000 values"):
        parse_json(b"[" + b",".join([b"0"] * 10_000) + b"]")


def test_what_the_reader_takes_is_what_json_gives() -> None:
    body = b'{"data":[{"id":"m","created":1700000000,"f":0.5,"big":18446744073709551615,"neg":-3}]}'
    assert parse_json(body) == json.loads(body)


def test_strict_writer_never_prints_infinity_and_says_what_it_nulled() -> None:
    from enginespec.untrusted.documents import dumps

    document = {"a": 1.5, "b": float("inf"), "inner": {"c": float("nan"), "problems": []}, "problems": []}
    text = dumps(document)
    shown = strict(text)
    assert shown == {
        "a": 1.5,
        "b": None,
        "inner": {"c": None, "problems": ["inner.c: not a finite number (nan), shown as null"]},
        "problems": ["b: not a finite number (inf), shown as null"],
    }
    assert strict(dumps([float("-inf")])) == [None]


# --- HTTP answers of engines ---------------------------------------------------------------------


@root_only
@pytest.mark.parametrize("name", sorted(HOSTILE_BODIES))
def test_a_hostile_health_answer_is_a_state_and_ps_health_survive(
    name: str, procs: Procs, nobody_idle: Path
) -> None:
    """llama-server's /health is read as JSON (its `status`): a body nested 100,000 deep raised
    RecursionError out of `ps`, `health` and every loop."""
    body = HOSTILE_BODIES[name]
    sock = bound_socket()
    with serving({"/health": [Answer(200, body)], "/v1/models": [Answer(200, body)]}, sock=sock):
        process = _engine_of_nobody(procs, nobody_idle, ["llama-server", "-m", "m"], sock)
        health = check_health(process, timeout=5)
        assert health.state == "unknown", health
        assert health.reason == "unexpected /health body"
        shown = {d["pid"]: d for d in _ps()}
        assert shown[process.pid]["health"]["state"] == "unknown"  # type: ignore[index]
        single = enginespec("health", str(process.pid), "--json", "--timeout", "5")
        assert strict(single.stdout)["state"] == "unknown", single.stderr  # type: ignore[index]


@root_only
@pytest.mark.parametrize("name", sorted(HOSTILE_BODIES))
def test_a_hostile_model_list_is_unreadable_not_a_crash(name: str, procs: Procs, nobody_idle: Path) -> None:
    """/health says ready; /v1/models (read to verify the served model) is the hostile body."""
    sock = bound_socket()
    routes = {"/health": [Answer(200, OK)], "/v1/models": [Answer(200, HOSTILE_BODIES[name])]}
    with serving(routes, sock=sock):
        process = _engine_of_nobody(procs, nobody_idle, ["llama-server", "-m", "m"], sock)
        health = check_health(process, timeout=5, verify_identity=True)
        assert (health.state, health.reason) == ("unknown", "/v1/models unreadable (HTTP 200)"), health
        single = enginespec("health", str(process.pid), "--verify", "--json", "--timeout", "5")
        assert strict(single.stdout)["state"] == "unknown", single.stderr  # type: ignore[index]


@root_only
@pytest.mark.parametrize(
    ("engine", "path"),
    [
        (["ollama", "serve"], "/api/ps"),
        (["python3", "-m", "llama_cpp.server", "--model", "m"], "/v1/models"),
        (["python3", "koboldcpp.py", "--model", "m"], "/api/extra/version"),
        (["python3", "main.py"], "/health"),
    ],
    ids=["ollama", "llama-cpp-python", "koboldcpp", "tabbyapi"],
)
def test_each_engines_own_body_parsing_takes_a_deep_answer(
    engine: list[str], path: str, procs: Procs, nobody_idle: Path, nobody_dir: Path
) -> None:
    """The engines' own parsers (Ollama's loaded models, llama-cpp-python's model list,
    KoboldCpp's and TabbyAPI's health) caught ValueError only: a deep body ended `ps`."""
    for name in ("common/args.py", "common/tabby_config.py", "endpoints/core/router.py", "main.py"):
        (nobody_dir / name).parent.mkdir(parents=True, exist_ok=True)  # what TabbyAPI's checkout holds
        (nobody_dir / name).write_text("")
    sock = bound_socket()
    routes = {"/": [Answer(200, OK)], path: [Answer(200, DEEP)], "/health": [Answer(200, DEEP)]}
    if path == "/api/ps":  # Ollama is ready on `/`, then says which models it holds
        routes = {"/": [Answer(200, b"Ollama is running")], "/api/ps": [Answer(200, DEEP)]}
    with serving(routes, sock=sock):
        port = str(sock.getsockname()[1])
        env = {"OLLAMA_HOST": f"127.0.0.1:{port}"} if engine[0] == "ollama" else {}
        argv = engine if engine[0] == "ollama" else [*engine, "--port", port]
        proc = procs.start(argv, (sock.fileno(),), nobody_dir, executable=nobody_idle, user="nobody", **env)
        found = [p for p in Scanner().scan() if p.pid == proc.pid]
        assert len(found) == 1, found
        health = check_health(found[0], timeout=5)
        assert health.state in ("unknown", "ready"), health  # Ollama's models: none known
        assert health.model_ids == ()
        shown = {d["pid"]: d for d in _ps()}
        assert proc.pid in shown


def _metrics(value: str, count: int = 2) -> bytes:
    lines = ["# TYPE vllm:num_requests_running gauge"]
    lines += [f'vllm:num_requests_running{{engine="{n}"}} {value}' for n in range(count)]
    lines += ["# TYPE vllm:generation_tokens_total counter"]
    lines += [f'vllm:generation_tokens_total{{engine="{n}"}} {value}' for n in range(count)]
    return ("\n".join(lines) + "\n").encode()


@root_only
def test_a_metrics_sample_of_400_digits_is_dropped(procs: Procs, nobody_idle: Path) -> None:
    """The parser gives `1000...0` (400 digits) as an int: `math.isfinite` raised OverflowError
    (found by test_fuzz_answers)."""
    sock = bound_socket()
    metrics = Answer(200, _metrics("1" + "0" * 400, count=1), content_type="text/plain")
    with serving({"/health": [Answer(200, b"")], "/metrics": [metrics]}, sock=sock):
        process = _engine_of_nobody(procs, nobody_idle, ["vllm", "serve", "m"], sock)
        load = check_load(process, timeout=5)
        assert load.reason == "/metrics: none of the engine's load metrics in the answer", load
        one = enginespec("load", str(process.pid), "--json", "--timeout", "5")
        assert one.returncode == 1, one.stderr  # no reading: the command's own exit status
        assert strict(one.stdout)["available"] is False  # type: ignore[index]


@root_only
def test_metrics_that_add_up_to_infinity_are_out_of_range_not_an_overflow(
    procs: Procs, nobody_idle: Path
) -> None:
    """Two samples of 1e308 sum to inf: `round(inf)` ended `ps --load`, `watch` and `exporter
    --load` with OverflowError; a float sum printed `Infinity` in -o json."""
    sock = bound_socket()
    routes = {
        "/health": [Answer(200, b"")],
        "/metrics": [Answer(200, _metrics("1e308"), content_type="text/plain")],
    }
    with serving(routes, sock=sock):
        process = _engine_of_nobody(procs, nobody_idle, ["vllm", "serve", "m"], sock)
        load = check_load(process, timeout=5)
        assert load.available, load
        assert (load.requests_running, load.generated_tokens_total) == (None, None)
        assert "vllm:num_requests_running, vllm:generation_tokens_total: out of range" in load.reason
        again = check_load(process, previous=load, timeout=5)
        assert again.tokens_per_second is None
        shown = {d["pid"]: d for d in _ps("--load", "--load-interval", "0.2")}
        assert shown[process.pid]["load"]["requests_running"] is None  # type: ignore[index]
        table = enginespec("ps", "--load", "--load-interval", "0.2", "--timeout", "5")
        assert table.returncode == 0, table.stderr
        one = enginespec("load", str(process.pid), "--json", "--timeout", "5")
        assert one.returncode == 0, one.stderr
        assert strict(one.stdout)["requests_running"] is None  # type: ignore[index]


@root_only
def test_metrics_within_range_still_add_up(procs: Procs, nobody_idle: Path) -> None:
    from enginespec.health.load import MAX_TOTAL

    sock = bound_socket()
    half = f"{MAX_TOTAL / 2:.0f}"
    routes = {
        "/health": [Answer(200, b"")],
        "/metrics": [Answer(200, _metrics(half), content_type="text/plain")],
    }
    with serving(routes, sock=sock):
        process = _engine_of_nobody(procs, nobody_idle, ["vllm", "serve", "m"], sock)
        load = check_load(process, timeout=5)
        assert load.requests_running == int(MAX_TOTAL)
        assert "out of range" not in load.reason


# --- model files and argv numbers ----------------------------------------------------------------

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
}


def _model_folder(where: Path, config: bytes | None = None, header: bytes | None = None) -> Path:
    folder = where / "model"
    folder.mkdir()
    (folder / "config.json").write_bytes(config if config is not None else json.dumps(CONFIG).encode())
    if header is not None:
        (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 64)
    for path in (folder, *folder.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


def _model_of(pid: int) -> dict[str, object]:
    shown = enginespec("model", str(pid), "--json", timeout=60)
    assert b"Traceback" not in shown.stderr, shown.stderr.decode(errors="replace")[-2000:]
    if shown.returncode != 0:
        return {"error": shown.stderr.decode(errors="replace")}
    document = strict(shown.stdout)
    assert isinstance(document, dict)
    return document


LONG = b"1" + b"0" * 399
#: the ranges the vLLM estimate takes (what vLLM itself accepts)
_RANGES = {
    "--max-model-len": "(1 to 1.09951e+12)",
    "--gpu-memory-utilization": "(0 to 1)",
    "--tensor-parallel-size": "(1 to 65536)",
}


@root_only
@pytest.mark.parametrize(
    ("config", "argv", "why"),
    [
        (
            json.dumps({**CONFIG, "hidden_size": 0}).replace(
                '"hidden_size": 0', f'"hidden_size": {LONG.decode()}'
            ),
            [],
            "config.json: hidden_size: holds an integer of 400 digits",
        ),
        (json.dumps(CONFIG), ["--max-model-len", "1e400"], "--max-model-len '1e400': out of range"),
        (json.dumps(CONFIG), ["--max-model-len", "nan"], "--max-model-len 'nan': out of range"),
        (
            json.dumps(CONFIG),
            ["--gpu-memory-utilization", "inf"],
            "--gpu-memory-utilization 'inf': out of range",
        ),
        (
            json.dumps(CONFIG),
            ["--tensor-parallel-size", "1e400"],
            "--tensor-parallel-size '1e400': out of range",
        ),
    ],
    ids=["config-400-digits", "max-model-len-1e400", "max-model-len-nan", "utilization-inf", "tp-1e400"],
)
def test_hostile_numbers_of_a_model_are_a_problem_and_ps_survives(
    config: str, argv: list[str], why: str, procs: Procs, nobody_idle: Path, nobody_dir: Path
) -> None:
    """A 400-digit integer in config.json or `--max-model-len 1e400` in argv made the estimate
    raise OverflowError: `model PID` crashed, `ps` (its MODEL FACTS) and the exporter died."""
    folder = _model_folder(nobody_dir, config.encode())
    proc = procs.start(
        ["vllm", "serve", str(folder), *argv, "--port", "1"], executable=nobody_idle, user="nobody"
    )
    shown = _model_of(proc.pid)
    if argv:  # the files' facts stand; the estimate is the problem, naming the flag
        facts = shown["facts"]
        assert isinstance(facts, dict), shown
        assert facts["layers"] == 2
        assert facts["estimate"] is None
        assert [p for p in facts["problems"] if why in p] == [
            f"no memory estimate: {why} " + _RANGES[argv[0]]
        ]
    else:  # config.json itself is refused, naming the file and the field
        assert why in str(shown["error"]), shown
    wide = enginespec("ps", "--no-health", "--wide", timeout=60)
    assert wide.returncode == 0, wide.stderr.decode(errors="replace")[-2000:]
    assert any(line.startswith(f"{proc.pid} ".encode()) for line in wide.stdout.splitlines())
    _ps("--no-health")


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["-c", "1" + "0" * 399], "--ctx-size '" + "1" + "0" * 31 + "...': out of range"),
        (["-c", "99999999999"], "--ctx-size '99999999999': out of range"),
        (["-ts", "1e400,1"], "--tensor-split '1e400': out of range"),
        (["-ts", "nan,1"], "--tensor-split 'nan': out of range"),
        (["-ngl", "9" * 30], "--n-gpu-layers"),
    ],
)
def test_llamacpp_estimate_takes_no_unbounded_number(tmp_path: Path, argv: list[str], why: str) -> None:
    from enginespec.engines import llamacpp
    from enginespec.modelfacts import ModelError, ModelFacts

    facts = ModelFacts(format="gguf", files=("m.gguf",), context_length=4096, layer_bytes=(10, 10))
    with pytest.raises(ModelError) as raised:
        llamacpp.estimate_memory(facts, ["llama-server", "-m", "m.gguf", *argv], ["GPU0", "GPU1"])
    assert why in str(raised.value)


@root_only
def test_a_safetensors_offset_of_10_to_the_400_is_a_problem(
    procs: Procs, nobody_idle: Path, nobody_dir: Path
) -> None:
    """An offset of 10**400 turned every exporter scrape into a 500 (and `model PID` into a
    traceback): the header is refused, naming the file and the field."""
    header = b'{"w":{"dtype":"F16","shape":[2],"data_offsets":[0,' + b"1" + b"0" * 400 + b"]}}"
    folder = _model_folder(nobody_dir, header=header)
    proc = procs.start(["vllm", "serve", str(folder), "--port", "1"], executable=nobody_idle, user="nobody")
    facts = _model_of(proc.pid)["facts"]
    assert isinstance(facts, dict)
    problems = facts["problems"]
    assert any(
        "model.safetensors: safetensors header w.data_offsets[1]: holds an integer of 401 digits" in p
        for p in problems
    ), facts
    assert facts["weight_bytes"] is None
    _ps("--no-health")


def test_huge_but_64_bit_tensors_are_not_counted_past_range(tmp_path: Path) -> None:
    big = str((1 << 63) - 1)
    header = ('{"w":{"dtype":"F16","shape":[' + big + "," + big + '],"data_offsets":[0,2]}}').encode()
    folder = _model_folder(tmp_path, header=header)
    facts = hf_facts(str(folder))
    assert facts.parameters is None  # a shape of 2**126 elements is no count
    assert strict(json.dumps(facts.model_dump(mode="json")))


def _linked_model(where: Path, count: int, link: str) -> tuple[Path, int]:
    """A folder whose index names ``count`` shards, every one a link (hard or symbolic) to one
    safetensors file: (folder, that file's weight bytes)."""
    folder = _model_folder(where)
    tensors = {f"t{n}": {"dtype": "F16", "shape": [4], "data_offsets": [8 * n, 8 * n + 8]} for n in range(8)}
    text = json.dumps(tensors).encode()
    original = folder / "one.safetensors"
    original.write_bytes(struct.pack("<Q", len(text)) + text + b"\0" * 64)
    original.chmod(0o644)
    weight_map = {}
    for n in range(count):
        name = f"model-{n:05d}-of-{count:05d}.safetensors"
        (os.link if link == "hard" else lambda a, b: os.symlink(os.path.basename(a), b))(
            str(original), str(folder / name)
        )
        weight_map[f"layer{n}"] = name
    index = {"metadata": {"total_size": 64}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "model.safetensors.index.json").chmod(0o644)
    return folder, 64


@pytest.mark.parametrize("link", ["hard", "symbolic"])
def test_links_to_one_header_are_read_once(tmp_path: Path, link: str) -> None:
    """1,000 names of one safetensors file were read (and counted) 1,000 times."""
    folder, once = _linked_model(tmp_path, 1000, link)
    facts = hf_facts(str(folder))
    assert facts.weight_bytes == once  # counted once, as the file holds it
    assert facts.parameters == 8 * 4
    assert sum(1 for f in facts.files if f.endswith(".safetensors")) == 1


def test_4096_links_are_past_the_shard_cap_and_said(tmp_path: Path) -> None:
    """4,096 names of one header: `model PID` read each (an hour with 16 MiB headers), `ps` 9 s;
    now no shard is opened, and the facts say why there are no weights."""
    folder, _once = _linked_model(tmp_path, 4096, "hard")
    facts = hf_facts(str(folder))
    assert facts.weight_bytes == 64  # the index's own total_size, as with any unread shard
    assert facts.parameters is None
    index = folder / "model.safetensors.index.json"
    assert facts.problems == (f"{index}: 4096 shards, more than 1024: weights not read",)
    assert not any(f.endswith(".safetensors") for f in facts.files)


def test_headers_past_the_total_cap_are_cut_and_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Distinct shards whose headers together pass MAX_HEADERS_TOTAL: reading stops, and says so."""
    import enginespec.models.huggingface as modelfacts

    folder = _model_folder(tmp_path)
    weight_map = {}
    for n in range(6):
        text = json.dumps(
            {f"t{n}": {"dtype": "F16", "shape": [1], "data_offsets": [0, 2]}, "pad": "x" * 1000}
        )
        (folder / f"s{n}.safetensors").write_bytes(struct.pack("<Q", len(text)) + text.encode() + b"\0" * 2)
        weight_map[f"t{n}"] = f"s{n}.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    assert modelfacts.MAX_HEADERS_TOTAL == 64 << 20
    monkeypatch.setattr(modelfacts, "MAX_HEADERS_TOTAL", 3000)
    facts = hf_facts(str(folder))
    assert facts.weight_bytes is None
    assert (
        f"{folder}: safetensors headers over 3000 bytes in all: 2 of 6 shards read, weights not counted"
        in facts.problems
    )


@root_only
def test_model_pid_with_links_of_nobody_counts_once(
    procs: Procs, nobody_idle: Path, nobody_dir: Path
) -> None:
    folder, once = _linked_model(nobody_dir, 1000, "hard")
    proc = procs.start(["vllm", "serve", str(folder), "--port", "1"], executable=nobody_idle, user="nobody")
    facts = _model_of(proc.pid)["facts"]
    assert facts["weight_bytes"] == once, facts  # type: ignore[index]


# --- other answers: a runtime's API, an agent, a subprocess --------------------------------------


def test_a_container_runtimes_hostile_answer_is_no_container(tmp_path: Path) -> None:
    """A deep answer was refused before (RecursionError caught); a 400-digit pid was taken."""
    from enginespec.process.containers import api_inspect

    cid = "a" * 64

    def inspect(state: bytes) -> object:
        body = b'{"Id":"' + cid.encode() + b'","Name":"/web","State":' + state + b"}"
        path = str(tmp_path / f"docker{len(state)}.sock")
        with serving({f"/containers/{cid}/json": [Answer(200, body)]}, unix_path=path):
            return api_inspect(path, cid, 5.0)

    assert inspect(b"[" * 100_000 + b"]" * 100_000) is None
    assert inspect(b'{"Pid":' + b"9" * 400 + b"}") is None
    inspected = inspect(b'{"Pid":42}')
    assert inspected is not None
    assert (inspected.name, inspected.pid) == ("web", 42)  # type: ignore[attr-defined]


@pytest.fixture
def agent_document(procs: Procs) -> str:
    """An engine as an agent serves it (the `ps --json` object of a real process), its
    ``start_time`` left as ``START`` for the test to fill in."""
    proc = procs.start(["vllm", "serve", "m", "--port", "1"])
    (document,) = [d for d in _ps("--no-health") if d["pid"] == proc.pid]
    document["start_time"] = "START"
    return json.dumps([document])


@pytest.mark.parametrize(
    "number",
    ["1e400", "NaN", "-Infinity", "9" * 400],
    ids=["infinite", "nan", "minus-infinity", "400-digits"],
)
def test_an_agents_hostile_number_is_that_hosts_error_alone(agent_document: str, number: str) -> None:
    """A non-finite or out-of-range start time from one agent: before, taken as `inf` (and
    printed as `Infinity` by `ps --remote -o json`) or as a 400-digit integer."""
    body = agent_document.replace('"START"', number).encode()
    fine = agent_document.replace('"START"', "1700000000.5").encode()
    with (
        serving({"/v1/engines": [Answer(200, body)]}) as bad,
        serving({"/v1/engines": [Answer(200, fine)]}) as good,
    ):
        reports = fetch_remote([bad.url, good.url], timeout=5)
        shown = enginespec("ps", "--remote", bad.url, "--remote", good.url, "--json", "--timeout", "5")
    assert reports[0].error is not None
    assert reports[0].error.startswith("not an agent's answer: engines[0].start_time: "), reports[0]
    assert reports[1].error is None
    assert [e.process.start_time for e in reports[1].engines] == [1700000000.5]
    assert b"Traceback" not in shown.stderr
    listed = strict(shown.stdout)
    assert isinstance(listed, list)
    assert [d["start_time"] for d in listed] == [1700000000.5]
    assert b"not an agent's answer" in shown.stderr


def test_an_agents_deep_answer_is_that_hosts_error_alone() -> None:
    with serving({"/v1/engines": [Answer(200, DEEP)]}) as bad:
        (report,) = fetch_remote([bad.url], timeout=5)
    assert report.error == "not an agent's answer: is nested deeper than 32 levels"


def test_a_pythons_deep_answer_to_the_version_probe_is_no_version(tmp_path: Path) -> None:
    python = tmp_path / "python"
    python.write_text(f"#!{sys.executable}\nprint('[' * 100000 + ']' * 100000)\n")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    assert installed_versions(python, ["vllm"]) == {}


def test_a_yaml_config_infinity_is_refused() -> None:
    from enginespec.untrusted.documents import parse_yaml

    for text in (b"max_model_len: .inf\n", b"x: [1, .nan]\n", b"x: 1.0e+400\n"):
        with pytest.raises(DocumentError, match="not finite"):
            parse_yaml(text)
    assert parse_yaml(b"x: 0.5\n") == {"x": 0.5}


def test_an_agents_argv_bytes_that_are_not_utf8_are_kept(agent_document: str) -> None:
    """Lone surrogates (``\\udcff``: argv bytes that are not UTF-8, as `ps --json` writes them)
    are enginespec's own escapes: the reader takes them from an agent, as before."""
    document = json.loads(agent_document.replace('"START"', "1700000000.5"))
    document[0]["argv"] = [*document[0]["argv"], "caf\udcff"]
    with serving({"/v1/engines": [Answer(200, json.dumps(document).encode())]}) as agent:
        (report,) = fetch_remote([agent.url], timeout=5)
    assert report.error is None, report
    assert report.engines[0].process.argv[-1] == "caf\udcff"
