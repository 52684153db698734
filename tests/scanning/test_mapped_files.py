"""The files a process maps (process/mappedfiles.py): from a real process's /proc/PID/maps, and from
maps lines of every shape the kernel writes (proc(5)): anonymous ranges, [heap], a path with
spaces, a deleted file, an escaped newline, and lines that are not the kernel's. Both backends."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from enginespec._host.root import HOST_ROOT, host_root
from enginespec.process.mappedfiles import MappedFile, mapped_files


def test_a_file_this_process_maps_is_listed_with_its_device_and_inode(tmp_path: Path) -> None:
    path = tmp_path / "with space.gguf"
    path.write_bytes(b"GGUF" * 1024)
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, prot=mmap.PROT_READ):
        found = mapped_files(os.getpid(), HOST_ROOT)
        status = path.stat()
        assert found is not None
        device = (os.major(status.st_dev), os.minor(status.st_dev))
        assert MappedFile(device, status.st_ino, str(path)) in found
    after = mapped_files(os.getpid(), HOST_ROOT) or []
    assert str(path) not in {m.path for m in after}


def test_every_shape_of_line(tmp_path: Path) -> None:
    lines = [
        "55d0c8a5e000-55d0c8a60000 r--p 00000000 fd:01 1311768 /usr/bin/python3.11",
        "55d0c8a60000-55d0c8a62000 r-xp 00002000 fd:01 1311768 /usr/bin/python3.11",
        "7f0000000000-7f0000021000 rw-p 00000000 00:00 0 ",
        "55d0c9000000-55d0c9021000 rw-p 00000000 00:00 0                          [heap]",
        "7f1000000000-7f1040000000 r--s 00000000 103:02 42        /models/my model.gguf",
        "7f2000000000-7f2000001000 r--p 00000000 08:11 77 /tmp/gone.gguf (deleted)",
        "7f3000000000-7f3000001000 r--p 00000000 08:11 78 /tmp/new\\012line.gguf",
        "not a maps line at all",
        "7f4000000000-7f4000001000 r--p 00000000 zz:11 79 /bad/device",
        "7f5000000000-7f5000001000 r--p 00000000 08:11 -3 /bad/inode",
        "7f6000000000-7f6000001000 r--p 00000000 0811 80 /no/colon",
        "",
    ]
    proc = tmp_path / "proc" / "4242"
    proc.mkdir(parents=True)
    (proc / "maps").write_text("\n".join(lines))
    found = mapped_files(4242, host_root(tmp_path))
    assert found == [
        MappedFile((0xFD, 1), 1311768, "/usr/bin/python3.11"),
        MappedFile((0x103, 2), 42, "/models/my model.gguf"),
        MappedFile((8, 0x11), 77, "/tmp/gone.gguf (deleted)"),
        MappedFile((8, 0x11), 78, "/tmp/new\\012line.gguf"),
    ]
    assert mapped_files(4343, host_root(tmp_path)) is None
