"""Launch forms beyond plain names, on the active backend: renamed llama-server builds
(`llama-server-<suffix>`), pre-rename `server` builds (only with llama.cpp evidence), the unified
`llama serve`, `.exe` on every executable; and the look-alikes that must stay unrecognised."""

from __future__ import annotations

from typing import Any

import pytest

from enginespec import Scanner, parse_argv
from enginespec._host.backend import MatcherType
from enginespec.definition.signature import Evidence, LaunchForm, Signature, signatures_json
from enginespec.engines import all_signatures
from helpers.facts import argv_facts
from helpers.procs import Procs

GGUF = "/models/qwen2.5-7b-instruct-q4_k_m.gguf"


APP = "llama_cpp.server.app:create_app"

SERVERS: list[tuple[list[str], tuple[Any, ...]]] = [
    # uvicorn serving llama-cpp-python's app factory (its docker/simple/run.sh), in any position
    # after uvicorn's switches, as a console script, under its interpreter or as a module
    (
        ["uvicorn", "--factory", APP, "--host", "0.0.0.0", "--port", "8000"],
        ("llamacpp-python", None, (), "0.0.0.0", 8000, "server"),
    ),
    (
        ["/usr/bin/python3", "/venv/bin/uvicorn", "--port", "9000", "--reload", "--factory", APP],
        ("llamacpp-python", None, (), None, 9000, "server"),
    ),
    (["python", "-m", "uvicorn", APP, "--factory"], ("llamacpp-python", None, (), None, None, "server")),
    # with --config_file, llama-cpp-python takes host and port from the file, never from argv
    (
        ["python3", "-m", "llama_cpp.server", "--config_file", "c.json", "--port", "9", "--host", "::"],
        ("llamacpp-python", None, (), None, None, "server"),
    ),
    (
        ["python3", "-m", "llama_cpp.server", "--model", "m.gguf", "--model_alias", "m", "--port", "9"],
        ("llamacpp-python", "m.gguf", ("m",), None, 9, "server"),
    ),
    # renamed builds side by side (llama-swap configs name them by build or backend)
    (["llama-server-b5678", "-m", GGUF, "--port", "9001"], ("llamacpp", GGUF, (), None, 9001, "server")),
    (
        ["/opt/llama/llama-server-cuda", "-hf", "org/repo:Q4_K_M"],
        ("llamacpp", "org/repo:Q4_K_M", (), None, None, "server"),
    ),
    (
        ["./llama-server-vulkan", "-m", "a.gguf", "-a", "x,y"],
        ("llamacpp", "a.gguf", ("x", "y"), None, None, "server"),
    ),
    (
        ["llama-server-0c1e570", "--model=a.gguf", "--host", "0.0.0.0"],
        ("llamacpp", "a.gguf", (), "0.0.0.0", None, "server"),
    ),
    (["llama-server-1.2.3_rocm-6", "-m", "a"], ("llamacpp", "a", (), None, None, "server")),
    (["C:\\llama\\llama-server-b5678.exe", "-m", "a.gguf"], ("llamacpp", "a.gguf", (), None, None, "server")),
    (["llama-server-cuda.EXE", "-m", "a.gguf"], ("llamacpp", "a.gguf", (), None, None, "server")),
    (["llama-server-cuda", "--models-dir", "/m"], ("llamacpp", None, (), None, None, "server")),
    # pre-rename builds: `server` with a GGUF model and a flag only llama.cpp has
    (["./server", "-m", GGUF, "-ngl", "99"], ("llamacpp", GGUF, (), None, None, "server")),
    (
        ["server", "-m", "a.gguf", "-c", "4096", "--port", "8081"],
        ("llamacpp", "a.gguf", (), None, 8081, "server"),
    ),
    (
        ["/srv/llama.cpp/server", "--model", "A.GGUF", "--mlock"],
        ("llamacpp", "A.GGUF", (), None, None, "server"),
    ),
    (
        ["server.exe", "-m", "a.gguf", "--n-gpu-layers", "35"],
        ("llamacpp", "a.gguf", (), None, None, "server"),
    ),
    (["C:\\llama\\server.EXE", "-m", "a.gguf", "-np", "4"], ("llamacpp", "a.gguf", (), None, None, "server")),
    (
        ["server", "--ctx-size=2048", "-m", "a.gguf", "--host", "::"],
        ("llamacpp", "a.gguf", (), "::", None, "server"),
    ),
    (
        ["server", "--gpu-layers", "1", "-m", "a.gguf", "-a", "n"],
        ("llamacpp", "a.gguf", ("n",), None, None, "server"),
    ),
    # the unified `llama` binary (app/llama.cpp): `serve`, alias `server`
    (
        ["llama", "serve", "-hf", "ggml-org/gemma-3-4b-it-GGUF", "--port", "8080"],
        ("llamacpp", "ggml-org/gemma-3-4b-it-GGUF", (), None, 8080, "server"),
    ),
    (
        ["/usr/local/bin/llama", "server", "-m", "a.gguf", "--host", "0.0.0.0"],
        ("llamacpp", "a.gguf", (), "0.0.0.0", None, "server"),
    ),
    (["llama.exe", "serve", "-m", "model.gguf"], ("llamacpp", "model.gguf", (), None, None, "server")),
    (
        ["llama", "serve", "--models-dir", "/m", "--models-max", "2"],
        ("llamacpp", None, (), None, None, "server"),
    ),
]

NOT_SERVERS: list[list[str]] = [
    # a bare `server` is never llama.cpp on its name alone
    ["server"],
    ["server", "--port", "8080"],
    ["./server", "-m", "a.gguf"],  # no llama.cpp-only flag
    ["server", "-m", "a.bin", "-ngl", "99"],  # not a GGUF
    ["server", "-hf", "org/repo", "-ngl", "99"],  # a GGUF not named
    ["server", "-ngl", "99", "-c", "4096"],
    ["server", "--config", "server.properties", "-c", "1"],
    ["server", "-m", "a.gguf", "-ngl", "1", "--help"],
    ["server", "-m", "a.gguf", "--version", "-c", "1"],
    ["server.py", "-m", "a.gguf", "-ngl", "1"],
    ["./server.py", "-m", "a.gguf", "-ngl", "1"],
    ["python", "server.py", "-m", "x.gguf", "-ngl", "99"],
    ["python3", "-m", "server", "-m", "x.gguf", "-ngl", "99"],
    ["node", "server", "-m", "x.gguf", "-ngl", "99"],
    ["my-server", "-m", "x.gguf", "-ngl", "99"],
    ["servers", "-m", "x.gguf", "-ngl", "99"],
    # prefixes are followed by a build's suffix, not anything
    ["llama-serverless"],
    ["llama-server-"],
    ["llama-server-wrapper.sh", "-m", "a.gguf"],
    ["llama-server-8080.log"],
    ["/bin/bash", "./llama-server-wrapper.sh", "-m", "a.gguf"],
    ["tail", "-f", "/var/log/llama-server-b5678.log"],
    ["llama-server-b5678", "--help"],
    ["llama-server-cuda", "--version"],
    ["xllama-server-cuda", "-m", "a"],
    ["llama-serve", "-model", "x.gguf", "--", "-c", "0"],
    # `llama` runs other subcommands too
    ["llama", "help", "all"],
    ["llama", "cli", "-m", "a.gguf"],
    ["llama", "completion", "-m", "a.gguf", "-p", "hi"],
    ["llama", "bench", "-m", "a.gguf"],
    ["llama", "version"],
    ["llama"],
    ["llama", "serve", "--help"],
    ["llama", "serve", "-m", "a.gguf", "--version"],
    ["llama", "-m", "a.gguf", "serve"],
    ["llama", "stack", "run", "serve"],
    ["llama-serve"],
    # uvicorn serving another app, or naming llama-cpp-python's only as an option's value
    ["uvicorn", "main:app", "--port", "8000"],
    ["uvicorn", "--factory", "llama_cpp.server.app:other", "--port", "8000"],
    ["uvicorn", "--app-dir", APP, "main:app"],
    ["uvicorn", "--factory", APP, "--version"],
    ["python3", "-m", "llama_cpp.server", "--help"],
]


@pytest.mark.parametrize(
    ("argv", "expected"), SERVERS, ids=lambda v: " ".join(v) if isinstance(v, list) else ""
)
def test_servers(argv: list[str], expected: tuple[Any, ...] | None) -> None:
    assert argv_facts(argv) == expected


@pytest.mark.parametrize("argv", NOT_SERVERS, ids=lambda v: " ".join(v) or "<empty>")
def test_not_servers(argv: list[str]) -> None:
    assert parse_argv(argv) is None


def _example(signature: Signature, form: LaunchForm, program: str) -> list[str]:
    """An argv that launches `form` with `program` as argv[0]."""
    argv = [program, *form.subcommand]
    if form.evidence is not None:
        model = "model" + (form.evidence.model_suffixes[0] if form.evidence.model_suffixes else "")
        # (a runner told by its flags alone names no model: LocalAI's gRPC backends)
        argv += [signature.model_flags[0], model] if signature.model_flags else []
        if form.evidence.any_flags:
            argv += [form.evidence.any_flags[0], "1"]
        argv += form.evidence.positionals[:1]
    return argv


def _programs() -> list[tuple[Signature, LaunchForm, str]]:
    found = []
    for signature in all_signatures():
        for form in signature.launch_forms:
            # a form bound to a directory is launched from there (`/usr/lib/ollama/llama-server`)
            where = f"/usr/{form.directories[0]}/" if form.directories else ""
            found += [(signature, form, where + name) for name in form.executables]
            found += [(signature, form, prefix + "b5678") for prefix in form.executable_prefixes]
    return found


@pytest.mark.parametrize(
    ("signature", "form", "program"), _programs(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_exe_suffix_on_every_executable(signature: Signature, form: LaunchForm, program: str) -> None:
    plain = parse_argv(_example(signature, form, program))
    assert plain is not None
    assert plain.engine == signature.engine
    for spelled in (
        f"{program}.exe",
        f"{program}.EXE",
        f"C:\\Program Files\\x\\{program}.Exe",
        f"/w/{program}.exe",
    ):
        assert parse_argv(_example(signature, form, spelled)) == plain, spelled
    # a Windows console script run by its interpreter
    interpreter = ["C:\\venv\\Scripts\\python.exe", f"C:\\venv\\Scripts\\{program}.exe"]
    interpreted = parse_argv([*interpreter, *_example(signature, form, program)[1:]])
    assert interpreted == plain
    # `.exe` is the whole extension only: `x.exe.bak`, `x.exes` (and `xexe`, but for a prefix) are
    # other names
    others = [f"{program}.exe.bak", f"{program}.exes"] + (
        [] if form.executable_prefixes else [f"{program}exe"]
    )
    for other in others:
        assert parse_argv(_example(signature, form, other)) is None, other


def _toy(*forms: LaunchForm, **fields: Any) -> Signature:
    return Signature(
        engine=fields.pop("engine", "toy"),
        launch_forms=forms,
        default_host="127.0.0.1",
        default_port=7000,
        **fields,
    )


def test_evidence_is_generic_data() -> None:
    toy = _toy(
        LaunchForm(
            executables=("srv",),
            evidence=Evidence(model_suffixes=(".bin", ".pt"), any_flags=("-l", "--keep-all")),
        ),
        underscore_is_dash=True,
        aliases={"-w": "--weights", "-l": "--layers"},
        model_flags=("--weights",),
        no_value_flags=frozenset({"--keep-all"}),
        exit_flags=frozenset({"--help"}),
    )
    flags_only = _toy(
        LaunchForm(executables=("srv",), evidence=Evidence(any_flags=("--only-mine",))),
        engine="other",
        model_flags=("--model",),
    )
    plain = _toy(LaunchForm(executables=("srv",)), engine="plain", model_flags=("--file",))
    matcher = MatcherType(signatures_json([toy, flags_only, plain]))
    # both halves found, the flag in any spelling (alias, long name, `_` for `-`)
    assert matcher.parse(["srv", "-w", "a.BIN", "-l", "2"]) == (0, "a.BIN", [], None, None, "server")
    assert matcher.parse(["srv", "--layers=2", "--weights", "a.pt"]) == (0, "a.pt", [], None, None, "server")
    assert matcher.parse(["srv", "--weights", "a.pt", "--keep-all"]) == (0, "a.pt", [], None, None, "server")
    assert matcher.parse(["srv", "--weights", "a.pt", "--keep_all"]) == (0, "a.pt", [], None, None, "server")
    # a half missing: the next engine's form is tried, in signature order
    assert matcher.parse(["srv", "-w", "a.bin"]) == (2, None, [], None, None, "server")
    assert matcher.parse(["srv", "-w", "a.gguf", "-l", "2"]) == (2, None, [], None, None, "server")
    assert matcher.parse(["srv", "--model", "m", "--only-mine"]) == (1, "m", [], None, None, "server")
    assert matcher.parse(["srv", "--file", "f"]) == (2, "f", [], None, None, "server")
    # an exit flag counts for the form whose evidence is found, and only for it
    assert matcher.parse(["srv", "-w", "a.bin", "-l", "2", "--help"]) is None
    assert matcher.parse(["srv", "--help", "-w", "a.bin", "-l", "2"]) is None
    assert matcher.parse(["srv", "--help"]) == (2, None, [], None, None, "server")


@pytest.mark.parametrize(
    ("evidence", "message"),
    [
        ({}, "needs model_suffixes, any_flags or positionals"),
        ({"positionals": ("-x",)}, "starting with a letter or digit"),
        ({"positionals": ("",)}, "starting with a letter or digit"),
        ({"any_flags": ("ngl",)}, "not a flag name"),
        ({"model_suffixes": ("",)}, "printable ASCII"),
        ({"model_suffixes": (".ggüf",)}, "printable ASCII"),
    ],
)
def test_bad_evidence_is_refused(evidence: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Evidence(**evidence)


def test_launch_form_data_is_checked() -> None:
    with pytest.raises(ValueError, match="at least one executable, executable prefix or suffix, or module"):
        LaunchForm()
    with pytest.raises(ValueError, match="plain name"):
        LaunchForm(executable_prefixes=("llama server-",))
    with pytest.raises(ValueError, match="at most 64"):
        _toy(
            LaunchForm(executables=("a",), evidence=Evidence(any_flags=tuple(f"--a{i}" for i in range(40)))),
            LaunchForm(executables=("b",), evidence=Evidence(any_flags=tuple(f"--b{i}" for i in range(40)))),
        )
    # the same flag in two forms, or spelled two ways, is one evidence flag
    _toy(
        LaunchForm(executables=("a",), evidence=Evidence(any_flags=tuple(f"--a{i}" for i in range(64)))),
        LaunchForm(executables=("b",), evidence=Evidence(any_flags=("--a0", "-x"))),
        aliases={"-x": "--a1"},
    )


def test_prefixes_come_after_exact_names() -> None:
    exact = _toy(LaunchForm(executables=("srv-gpu",)), engine="exact", model_flags=("--model",))
    prefixed = _toy(LaunchForm(executable_prefixes=("srv-",)), engine="prefixed", model_flags=("--weights",))
    matcher = MatcherType(signatures_json([prefixed, exact]))
    assert matcher.parse(["srv-gpu", "--model", "m"]) == (1, "m", [], None, None, "server")
    assert matcher.parse(["srv-cpu", "--weights", "w"]) == (0, "w", [], None, None, "server")
    assert matcher.parse(["python", "/v/bin/srv-cpu", "--weights", "w"]) == (0, "w", [], None, None, "server")
    assert matcher.parse(["python", "-m", "srv-cpu"]) is None  # prefixes name executables, not modules


def test_scanned_renamed_and_old_builds(procs: Procs) -> None:
    started = {
        procs.start(["llama-server-b5678", "-m", "/m/a.gguf", "--port", "41301"]).pid: ("/m/a.gguf", 41301),
        procs.start(["./server", "-m", "/m/b.gguf", "-ngl", "99", "--port", "41302"]).pid: (
            "/m/b.gguf",
            41302,
        ),
        procs.start(["llama", "serve", "-m", "/m/c.gguf", "--port", "41303"]).pid: ("/m/c.gguf", 41303),
    }
    ignored = {
        procs.start(["server", "--port", "41304"]).pid,
        procs.start(["llama-server-wrapper.sh", "-m", "/m/d.gguf"]).pid,
        procs.start(["llama", "cli", "-m", "/m/e.gguf"]).pid,
    }
    found = {p.pid: p for p in Scanner(listen_ports=False).scan() if p.pid in started.keys() | ignored}
    assert {pid: (p.engine, p.model, p.port, p.role) for pid, p in found.items()} == {
        pid: ("llamacpp", model, port, "server") for pid, (model, port) in started.items()
    }
