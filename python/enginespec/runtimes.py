"""Runtimes: installing engines into managed venvs, and probing what is installed or running.

Installs are idempotent (the target's installed version is read with ``importlib.metadata`` inside
the target interpreter, never by importing the engine), serialised per target by a file lock, and
report progress; a failed, cancelled or timed-out install is never reported as installed.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import importlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from enginespec.recipe import Config
from enginespec.spec import PYTHON_NAME, CommandError

if TYPE_CHECKING:
    from enginespec.spec import EngineSpec

Phase = Literal[
    "waiting_for_lock",
    "creating_venv",
    "resolving",
    "downloading",
    "building",
    "installing",
    "verifying",
    "done",
]
_TAIL = 40
# pip writes this /bin/sh trampoline instead of a shebang when the interpreter path is too long.
_TRAMPOLINE = re.compile(r"""^'''exec' "?([^"\s]+)"? "\$0" "\$@"$""", re.MULTILINE)
_VERSION_LINE = re.compile(r"version:\s*(\S+)(?:\s+\(([^)]*)\))?")
_OPTION_COLUMN_END = re.compile(r"(?<![,\s])\s{2,}")
_HELP_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][A-Za-z0-9_.-]*)")


class ProgressEvent(BaseModel):
    """One step of an install: the phase, a fraction when known, and the installer's last lines."""

    model_config = ConfigDict(frozen=True)
    phase: Phase
    message: str = ""
    fraction: float | None = None
    output_tail: tuple[str, ...] = ()


ProgressCallback = Callable[[ProgressEvent], None]


class InstallOptions(BaseModel):
    """How to install. ``version`` is a PEP 440 version or specifier (``0.10.2``, ``>=0.10,<0.12``);
    ``python_path`` installs into that interpreter instead of the managed venv; ``find_links`` /
    ``index_url`` / ``no_index`` point the installer at other package sources (a local wheelhouse)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    version: str | None = None
    python_path: str | None = None
    progress: ProgressCallback | None = None
    cancel: threading.Event | None = None
    #: seconds for the whole install (lock wait included); None: no limit.
    timeout: float | None = Field(default=None, gt=0)
    installer: Literal["auto", "uv", "pip"] = "auto"
    find_links: tuple[str, ...] = ()
    index_url: str | None = None
    no_index: bool = False
    #: llama.cpp: a source tree or a git URL to build llama-server from, and the git ref.
    source: str | None = None
    ref: str | None = None


class InstallResult(BaseModel):
    """The outcome of an install that succeeded (failures raise :class:`InstallError`)."""

    model_config = ConfigDict(frozen=True)

    engine: str
    requirement: str
    version: str
    python_path: str | None
    binary_path: str | None
    already_installed: bool
    #: the installer command that ran (empty when nothing had to run).
    command: tuple[str, ...] = ()
    output_tail: tuple[str, ...] = ()
    location: Literal["managed", "system"]


class InstallError(RuntimeError):
    """An install that failed; carries the exact command and the installer's last lines."""

    def __init__(self, message: str, command: Sequence[str] = (), output_tail: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.command = tuple(command)
        self.output_tail = tuple(output_tail)


class InstallCancelled(InstallError):
    pass


class InstallTimeout(InstallError, TimeoutError):
    pass


class BinaryProbeResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    installed: bool
    binary_path: str
    version: str | None = None
    #: the interpreter a console script runs with (from its shebang or pip's /bin/sh trampoline).
    python_path: str | None = None
    error: str | None = None


class RuntimeInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    engine: str
    installed: bool
    version: str | None = None
    python_path: str | None = None
    binary_path: str | None = None
    location: Literal["managed", "system", "running", "none"] = "none"
    can_upgrade: bool = False


class ConfigHelp(BaseModel):
    """The engine's own ``--help``, and the flags it accepts."""

    model_config = ConfigDict(frozen=True)

    engine: str
    command: tuple[str, ...]
    version: str | None
    text: str
    flags: frozenset[str]


# -- reading what is installed ---------------------------------------------------------------------


_VERSION_SCRIPT = """
import importlib.metadata as m, json, sys
found = {}
for name in sys.argv[1:]:
    try:
        found[name] = m.version(name)
    except m.PackageNotFoundError:
        pass
print(json.dumps(found))
"""


def installed_versions(
    python: Path | str, distributions: Sequence[str], timeout: float = 30.0
) -> dict[str, str]:
    """Versions of distributions in another interpreter, read with importlib.metadata there."""
    try:
        out = subprocess.run(
            [str(python), "-c", _VERSION_SCRIPT, *distributions],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
        data = json.loads(out.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def script_python(script: Path) -> Path | None:
    """The interpreter of a console script: its shebang, or pip's /bin/sh trampoline for long paths."""
    try:
        with open(script, "rb") as file:
            head = file.read(4096).decode("utf-8", "replace")
    except OSError:
        return None
    if not head.startswith("#!"):
        return None
    first = head.splitlines()[0][2:].strip()
    if first in ("/bin/sh", "/usr/bin/env sh"):
        match = _TRAMPOLINE.search(head)
        return Path(match.group(1)) if match else None
    interpreter = shlex.split(first)[0] if first else ""
    if Path(interpreter).name == "env":
        parts = shlex.split(first)[1:]
        found = shutil.which(parts[0]) if parts else None
        return Path(found) if found else None
    return Path(interpreter) if PYTHON_NAME.fullmatch(Path(interpreter).name) else None


def python_of_process(pid: int) -> Path | None:
    """The interpreter a running engine uses: argv[0] when it is a Python (keeps the venv path,
    which /proc/PID/exe resolves away), else /proc/PID/exe."""
    from enginespec._pyscanner import split_cmdline

    try:
        argv = split_cmdline(Path(f"/proc/{pid}/cmdline").read_bytes())
    except OSError:
        argv = []
    if argv and PYTHON_NAME.fullmatch(Path(argv[0]).name):
        candidate = Path(argv[0])
        if not candidate.is_absolute():
            found = shutil.which(argv[0])
            candidate = Path(found) if found else candidate
        if candidate.is_absolute():
            return candidate
    try:
        exe = Path(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return None
    return exe if PYTHON_NAME.fullmatch(exe.name) else None


# -- installing --------------------------------------------------------------------------------------


def _emit(options: InstallOptions, phase: Phase, message: str = "", tail: Sequence[str] = ()) -> None:
    if options.progress is not None:
        options.progress(ProgressEvent(phase=phase, message=message, output_tail=tuple(tail)))


class _Deadline:
    def __init__(self, options: InstallOptions) -> None:
        self.options = options
        self.at = time.monotonic() + options.timeout if options.timeout else None

    def check(self, command: Sequence[str] = (), tail: Sequence[str] = ()) -> None:
        if self.options.cancel is not None and self.options.cancel.is_set():
            raise InstallCancelled("install cancelled", command, tail)
        if self.at is not None and time.monotonic() >= self.at:
            raise InstallTimeout(f"install timed out after {self.options.timeout:g}s", command, tail)


def _phase_of(line: str) -> Phase | None:
    lowered = line.lower()
    if lowered.startswith(("collecting", "looking in", "resolved", "resolving")):
        return "resolving"
    if lowered.startswith(("downloading", "downloaded", "prepared", "obtaining")):
        return "downloading"
    if lowered.startswith(("building", "-- build", "[")):
        return "building"
    if lowered.startswith(("installing", "installed", "successfully installed", " +")):
        return "installing"
    return None


def run_streaming(
    command: Sequence[str], options: InstallOptions, deadline: _Deadline, env: dict[str, str] | None = None
) -> tuple[str, ...]:
    """Runs an installer, streaming its output into progress events; stops it (the whole process
    group) on cancel or timeout. Returns the output tail; raises InstallError on failure."""
    tail: collections.deque[str] = collections.deque(maxlen=_TAIL)
    try:
        proc = subprocess.Popen(
            list(command),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    except OSError as err:
        raise InstallError(f"cannot run {command[0]}: {err}", command) from None
    lines: collections.deque[str] = collections.deque()

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        while True:
            while lines:
                line = lines.popleft()
                tail.append(line)
                phase = _phase_of(line)
                if phase is not None:
                    _emit(options, phase, line.strip(), tail)
            if proc.poll() is not None and not thread.is_alive():
                break
            deadline.check(command, tail)
            time.sleep(0.05)
    except InstallError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    while lines:
        tail.append(lines.popleft())
    if proc.returncode != 0:
        raise InstallError(f"{Path(command[0]).name} exited with status {proc.returncode}", command, tail)
    return tuple(tail)


def _find_uv() -> str | None:
    found = shutil.which("uv")
    if found:
        return found
    with contextlib.suppress(ImportError, FileNotFoundError):
        # The optional `uv` PyPI package ships the binary (imported by name: it may be absent).
        uv = importlib.import_module("uv")
        return str(uv.find_uv_bin())
    return None


def _installer(options: InstallOptions) -> str | None:
    """Path of uv when it is to be used, else None (venv + pip)."""
    if options.installer == "pip":
        return None
    uv = _find_uv()
    if uv is None and options.installer == "uv":
        raise InstallError("installer: uv was asked for but is not installed (pip install uv)")
    return uv


def _source_args(options: InstallOptions) -> list[str]:
    args: list[str] = []
    for link in options.find_links:
        args += ["--find-links", link]
    if options.index_url:
        args += ["--index-url", options.index_url]
    if options.no_index:
        args.append("--no-index")
    return args


def _lock_path(config: Config, target: Path) -> Path:
    digest = hashlib.sha256(str(target).encode()).hexdigest()[:16]
    return config.data_dir / "locks" / f"{target.name}-{digest}.lock"


@contextlib.contextmanager
def install_lock(
    config: Config, target: Path, options: InstallOptions, deadline: _Deadline
) -> Iterator[None]:
    """One install at a time per target, across threads and processes (filelock)."""
    import filelock

    path = _lock_path(config, target)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(path), thread_local=False, is_singleton=False)
    announced = False
    while True:
        try:
            lock.acquire(timeout=0.1)
            break
        except filelock.Timeout:
            if not announced:
                _emit(options, "waiting_for_lock", f"another install into {target} is running")
                announced = True
            deadline.check()
    try:
        yield
    finally:
        lock.release()


def _satisfies(version: str, requested: str | None) -> bool:
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    if requested is None or not requested.strip():
        return True
    try:
        wanted = SpecifierSet(f"=={Version(requested.strip())}")
    except InvalidVersion:
        wanted = SpecifierSet(requested.strip())
    return wanted.contains(version, prereleases=True)


def install_python_engine(spec: EngineSpec, options: InstallOptions, config: Config) -> InstallResult:
    """Installs a Python engine (the shared code path of every Python EngineSpec)."""
    requirement = spec.managed_package_spec(options.version)  # refuses hostile versions first
    distributions = spec.distributions()
    deadline = _Deadline(options)
    if options.python_path:
        python = spec._check_python(options.python_path, "python_path")
        if not python.exists():
            raise CommandError(f"python_path: {options.python_path!r} does not exist")
        venv: Path | None = None
        location: Literal["managed", "system"] = "system"
        target = python
    else:
        venv = config.runtime_dir(spec.id) / "venv"
        python, location = venv / "bin" / "python", "managed"
        target = venv
    with install_lock(config, target, options, deadline):
        current = installed_versions(python, distributions) if python.exists() else {}
        for version in current.values():
            if _satisfies(version, options.version):
                _emit(options, "done", f"{requirement}: {version} already installed")
                return InstallResult(
                    engine=spec.id,
                    requirement=requirement,
                    version=version,
                    python_path=str(python),
                    binary_path=_console_script(python, spec),
                    already_installed=True,
                    location=location,
                )
        uv = _installer(options)
        tail: tuple[str, ...] = ()
        if venv is not None and not python.exists():
            _emit(options, "creating_venv", f"creating {venv}")
            shutil.rmtree(venv, ignore_errors=True)  # a partial venv from an interrupted run
            create = (
                [uv, "venv", "--python", sys.executable, str(venv)]
                if uv
                else [sys.executable, "-m", "venv", str(venv)]
            )
            try:
                tail = run_streaming(create, options, deadline)
            except InstallError:
                shutil.rmtree(venv, ignore_errors=True)
                raise
        if uv:
            command = [uv, "pip", "install", "--python", str(python), requirement, *_source_args(options)]
        else:
            command = [str(python), "-m", "pip", "install", "--disable-pip-version-check", requirement]
            command += _source_args(options)
        _emit(options, "resolving", f"installing {requirement}")
        tail = run_streaming(command, options, deadline)
        _emit(options, "verifying", "reading the installed version", tail)
        after = installed_versions(python, distributions)
        found = next((v for v in after.values() if _satisfies(v, options.version)), None)
        if found is None:
            raise InstallError(
                f"{requirement} is not installed after the installer finished (found {after or 'nothing'})",
                command,
                tail,
            )
        _emit(options, "done", f"{requirement}: {found} installed", tail)
        return InstallResult(
            engine=spec.id,
            requirement=requirement,
            version=found,
            python_path=str(python),
            binary_path=_console_script(python, spec),
            already_installed=False,
            command=tuple(command),
            output_tail=tail,
            location=location,
        )


def _console_script(python: Path, spec: EngineSpec) -> str | None:
    script = python.parent / spec.cli_binary
    return str(script) if script.is_file() else None


def probe_version_output(text: str) -> str | None:
    """Version from ``llama-server --version`` output (it prints on stderr):
    ``version: 0.5.0-dev (build 1, commit 0c1e570)`` or the older ``version: 9439 (47f6423ed)``."""
    match = _VERSION_LINE.search(text)
    return match.group(1) if match else None


def help_flags(text: str) -> frozenset[str]:
    """Every flag name a ``--help`` text mentions (argparse and llama.cpp layouts)."""
    flags: set[str] = set()
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith("-"):
            # The option column ends at the first wide gap not right after a comma: llama.cpp pads
            # between spellings (`-m,    --model FNAME    model path`), argparse does not.
            options = _OPTION_COLUMN_END.split(stripped, maxsplit=1)[0]
            flags.update(_HELP_FLAG.findall(options))
    return frozenset(flags)


def cached_help(config: Config, key: str) -> dict[str, object] | None:
    path = config.data_dir / "cache" / "help" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def store_help(config: Config, key: str, data: dict[str, object]) -> None:
    path = config.data_dir / "cache" / "help" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(data))
    temporary.replace(path)  # atomic: readers never see half a file


def _check_version(version: str | None) -> None:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    if version is None or not version.strip():
        return
    with contextlib.suppress(InvalidVersion):
        Version(version.strip())
        return
    try:
        SpecifierSet(version.strip())
    except InvalidSpecifier:
        raise CommandError(f"version: {version!r} is not a PEP 440 version or specifier") from None


def install_binary_engine(spec: EngineSpec, options: InstallOptions, config: Config) -> InstallResult:
    """Installs an engine that ships no wheel (llama-server) into ``<data_dir>/runtimes/<engine>``:
    runs ``ENGINESPEC_<ENGINE>_INSTALL_CMD`` (split with shlex, never through a shell; it must leave
    the binary at ``$ENGINESPEC_PREFIX/bin/<binary>``) or builds it with cmake from ``options.source``
    (a source tree, or a git URL checked out at ``options.ref``)."""
    _check_version(options.version)
    if options.python_path:
        raise CommandError(f"python_path: {spec.id} is a binary, not a Python package")
    prefix = config.runtime_dir(spec.id)
    binary = prefix / "bin" / spec.cli_binary
    deadline = _Deadline(options)
    configured = os.environ.get(f"ENGINESPEC_{spec.id.upper()}_INSTALL_CMD", "").strip()
    if not configured and not options.source and not binary.exists():
        raise CommandError(
            f"source: {spec.id} ships no wheel with {spec.cli_binary}; set "
            f"ENGINESPEC_{spec.id.upper()}_INSTALL_CMD or give a source tree / git URL to build from"
        )
    with install_lock(config, prefix, options, deadline):
        probe = spec.probe_binary(binary) if binary.exists() else None
        current = probe.version if probe is not None else None
        if current and (options.version is None or _satisfies(current, options.version)):
            _emit(options, "done", f"{spec.cli_binary} {current} already installed")
            return InstallResult(
                engine=spec.id,
                requirement=spec.cli_binary,
                version=current,
                python_path=None,
                binary_path=str(binary),
                already_installed=True,
                location="managed",
            )
        staging = prefix / "staging"
        shutil.rmtree(staging, ignore_errors=True)
        (staging / "bin").mkdir(parents=True)
        try:
            if configured:
                command = shlex.split(configured)
                tail = run_streaming(command, options, deadline, env={"ENGINESPEC_PREFIX": str(staging)})
            else:
                command, tail = _cmake_build(spec, options, deadline, staging)
            built = staging / "bin" / spec.cli_binary
            probe = spec.probe_binary(built)
            if not probe.installed or probe.version is None:
                raise InstallError(f"the install produced no working {built}: {probe.error}", command, tail)
            _emit(options, "verifying", f"{spec.cli_binary} {probe.version}", tail)
            # Swap in atomically: a half-built binary is never at the final path.
            (prefix / "bin").mkdir(parents=True, exist_ok=True)
            built.replace(binary)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        _emit(options, "done", f"{spec.cli_binary} {probe.version} installed", tail)
        return InstallResult(
            engine=spec.id,
            requirement=spec.cli_binary,
            version=probe.version,
            python_path=None,
            binary_path=str(binary),
            already_installed=False,
            command=tuple(command),
            output_tail=tail,
            location="managed",
        )


def _unpack_source(spec: EngineSpec, archive: Path, into: Path) -> Path:
    """Unpacks a source archive (an sdist vendoring the engine, like llama-cpp-python's) and finds
    the engine's own tree in it: the shallowest directory with a CMakeLists.txt and the engine's
    ``source_marker`` entry."""
    # filter="data" refuses absolute paths and links out of the tree (Python 3.12+, and backports).
    try:
        shutil.unpack_archive(str(archive), str(into), filter="data")
    except TypeError:
        shutil.unpack_archive(str(archive), str(into))
    candidates = sorted(into.rglob("CMakeLists.txt"), key=lambda p: len(p.parts))
    for cmakelists in candidates:
        if spec.source_marker and (cmakelists.parent / spec.source_marker).exists():
            return cmakelists.parent
    raise CommandError(
        f"source: no {spec.id} source tree (CMakeLists.txt beside {spec.source_marker!r}) in {archive}"
    )


def _cmake_build(
    spec: EngineSpec, options: InstallOptions, deadline: _Deadline, staging: Path
) -> tuple[list[str], tuple[str, ...]]:
    assert options.source is not None
    cmake = shutil.which("cmake")
    if cmake is None:
        raise InstallError(
            "cmake is needed to build llama-server from source (apt install cmake, or pip install cmake)"
        )
    source = Path(options.source)
    if source.is_file() and source.name.endswith((".tar.gz", ".tgz", ".tar", ".zip")):
        source = _unpack_source(spec, source, staging / "src")
    elif not source.exists():
        if not re.match(r"^(https?|git|ssh)://|^git@", options.source):
            raise CommandError(f"source: {options.source!r} is neither a directory nor a git URL")
        source = staging / "src"
        clone = [
            "git",
            "clone",
            "--depth",
            "1",
            *(["--branch", options.ref] if options.ref else []),
            options.source,
            str(source),
        ]
        run_streaming(clone, options, deadline)
    if not (source / "CMakeLists.txt").is_file():
        raise CommandError(f"source: {source} has no CMakeLists.txt")
    build = staging / "build"
    configure = [
        cmake,
        "-S",
        str(source),
        "-B",
        str(build),
        "-DCMAKE_BUILD_TYPE=Release",
        # one self-contained binary: the build tree (and its shared libraries) is deleted afterwards
        "-DBUILD_SHARED_LIBS=OFF",
        *spec.cmake_options,
    ]
    _emit(options, "building", "configuring with cmake")
    run_streaming(configure, options, deadline)
    compile_ = [cmake, "--build", str(build), "--target", spec.cli_binary, "-j", str(os.cpu_count() or 2)]
    tail = run_streaming(compile_, options, deadline)
    built = next((p for p in build.rglob(spec.cli_binary) if p.is_file() and os.access(p, os.X_OK)), None)
    if built is None:
        raise InstallError(f"the build produced no {spec.cli_binary}", compile_, tail)
    shutil.copy2(built, staging / "bin" / spec.cli_binary)
    return compile_, tail
