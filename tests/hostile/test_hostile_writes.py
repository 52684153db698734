"""Every file enginespec writes (a feed, the exporter's textfile, a run's log) goes through one
writer (enginespec.untrusted.safewrite): a name another user planted as a symlink is never written through,
a directory other users can change is refused unless it is sticky and the file is ours, and the
mode is the umask's. The CLI runs as users run it; the planted links point at a file that must
stay untouched."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge

import enginespec.fleet.exporter as exporter
from enginespec.errors import FileWriteError
from enginespec.lifecycle.logbook import LogBook
from enginespec.untrusted.safewrite import create_file, replace_file

VICTIM = "root's file: never to be written through a link\n"
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="chowns a file to nobody: needs root")


def _export(*args: str, umask: int | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "enginespec.cli", "feed", "--format", "file-sd", *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        process_group=0,
        umask=-1 if umask is None else umask,
    )


@contextmanager
def _umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim"
    path.write_text(VICTIM)
    path.chmod(0o600)
    return path


@pytest.fixture
def open_dir(nobody_dir: Path) -> Path:
    """A directory every user can write, not sticky (mode 0777)."""
    nobody_dir.chmod(0o777)
    return nobody_dir


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Gauge("enginespec_test", "a series", registry=registry).set(1)
    return registry


def test_a_file_is_replaced_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    out = tmp_path / "feed.json"
    out.write_text("old")
    keep = out.open()  # a reader that opened the old file goes on reading the old file
    with _umask(0o022):
        replace_file(str(out), b"new\n", field="--out")
    assert out.read_text() == "new\n"
    assert keep.read() == "old"
    keep.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["feed.json"]
    assert out.stat().st_mode & 0o777 == 0o644
    replace_file(str(out), b"stated\n", field="--out", mode=0o640)
    assert out.stat().st_mode & 0o777 == 0o640


def test_the_textfile_is_never_written_through_a_link_at_its_temporary_name(
    tmp_path: Path, victim: Path
) -> None:
    """prometheus-client's writer opened ``PATH.PID.THREAD`` with ``open(..., "w")``: a link
    planted there was followed (the victim was overwritten with the series)."""
    textfile = tmp_path / "enginespec.prom"
    planted = tmp_path / f"enginespec.prom.{os.getpid()}.{threading.current_thread().ident}"
    planted.symlink_to(victim)
    exporter._write_textfile(str(textfile), _registry())
    assert victim.read_text() == VICTIM
    assert planted.is_symlink()
    assert "enginespec_test 1.0" in textfile.read_text()
    assert not textfile.is_symlink()


def test_a_link_at_the_feeds_path_is_replaced_not_followed(tmp_path: Path, victim: Path) -> None:
    out = tmp_path / "engines.json"
    out.symlink_to(victim)
    done = _export("--out", str(out))
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == VICTIM
    assert not out.is_symlink()
    assert out.read_text().startswith("[")


def test_a_link_at_a_new_files_name_is_refused(tmp_path: Path, victim: Path) -> None:
    """A run's log is a new file (its name the start time): a link there is not appended to."""
    log = tmp_path / "vllm-8000-abc" / "2026-12-06T07-00-00.000000Z.log"
    log.parent.mkdir()
    log.symlink_to(victim)
    with pytest.raises(FileWriteError, match="something is already there"):
        LogBook(log)
    assert victim.read_text() == VICTIM
    with pytest.raises(FileWriteError):
        create_file(str(log), field="log file")


def test_a_directory_others_can_write_is_refused(open_dir: Path) -> None:
    """Another user could swap the file after it is written (or plant what is read as it)."""
    out = open_dir / "engines.json"
    done = _export("--out", str(out))
    assert done.returncode == 1
    assert f"--out {out}: refused: other users can write in {open_dir} and it is not sticky" in done.stderr
    textfile = open_dir / "enginespec.prom"
    with pytest.raises(Exception, match=f"--textfile {textfile}: refused: other users can write"):
        exporter._write_textfile(str(textfile), _registry())
    with pytest.raises(FileWriteError, match="refused: other users can write"):
        LogBook(open_dir / "run.log")
    assert list(open_dir.iterdir()) == []


@root_only
def test_a_sticky_directory_takes_our_files_only(open_dir: Path) -> None:
    open_dir.chmod(0o1777)
    ours = open_dir / "ours.json"
    done = _export("--out", str(ours))
    assert done.returncode == 0, done.stderr
    assert ours.read_text().startswith("[")
    theirs = open_dir / "theirs.json"
    theirs.write_text("nobody's\n")
    os.chown(theirs, 65534, 65534)
    done = _export("--out", str(theirs))
    assert done.returncode == 1
    assert f"--out {theirs}: refused: it is another user's file" in done.stderr
    assert theirs.read_text() == "nobody's\n"


def test_the_umask_gives_the_mode(tmp_path: Path) -> None:
    """Feeds were made 0644 whatever the umask; a textfile and a log follow it too."""
    out = tmp_path / "engines.json"
    done = _export("--out", str(out), umask=0o077)
    assert done.returncode == 0, done.stderr
    assert out.stat().st_mode & 0o777 == 0o600
    done = _export("--out", str(out), umask=0o027)
    assert done.returncode == 0, done.stderr
    assert out.stat().st_mode & 0o777 == 0o640
    with _umask(0o077):
        exporter._write_textfile(str(tmp_path / "enginespec.prom"), _registry())
        book = LogBook(tmp_path / "logs" / "run.log")
        book.note("started")
    assert (tmp_path / "enginespec.prom").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "logs" / "run.log").stat().st_mode & 0o777 == 0o600
    assert "started" in (tmp_path / "logs" / "run.log").read_text()
