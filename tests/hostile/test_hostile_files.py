"""Files, environment values and paths that another user's engine names: each hostile one is a
problem on that one engine (never a hang, an exception out of the scan, or a file its owner could
not read, or one outside its root), and every other engine is scanned as usual; ``ps``,
``ps --json``, ``watch --json`` and the exporter go on. The engines are real processes of user
``nobody``; the scan runs as root, as it does on a shared host."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import stat
import subprocess
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

import enginespec._host.namedfiles as procfiles
import enginespec.untrusted.documents as documents
from enginespec import EngineProcess, Scanner, get_engine_spec
from enginespec.models.naming import model_name
from enginespec.process.settings import read_outside
from fleet.test_exporter import _scrape_until, exporter  # noqa: F401  (a fixture)
from helpers.cli import enginespec
from helpers.procs import HELPER_SOURCE, wait_for
from modelfacts.test_modelfacts import write_gguf
from scanning.test_watch import _pid_of, _Stream

NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="starts processes of another user (needs root)")


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """In-process scans resolve paths with openat2, and with the walk used where the kernel has
    no openat2."""
    if request.param == "walk":
        monkeypatch.setattr(procfiles, "use_openat2", False)
    return str(request.param)


@pytest.fixture(scope="session")
def static_idle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/helpers/idle.c built statically, so that it also runs inside a bare chroot."""
    binary = tmp_path_factory.mktemp("static") / "idle"
    subprocess.run(["gcc", "-static", "-O1", "-o", str(binary), str(HELPER_SOURCE)], check=True, timeout=120)
    return binary


class Strangers:
    """Processes of `nobody` whose /proc/PID/cmdline is exactly the argv given; all killed at
    the end."""

    def __init__(self, directory: Path, static_idle: Path) -> None:
        self.idle = directory / "idle"
        shutil.copy(static_idle, self.idle)
        self.idle.chmod(0o755)
        self.started: list[subprocess.Popen[bytes]] = []

    def start(
        self,
        argv: Sequence[str],
        cwd: Path | str = "/",
        chroot: Path | None = None,
        executable: Path | None = None,
        **env: str,
    ) -> int:
        def become_nobody() -> None:
            if chroot is not None:
                os.chroot(chroot)
            os.chdir(cwd)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)

        proc = subprocess.Popen(
            list(argv),
            executable="/idle" if chroot is not None else executable or self.idle,
            env={"PATH": "/usr/bin:/bin", **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=become_nobody,
        )
        self.started.append(proc)
        wait_for(lambda: Path(f"/proc/{proc.pid}/cmdline").read_bytes() != b"")
        return proc.pid

    def stop_all(self) -> None:
        for proc in self.started:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def strangers(nobody_dir: Path, static_idle: Path) -> Iterator[Strangers]:
    started = Strangers(nobody_dir, static_idle)
    try:
        yield started
    finally:
        started.stop_all()


def _write(path: Path, text: str | bytes, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    path.chmod(mode)
    return path


BOMB = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{b}: &{b} [{','.join(['*' + a] * 9)}]\n" for a, b in zip("abcde", "bcdef", strict=True)
)
#: (file name, contents) of config files in the shared directory.
FILES = {
    "good.yaml": "model: org/good-from-config\nport: 8123\n",
    "deep.yaml": "model: " + "[" * 5000 + "]" * 5000 + "\n",
    "deep.json": '{"models": ' + "[" * 5000 + "]" * 5000 + "}",
    "digits.yaml": "port: " + "9" * 5000 + "\n",
    "digits.json": '{"port": ' + "9" * 5000 + "}",
    "fullwidth.yaml": "model: org/m\nport: \uff18\uff10\uff18\uff10\n",
    "surrogate.yaml": 'model: "\\ud800"\n',
    "surrogate.json": '{"models": [{"model": "\\ud800"}]}',
    "bomb.yaml": BOMB,
}


#: The files a TabbyAPI checkout is told by (its signature's checkout files and its program).
TABBY_FILES = ("common/args.py", "common/tabby_config.py", "endpoints/core/router.py", "main.py")


def _hostile_zoo(strangers: Strangers, nobody_dir: Path, private: Path) -> dict[int, tuple[str, ...]]:
    """Starts one stranger per attack; returns pid -> the phrases one of its problems holds."""
    for name, text in FILES.items():
        _write(nobody_dir / name, text)
    os.mkfifo(nobody_dir / "fifo.yaml", 0o666)
    tabby = nobody_dir / "tabby"
    for name in TABBY_FILES:
        _write(tabby / name, "")
    os.mkfifo(tabby / "config.yml", 0o666)
    _write(private / "in-root-only-dir.yaml", "model: root-only-directory\n")  # 0644 in a 0700 dir
    vllm = ["vllm", "serve", "--config"]
    llama_python = ["python3", "-m", "llama_cpp.server", "--config_file"]
    nested = ("is not valid YAML", "nested deeper")  # libyaml stops at its own depth limit
    cases: list[tuple[list[str], Path | str, dict[str, str], tuple[str, ...]]] = [
        ([*vllm, str(nobody_dir / "fifo.yaml")], "/", {}, ("is not a regular file (a FIFO)",)),
        ([*vllm, "/dev/ptmx"], "/", {}, ("is not a regular file (a character device)",)),
        ([*vllm, "/dev/tty"], "/", {}, ("is not a regular file (a character device)",)),
        (["python3", "main.py"], tabby, {}, ("'config.yml' is not a regular file (a FIFO)",)),
        ([*vllm, "deep.yaml"], nobody_dir, {}, nested),
        ([*llama_python, "deep.json"], nobody_dir, {}, ("nested deeper than",)),
        ([*vllm, "digits.yaml"], nobody_dir, {}, ("holds an integer of 5000 digits",)),
        ([*llama_python, "digits.json"], nobody_dir, {}, ("holds an integer of 5000 digits",)),
        (
            [*vllm, "fullwidth.yaml"],
            nobody_dir,
            {},
            ("port '\uff18\uff10\uff18\uff10' is not a port number",),
        ),
        ([*vllm, "surrogate.yaml"], nobody_dir, {}, ("is not valid YAML", "lone surrogate")),
        ([*llama_python, "surrogate.json"], nobody_dir, {}, ("lone surrogate",)),
        ([*vllm, "bomb.yaml"], nobody_dir, {}, ("holds more than 10000 values",)),
        ([*vllm, str(private / "in-root-only-dir.yaml")], "/", {}, ("not readable by the process's owner",)),
        ([*vllm, "/proc/self/cwd/x.yaml"], "/", {}, ("a link that is not followed",)),
        ([*vllm, "/proc/self/environ"], "/", {}, ("kernel filesystem (proc)", "a link that is not followed")),
        (["llama-server"], "/", {"LLAMA_ARG_PORT": "\u00b2"}, ("port '\u00b2' is not a port number",)),
        (["llama-server"], "/", {"LLAMA_ARG_PORT": "8" * 5000}, ("is not a port number",)),
        (["text-generation-launcher", "--model-id", "m"], "/", {"PORT": "\u00b2"}, ("is not a port number",)),
        (
            ["python3", "-m", "llama_cpp.server"],
            "/",
            {"PORT": "\uff18\uff10\uff18\uff10"},
            ("is not a port",),
        ),
    ]
    return {strangers.start(argv, cwd, **env): phrases for argv, cwd, env, phrases in cases}


def _by_pid(processes: Sequence[EngineProcess], pids: object) -> dict[int, EngineProcess]:
    return {p.pid: p for p in processes if p.pid in pids}  # type: ignore[operator]


def test_each_hostile_file_or_value_is_a_problem_on_its_engine_only(
    strangers: Strangers, nobody_dir: Path, resolver: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _write(tmp_path / "x.yaml", "model: the-scanners-own-cwd\n")
    monkeypatch.chdir(tmp_path)  # what /proc/self/cwd/x.yaml would be, read by the scanner
    private = Path(tempfile.mkdtemp(prefix="enginespec-private-"))  # 0700, root's
    try:
        hostile = _hostile_zoo(strangers, nobody_dir, private)
        good = strangers.start(["vllm", "serve", "--config", "good.yaml"], nobody_dir)
        found = _by_pid(Scanner().scan(), {*hostile, good})
        assert set(found) == {*hostile, good}
        assert (found[good].model, found[good].port, found[good].problems) == (
            "org/good-from-config",
            8123,
            (),
        )
        for pid, phrases in hostile.items():
            problems = found[pid].problems
            assert any(phrase in problem for problem in problems for phrase in phrases), (
                found[pid].argv,
                problems,
            )
            assert (found[pid].model in (None, "m", "org/m"), found[pid].port) == (True, None)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def test_ps_watch_and_the_exporter_live_on_beside_the_zoo(
    strangers: Strangers,
    nobody_dir: Path,
    exporter: tuple[str, Path],  # noqa: F811
) -> None:
    private = Path(tempfile.mkdtemp(prefix="enginespec-private-"))
    try:
        hostile = _hostile_zoo(strangers, nobody_dir, private)
        good = strangers.start(["vllm", "serve", "--config", "good.yaml"], nobody_dir)
        pids = {*hostile, good}
        listed = enginespec("ps", "--json", timeout=60)
        assert listed.returncode == 0, listed.stderr
        assert len(listed.stdout) < 1 << 20  # the alias bomb expanded nowhere
        shown = {item["pid"]: item for item in json.loads(listed.stdout) if item["pid"] in pids}
        assert set(shown) == pids
        assert shown[good]["model"] == "org/good-from-config"
        assert all(shown[pid]["problems"] for pid in hostile)
        table = enginespec("ps", timeout=60)
        assert table.returncode == 0, table.stderr
        assert str(good).encode() in table.stdout
        stream = _Stream("--json", "--no-health", "--interval", "200ms")
        try:
            seen: set[int] = set()
            stream.until(lambda d: d["type"] == "started" and seen.add(_pid_of(d)) is None and pids <= seen)
        finally:
            code, err = stream.interrupt()
        assert code == 0, err
        url, _textfile = exporter
        series = _scrape_until(
            url,
            lambda s: (
                {str(p) for p in pids} <= {labels["pid"] for labels, _ in s.get("enginespec_engine_info", [])}
            ),
        )
        assert series["enginespec_engine_info"]
    finally:
        shutil.rmtree(private, ignore_errors=True)


def test_paths_stay_inside_a_chroot(strangers: Strangers, nobody_dir: Path, resolver: str) -> None:
    """An absolute symlink or a `..` path inside a chroot never reaches the host's files; a
    path inside it (absolute, or relative to its working directory there) is read there."""
    host_file = _write(nobody_dir / "host-secret.yaml", "model: host-secret\n")  # anyone may read it
    jail = nobody_dir / "jail"
    (jail / "etc").mkdir(parents=True)
    jail.chmod(0o755)
    shutil.copy(strangers.idle, jail / "idle")
    os.symlink(host_file, jail / "etc" / "link.yaml")  # absolute: the host's path
    _write(jail / "etc" / "own.yaml", "model: inside-the-jail\n")
    climb = "../" * 12 + str(host_file).lstrip("/")
    pids = {
        strangers.start(["vllm", "serve", "--config", "/etc/link.yaml"], chroot=jail): None,
        strangers.start(["vllm", "serve", "--config", climb], cwd="/etc", chroot=jail): None,
        strangers.start(["vllm", "serve", "--config", "/etc/own.yaml"], chroot=jail): "inside-the-jail",
        strangers.start(
            ["vllm", "serve", "--config", "own.yaml"], cwd="/etc", chroot=jail
        ): "inside-the-jail",
    }
    found = _by_pid(Scanner().scan(), pids)
    for pid, model in pids.items():
        assert found[pid].model == model, (found[pid].argv, found[pid].problems)
        if model is None:
            assert any("No such file or directory" in problem for problem in found[pid].problems)


def test_a_symlink_flipped_under_the_scanner_never_leaks(
    strangers: Strangers, nobody_dir: Path, resolver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner flips a symlink between its own file and a root-only one while root reads it:
    what is read is checked as opened, so the root-only file is never read."""
    monkeypatch.setattr(procfiles, "STEP_SECONDS", 60.0)  # a loaded host is slow, not hostile
    private = Path(tempfile.mkdtemp(prefix="enginespec-private-"))
    try:
        _write(private / "secret.yaml", "model: root-secret\n", 0o600)
        private.chmod(0o755)  # the directory may be searched: only the file's mode protects it
        own = _write(nobody_dir / "own.yaml", "model: own\n")
        link = nobody_dir / "link.yaml"
        os.symlink(own, link)
        nobody_dir.chmod(0o777)  # nobody renames links in it
        flip = (
            f"cd {nobody_dir}; while :; do ln -sfn {private / 'secret.yaml'} a.tmp; mv -fT a.tmp link.yaml;"
            f" ln -sfn {own} b.tmp; mv -fT b.tmp link.yaml; done"
        )
        flipper = subprocess.Popen(
            ["/bin/sh", "-c", flip],
            user=NOBODY,
            group=NOBODY,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
        )
        try:
            pid = strangers.start(["vllm", "serve", "--config", str(link)], nobody_dir)
            spec = get_engine_spec("vllm")
            argv = ["vllm", "serve", "--config", str(link)]
            reads = [read_outside(spec, pid, argv, environ=None) for _ in range(600)]
            models = [outside.config.get("model") for outside in reads]
            models += [_by_pid(Scanner().scan(), {pid})[pid].model for _ in range(20)]
        finally:
            os.killpg(flipper.pid, 9)
            flipper.wait(timeout=10)
        seen = Counter((outside.config.get("model"), outside.problems) for outside in reads)
        assert ("root-secret",) not in models
        assert "root-secret" not in models
        assert ("own",) in models, seen  # the race was run: the owner's own file was read meanwhile
    finally:
        shutil.rmtree(private, ignore_errors=True)


def test_a_config_that_hangs_is_given_up_after_the_step_deadline(
    strangers: Strangers, nobody_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that blocks in the kernel (a FUSE daemon that never answers; here a step made to
    block) is abandoned at the deadline, and a few abandoned ones stop further attempts."""
    wait_for(lambda: procfiles._stuck == 0)  # reads a loaded host gave up on earlier have ended
    monkeypatch.setattr(procfiles, "STEP_SECONDS", 0.2)
    release = threading.Event()
    real = procfiles._regular

    hanging = _write(nobody_dir / "good.yaml", FILES["good.yaml"]).stat().st_ino

    def blocking(fd: int) -> os.stat_result:
        if os.fstat(fd).st_ino == hanging:  # this one file: the host's other engines read on
            release.wait(30)
        return real(fd)

    monkeypatch.setattr(procfiles, "_regular", blocking)
    argv = ["vllm", "serve", "--config", "good.yaml"]
    pid = strangers.start(argv, nobody_dir)
    try:
        # this process's files only: a scan would read the host's other engines' files under the
        # same 0.2 s deadline, and one slow on a loaded host would count as stuck too
        spec = get_engine_spec("vllm")
        problems = [
            read_outside(spec, pid, argv, environ=None).problems for _ in range(procfiles.MAX_STUCK + 1)
        ]
        assert all("took longer than 0.2 s" in p[0] for p in problems[:-1]), problems
        assert "earlier reads of files named by processes still hang" in problems[-1][0]
    finally:
        release.set()
    wait_for(lambda: procfiles._stuck == 0)
    monkeypatch.undo()  # the real step and its deadline
    assert _by_pid(Scanner().scan(), {pid})[pid].model == "org/good-from-config"


@pytest.fixture
def silent_mount(nobody_dir: Path) -> Iterator[Path]:
    """A FUSE filesystem whose daemon never answers, mounted on a directory of this test: every
    lookup in it blocks in the kernel until the connection is aborted (closing the device), as
    on a host whose FUSE daemon is stuck. Aborted and unmounted at the end."""
    libc = ctypes.CDLL(None, use_errno=True)
    target = nobody_dir / "silent"
    target.mkdir()
    device = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    options = f"fd={device},rootmode=40000,user_id=0,group_id=0,allow_other".encode()
    if libc.mount(b"enginespec-silent", os.fsencode(target), b"fuse.enginespec-silent", 0, options) != 0:
        os.close(device)
        raise OSError(ctypes.get_errno(), "mounting a FUSE filesystem for the test")
    try:
        yield target
    finally:
        os.close(device)  # aborts the connection: what blocks in it fails with ENOTCONN
        libc.umount2(os.fsencode(target), 2)  # MNT_DETACH


def test_a_checkout_on_a_filesystem_that_never_answers_is_given_up(
    strangers: Strangers, silent_mount: Path
) -> None:
    """TabbyAPI's `main.py` named on a mount that never answers: the backend gives up looking for
    its checkout at the step deadline, the process does not count, and the scan and every other
    engine go on."""
    hung = strangers.start(["python3", str(silent_mount / "tabby" / "main.py"), "--port", "41391"])
    good = strangers.start(["vllm", "serve", "org/good", "--port", "41392"])
    scans: list[list[EngineProcess]] = []
    scanning = threading.Thread(target=lambda: scans.append(Scanner().scan()), daemon=True)
    scanning.start()
    scanning.join(120)  # a liveness bound, not a timing: the deadline is 2 s
    assert scans, "the scan hung on a filesystem that never answers"
    found = _by_pid(scans[0], {hung, good})
    assert set(found) == {good}
    assert found[good].model == "org/good"


def test_a_checkout_its_owner_cannot_reach_does_not_count(strangers: Strangers, nobody_dir: Path) -> None:
    """A TabbyAPI checkout in a directory only root may search: `nobody`'s `main.py` named there
    is not TabbyAPI, though the root scanner could see the files; the same checkout where
    `nobody` may look counts."""
    private = Path(tempfile.mkdtemp(prefix="enginespec-private-"))  # 0700, root's
    try:
        for where in (private / "tabby", nobody_dir / "tabby"):
            for name in TABBY_FILES:
                _write(where / name, "")
        hidden = strangers.start(["python3", str(private / "tabby" / "main.py"), "--port", "41393"])
        open_ = strangers.start(["python3", "main.py", "--port", "41394"], nobody_dir / "tabby")
        found = _by_pid(Scanner().scan(), {hidden, open_})
        assert set(found) == {open_}
        assert found[open_].engine == "tabbyapi"
    finally:
        shutil.rmtree(private, ignore_errors=True)


def test_documents_within_limits_are_what_safe_load_gives() -> None:
    import yaml

    text = (
        b"model: org/m\nport: 8111\nnames: [a, b]\nnet: {host: h, port: 1}\nx: &x {k: v}\ny: {<<: *x, z: 1}\n"
    )
    assert documents.parse_yaml(text) == yaml.safe_load(text)
    assert documents.parse_json(b'{"a": [1, 2.5, "\\ud83d\\ude00"]}') == {"a": [1, 2.5, "\U0001f600"]}


@pytest.mark.parametrize("loader", ["libyaml", "pure"])
@pytest.mark.parametrize(
    ("text", "why"),
    [
        (b"model: " + b"[" * 5000 + b"]" * 5000, ("nested deeper", "not valid YAML")),
        (
            b"a: &a [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[x]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\nb: [[[[*a]]]]\n",
            ("nested deeper",),
        ),
        (b'model: "\\ud800"\n', ("lone surrogate", "not valid YAML")),
        (b"port: " + b"1" * 65, ("integer of 65 digits",)),
        (BOMB.encode(), ("more than 10000 values",)),
        (b"a: &a " + b"x" * 100_000 + b"\nb: [" + b",".join([b"*a"] * 20) + b"]\n", ("characters of text",)),
        (b"a: &a [*a]\n", ("alias to an anchor that is not defined",)),
        (b"a: 1\n---\nb: 2\n", ("more than one YAML document",)),
    ],
)
def test_yaml_beyond_the_limits_is_refused(
    monkeypatch: pytest.MonkeyPatch, loader: str, text: bytes, why: tuple[str, ...]
) -> None:
    if loader == "pure":
        import yaml

        monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    monkeypatch.setattr(documents, "_LOADER", None)
    with pytest.raises(documents.DocumentError) as raised:
        documents.parse_yaml(text)
    assert any(phrase in str(raised.value) for phrase in why), raised.value


def test_a_huge_environment_is_read_only_up_to_its_cap(strangers: Strangers) -> None:
    padding = {f"PADDING{i}": "x" * 100_000 for i in range(12)}  # 128 KiB at most per variable
    pid = strangers.start(["llama-server"], LLAMA_ARG_MODEL="/m/env.gguf", **padding)
    found = _by_pid(Scanner().scan(), {pid})[pid]
    assert any("environment is larger than" in problem for problem in found.problems)
    assert found.model == "/m/env.gguf"  # before the padding: within the cap


def test_a_regular_file_the_owner_can_read_is_read_as_before(strangers: Strangers, nobody_dir: Path) -> None:
    readable = _write(nobody_dir / "sub" / "c.yaml", "model: org/readable\n", 0o640)
    os.chown(readable, 0, NOBODY)  # readable through its group only
    pid = strangers.start(["vllm", "serve", "--config", "sub/c.yaml"], nobody_dir)
    assert _by_pid(Scanner().scan(), {pid})[pid].model == "org/readable"
    assert stat.S_IMODE(readable.stat().st_mode) == 0o640


def test_the_version_of_a_running_engine_is_read_as_its_owner(
    strangers: Strangers, nobody_dir: Path, helper: Path
) -> None:
    """The dist-info files of the site-packages a running engine maps are read with the same
    reader: a FIFO METADATA or one its owner cannot read gives no version, and no hang."""
    dynamic = nobody_dir / "idle-dynamic"  # tests/helpers/idle.c linked dynamically: LD_PRELOAD works
    shutil.copy(helper, dynamic)
    dynamic.chmod(0o755)
    metadata = "Metadata-Version: 2.1\nName: vllm\nVersion: {}\n\nVersion: not-this-one\n"
    cases = {"readable": "0.9.1", "fifo": None, "root-only": None}
    pids = {}
    for case, version in cases.items():
        site = nobody_dir / case / "lib" / "python3.11" / "site-packages"
        info = site / f"vllm-{version or '6.6.6'}.dist-info" / "METADATA"
        if case == "fifo":
            info.parent.mkdir(parents=True)
            os.mkfifo(info, 0o666)
        else:
            _write(info, metadata.format(version or "6.6.6"), 0o644 if case == "readable" else 0o600)
        library = site / "_marker.so"
        subprocess.run(
            ["gcc", "-shared", "-fPIC", "-o", str(library), "-x", "c", "/dev/null"], check=True, timeout=60
        )
        library.chmod(0o755)
        pids[strangers.start(["vllm", "serve", "m"], executable=dynamic, LD_PRELOAD=str(library))] = version
    found = _by_pid(Scanner().scan(), pids)
    spec = get_engine_spec("vllm")
    for pid, version in pids.items():
        assert spec.get_runtime_info(running=found[pid]).version == version


def test_a_config_that_is_not_read_is_not_read_again_each_scan(
    strangers: Strangers, nobody_dir: Path
) -> None:
    """A refused file (unreadable by its owner, too large) is looked at again only when it
    changes: the engine's model is the very same object scan after scan, until an edit."""
    _write(nobody_dir / "root-only.yaml", "model: root-only\n", 0o600)
    _write(nobody_dir / "large.yaml", "model: x\n" + "#" * (1 << 19))
    pids = [
        strangers.start(["vllm", "serve", "--config", name], nobody_dir)
        for name in ("root-only.yaml", "large.yaml")
    ]
    scanner = Scanner()
    first = _by_pid(scanner.scan(), pids)
    second = _by_pid(scanner.scan(), pids)
    assert all(first[pid] is second[pid] for pid in pids)
    assert "not readable by the process's owner" in first[pids[0]].problems[0]
    assert "is larger than" in first[pids[1]].problems[0]
    _write(nobody_dir / "large.yaml", "model: org/small-now\n")
    assert _by_pid(scanner.scan(), pids)[pids[1]].model == "org/small-now"


# -- model files (EngineProcess.model_facts, the names a table shows) ------------------------


@pytest.fixture
def private_models() -> Iterator[Path]:
    """A directory only root may enter, holding a readable model."""
    path = Path(tempfile.mkdtemp(prefix="enginespec-private-models-"))
    try:
        write_gguf(path / "secret.gguf", arch="qwen2")
        (path / "secret.gguf").chmod(0o644)
        path.chmod(0o700)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _engine_of(pid: int) -> EngineProcess:
    found = [p for p in Scanner().scan() if p.pid == pid]
    assert found, f"pid {pid} was not found as an engine"
    return found[0]


def test_a_model_its_owner_cannot_read_is_not_read(
    strangers: Strangers, private_models: Path, resolver: str
) -> None:
    engine = _engine_of(
        strangers.start(["llama-server", "-m", str(private_models / "secret.gguf"), "--port", "18731"])
    )
    assert engine.model_facts is None
    assert "not readable by the process's owner" in (engine.model_facts_problem or "")


def test_a_fifo_named_as_the_model_is_never_opened(
    strangers: Strangers, nobody_dir: Path, resolver: str
) -> None:
    os.mkfifo(nobody_dir / "fifo.gguf", 0o666)
    engine = _engine_of(
        strangers.start(["llama-server", "-m", "fifo.gguf", "--port", "18732"], cwd=nobody_dir)
    )
    assert engine.model_facts is None
    assert "is not a regular file (a FIFO)" in (engine.model_facts_problem or "")


def test_model_paths_are_resolved_inside_a_chroot(
    strangers: Strangers, nobody_dir: Path, resolver: str
) -> None:
    """An absolute symlink inside a chroot points inside it; a relative model path is read from
    the working directory inside it; a host path outside the jail is not reached."""
    host_model = write_gguf(nobody_dir / "host.gguf", arch="gemma")
    host_model.chmod(0o644)
    jail = nobody_dir / "jail"
    (jail / "models").mkdir(parents=True)
    shutil.copy(strangers.idle, jail / "idle")
    write_gguf(jail / "models" / "inner.gguf", arch="phi3")
    os.symlink("/models/inner.gguf", jail / "models" / "link.gguf")  # absolute, as the jail sees it
    os.symlink(host_model, jail / "models" / "escape.gguf")  # the host's path: not in the jail
    inner = _engine_of(
        strangers.start(["llama-server", "-m", "/models/link.gguf", "--port", "18733"], chroot=jail)
    )
    relative = _engine_of(
        strangers.start(["llama-server", "-m", "inner.gguf", "--port", "18734"], cwd="/models", chroot=jail)
    )
    escape = _engine_of(
        strangers.start(["llama-server", "-m", "/models/escape.gguf", "--port", "18735"], chroot=jail)
    )
    for engine in (inner, relative):
        assert engine.model_facts is not None, engine.model_facts_problem
        assert engine.model_facts.architecture == "phi3"
    assert inner.model_facts.files == ("/models/link.gguf",)  # type: ignore[union-attr]
    assert relative.model_facts.files == ("/models/inner.gguf",)  # type: ignore[union-attr]
    assert escape.model_facts is None
    assert "No such file or directory" in (escape.model_facts_problem or "")


def _hf_cache(hub: Path, repo: str, layers: int) -> None:
    org, name = repo.split("/")
    revision = "1" * 40
    folder = hub / f"models--{org}--{name}"
    snapshot = folder / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(revision)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_hidden_layers": layers,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 2048,
    }
    (snapshot / "config.json").write_text(json.dumps(config))


def test_a_hugging_face_id_is_found_in_the_cache_its_environment_names(
    strangers: Strangers, nobody_dir: Path, private_models: Path, resolver: str
) -> None:
    """HF_HOME from the process's own environment; a cache only root can read is not read."""
    _hf_cache(nobody_dir / "hf" / "hub", "org/tiny", layers=3)
    _hf_cache(private_models / "hf" / "hub", "org/tiny", layers=5)
    own = _engine_of(
        strangers.start(["vllm", "serve", "org/tiny", "--port", "18736"], HF_HOME=str(nobody_dir / "hf"))
    )
    assert own.model_facts is not None, own.model_facts_problem
    assert own.model_facts.layers == 3
    assert own.model_facts.files[0].startswith(str(nobody_dir / "hf" / "hub"))
    root_only = _engine_of(
        strangers.start(["vllm", "serve", "org/tiny", "--port", "18737"], HF_HOME=str(private_models / "hf"))
    )
    assert root_only.model_facts is None
    assert "Hugging Face cache" in (root_only.model_facts_problem or "")


def test_an_ollama_blob_is_named_only_by_manifests_its_owner_can_read(
    strangers: Strangers, nobody_dir: Path, resolver: str
) -> None:
    models = nobody_dir / "models"
    digest = "ab" * 32
    (models / "blobs").mkdir(parents=True)
    blob = write_gguf(models / "blobs" / "tmp.gguf").rename(models / "blobs" / f"sha256-{digest}")
    manifest = models / "manifests" / "registry.ollama.ai" / "library" / "qwen3" / "8b"
    manifest.parent.mkdir(parents=True)
    layer = {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}"}
    manifest.write_text(json.dumps({"layers": [layer]}))
    pid = strangers.start(["ollama", "runner", "--model", str(blob), "--port", "18738"])
    assert model_name(str(blob), pid, "ollama") == "qwen3:8b"
    engine = _engine_of(pid)
    assert engine.model_facts is not None, engine.model_facts_problem
    assert engine.model_facts.registry_name == "qwen3:8b"
    manifest.chmod(0o600)  # root's alone now: not the runner's owner's to read
    other = strangers.start(["ollama", "runner", "--model", str(blob), "--port", "18739"])
    assert model_name(str(blob), other, "ollama") == str(blob)
    assert model_name(str(blob)) == str(blob)  # no process: no files are read at all
