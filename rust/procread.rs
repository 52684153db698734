//! Reads of procfs under one root: `/proc`, or a fixture host's `ROOT/proc`. Every file the
//! scanner opens is opened here, and what it holds is parsed by `procfs` (reading kept apart
//! from parsing, as the `procfs` and `procfs-core` crates do), so the whole scan follows the root
//! it is given and the parsers stay pure functions a fuzzer can call.
//!
//! Nothing here panics or fails on a process that vanishes, is a zombie, or hides its files: a
//! read that fails says whether the file was gone or denied, and the caller decides.

use std::fs::File;
use std::io::{ErrorKind, Read};
#[cfg(unix)]
use std::os::unix::fs::FileExt;
#[cfg(windows)]
use std::os::windows::fs::FileExt;
use std::path::{Path, PathBuf};

use rustc_hash::{FxHashMap, FxHashSet};

#[cfg(target_os = "linux")]
use crate::procfs::parse_pid_dirents;
use crate::procfs::{
    capped_argv, is_device_link, parse_children, parse_socket_link, parse_stat, parse_tcp_listen,
    parse_u64, tcp_row_after_listening, ProcStat, TcpListen,
};
#[cfg(target_os = "linux")]
use crate::procfs::{diag_listen_request, parse_diag_listen, DiagAnswer};
use crate::procfs::{AF_INET, AF_INET6};

/// How much of each end of an engine's `cmdline` is compared on every scan to notice a rewrite.
pub const CMDLINE_PEEK: usize = 4096;

/// Why a file could not be read.
pub enum ReadError {
    /// ENOENT, ESRCH (the process exited while being read), anything but a refusal.
    Gone,
    /// EACCES or EPERM: another user's process.
    Denied,
}

/// The LISTEN sockets of each network namespace (by its inode) read so far in one scan: a
/// socket table can take 10 ms to read, and 1,024 engines of one namespace need it once.
pub type Tables = FxHashMap<u64, Vec<TcpListen>>;

/// The procfs root every read goes through.
#[derive(Debug, Clone)]
pub struct ProcRoot {
    root: PathBuf,
}

impl ProcRoot {
    pub fn new(root: PathBuf) -> Self {
        ProcRoot { root }
    }

    /// `ROOT/PID/FILE`, in one allocation (std opens short paths through a stack buffer). Built
    /// from the root's bytes, not its `display()`, which would replace non-UTF-8 bytes.
    fn pid_path(&self, pid: i32, file: &str) -> PathBuf {
        use std::io::Write;
        let root = self.root.as_os_str().as_encoded_bytes();
        let mut path = Vec::with_capacity(root.len() + 32);
        path.extend_from_slice(root);
        // Writing into a Vec cannot fail.
        let _ = write!(path, "/{pid}/{file}");
        // SAFETY: the root's own encoded bytes followed by ASCII, as from_encoded_bytes_unchecked
        // requires.
        PathBuf::from(unsafe { std::ffi::OsString::from_encoded_bytes_unchecked(path) })
    }

    /// A file of the host, not of one process: `stat`, `uptime`, `sys/kernel/pid_max`, ...
    pub fn host_file(&self, name: &str) -> Option<Vec<u8>> {
        read_small(&self.root.join(name))
    }

    /// Reads `ROOT/PID/FILE` into `buf` (cleared first).
    pub fn read_into(&self, pid: i32, file: &str, buf: &mut Vec<u8>) -> Result<(), ReadError> {
        read_into(&self.pid_path(pid, file), buf)
    }

    /// Reads at most `limit` bytes of `ROOT/PID/FILE` into `buf` (cleared first); whether the
    /// file goes on beyond them (a process sets its own environment's size, up to megabytes).
    pub fn read_capped(
        &self,
        pid: i32,
        file: &str,
        limit: usize,
        buf: &mut Vec<u8>,
    ) -> Result<bool, ReadError> {
        buf.clear();
        let file = File::open(self.pid_path(pid, file)).map_err(classify_io)?;
        while buf.len() <= limit {
            if buf.capacity() - buf.len() < READ_CHUNK {
                buf.reserve(READ_CHUNK.max(buf.len()));
            }
            match read_spare(&file, buf) {
                Ok(0) => return Ok(false),
                Ok(_) => {}
                Err(err) if err.kind() == ErrorKind::Interrupted => {}
                Err(err) => return Err(classify_io(err)),
            }
        }
        buf.truncate(limit);
        Ok(true)
    }

    /// The process's `stat`, parsed; `None` when it is gone or unreadable.
    pub fn stat(&self, pid: i32) -> Option<ProcStat> {
        parse_stat(&read_small(&self.pid_path(pid, "stat"))?)
    }

    /// The process's argv (capped as the scanner caps it); empty when it cannot be read.
    pub fn argv(&self, pid: i32) -> Vec<Vec<u8>> {
        read_small(&self.pid_path(pid, "cmdline"))
            .map(|data| {
                capped_argv(&data)
                    .0
                    .into_iter()
                    .map(<[u8]>::to_vec)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Where the process's `exe` link points.
    pub fn exe(&self, pid: i32) -> std::io::Result<PathBuf> {
        std::fs::read_link(self.pid_path(pid, "exe"))
    }

    /// Where the process's link `name` (`root`, `cwd`) points, as bytes.
    pub fn link(&self, pid: i32, name: &str) -> std::io::Result<Vec<u8>> {
        std::fs::read_link(self.pid_path(pid, name))
            .map(|p| p.into_os_string().into_encoded_bytes())
    }

    /// An `O_PATH` fd of the directory the process's link `name` leads to (its `root`), to
    /// resolve paths it names inside it.
    #[cfg(target_os = "linux")]
    pub fn open_directory(&self, pid: i32, name: &str) -> std::io::Result<std::os::fd::OwnedFd> {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(self.pid_path(pid, name))
            .map(std::os::fd::OwnedFd::from)
    }

    /// Whether `ROOT/PID` exists (a zombie's does).
    pub fn exists(&self, pid: i32) -> bool {
        self.pid_path(pid, "").exists()
    }

    /// The inode of `ROOT/PID` (as the listing gives it), `None` when the process is gone.
    pub fn inode(&self, pid: i32) -> Option<u64> {
        let metadata = std::fs::metadata(self.pid_path(pid, "")).ok()?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            Some(metadata.ino())
        }
        // Without inodes (Windows, where this scanner only builds): whether the entry exists.
        #[cfg(not(unix))]
        {
            let _ = metadata;
            Some(0)
        }
    }

    /// Whether the process's `cmdline` (which procfs reads from any offset) still holds `known`,
    /// judged from its first and last [`CMDLINE_PEEK`] bytes and its length: at most about twice
    /// that is read, whatever the size of `known`. Any failure answers `false`, so the caller
    /// reads the whole file and counts what went wrong.
    pub fn cmdline_holds(&self, pid: i32, known: &[u8]) -> bool {
        let Ok(file) = File::open(self.pid_path(pid, "cmdline")) else {
            return false;
        };
        // `expected` at `offset`; at the end of the file one byte more is asked for, so that a
        // file that grew does not match.
        let holds = |offset: usize, expected: &[u8], last: bool| {
            let mut buf = [0u8; 2 * CMDLINE_PEEK + 1];
            let Some(window) = buf.get_mut(..expected.len() + usize::from(last)) else {
                return false;
            };
            read_at_most(&file, offset as u64, window)
                .is_ok_and(|n| window.get(..n) == Some(expected))
        };
        if known.len() <= 2 * CMDLINE_PEEK {
            return holds(0, known, true);
        }
        let tail_at = known.len() - CMDLINE_PEEK;
        match (known.get(..CMDLINE_PEEK), known.get(tail_at..)) {
            (Some(head), Some(tail)) => holds(0, head, false) && holds(tail_at, tail, true),
            _ => false,
        }
    }

    /// `ROOT/PID/net/TABLE` (`net/tcp` or `net/tcp6`) into `buf` as far as it lists listening
    /// sockets: the kernel prints those first, then walks every bucket of its established-connection
    /// hash, a millisecond or more even with few connections (a hash sized for the host's memory).
    /// That part is read only up to its first row (see `tcp_row_after_listening`), in growing
    /// chunks so that little of it is walked; `buf` ends with the last listening row.
    fn read_listening(&self, pid: i32, table: &str, buf: &mut Vec<u8>) -> Result<(), ReadError> {
        buf.clear();
        let mut file = File::open(self.pid_path(pid, table)).map_err(classify_io)?;
        // A row is 150 bytes (178 in tcp6): the first read holds the header and a few rows.
        let mut chunk = 1024;
        // Where the first row not yet looked at begins; the header is no row.
        let mut unchecked = None;
        loop {
            let filled = buf.len();
            buf.resize(filled + chunk, 0);
            let read = match buf.get_mut(filled..) {
                Some(room) => file.read(room),
                None => Ok(0),
            };
            buf.truncate(filled + *read.as_ref().unwrap_or(&0));
            match read {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(err) if err.kind() == ErrorKind::Interrupted => continue,
                Err(err) => return Err(classify_io(err)),
            }
            let mut at = match unchecked {
                Some(at) => at,
                None => match buf.iter().position(|&b| b == b'\n') {
                    Some(header_end) => header_end + 1,
                    None => continue,
                },
            };
            while let Some(row_len) = buf
                .get(at..)
                .and_then(|rest| rest.iter().position(|&b| b == b'\n'))
            {
                if buf
                    .get(at..at + row_len)
                    .is_some_and(tcp_row_after_listening)
                {
                    buf.truncate(at);
                    return Ok(());
                }
                at += row_len + 1;
            }
            unchecked = Some(at);
            chunk = (chunk * 2).min(16 * 1024);
        }
    }

    /// Lists the numeric entries of procfs as (pid, inode of `ROOT/PID`), with raw `getdents64`
    /// calls into one buffer: no allocation per entry. Leaves `out` empty if it cannot be read.
    #[cfg(target_os = "linux")]
    pub fn list(&self, out: &mut Vec<(i32, u64)>) {
        use std::os::fd::AsRawFd;

        out.clear();
        let Ok(dir) = File::open(&self.root) else {
            return;
        };
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: the fd is open for the whole loop and `buf` is writable for `buf.len()`
            // bytes.
            let read = unsafe {
                libc::syscall(
                    libc::SYS_getdents64,
                    dir.as_raw_fd(),
                    buf.as_mut_ptr(),
                    buf.len(),
                )
            };
            let Ok(read) = usize::try_from(read) else {
                return;
            };
            if read == 0 || !parse_pid_dirents(buf.get(..read).unwrap_or_default(), out) {
                return;
            }
        }
    }

    /// The same for systems whose procfs is not Linux's (the native backend uses `scan_sysinfo`
    /// there; without inodes, on Windows, a reused pid is told by the cursor alone).
    #[cfg(not(target_os = "linux"))]
    pub fn list(&self, out: &mut Vec<(i32, u64)>) {
        #[cfg(unix)]
        use std::os::unix::fs::DirEntryExt;
        #[cfg(not(unix))]
        let inode = |_: &std::fs::DirEntry| 0;
        #[cfg(unix)]
        let inode = |entry: &std::fs::DirEntry| entry.ino();

        out.clear();
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return;
        };
        for entry in entries.flatten() {
            if let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) {
                out.push((pid, inode(&entry)));
            }
        }
    }

    /// Every live descendant of `pid`, from `ROOT/PID/task/TID/children`. Those lists include
    /// zombies (exited, not yet reaped), which serve nothing and have no children left: each
    /// child's `stat` is read to leave them out.
    pub fn descendants(&self, pid: i32) -> Vec<i32> {
        let mut seen: FxHashSet<i32> = FxHashSet::default();
        let mut queue = vec![pid];
        while let Some(parent) = queue.pop() {
            let Ok(tasks) = std::fs::read_dir(self.pid_path(parent, "task")) else {
                continue;
            };
            for task in tasks.flatten() {
                let Some(children) = read_small(&task.path().join("children")) else {
                    continue;
                };
                for child in parse_children(&children) {
                    if child != pid && !seen.contains(&child) && self.is_alive(child) {
                        seen.insert(child);
                        queue.push(child);
                    }
                }
            }
        }
        let mut out: Vec<i32> = seen.into_iter().collect();
        out.sort_unstable();
        out
    }

    /// Whether `pid` exists and is neither a zombie nor dead.
    fn is_alive(&self, pid: i32) -> bool {
        self.stat(pid).is_some_and(|stat| !stat.is_dead())
    }

    /// The inode of `pid`'s network namespace, from the number its `ns/net` link names
    /// (`net:[4026531840]`, the nsfs inode), which a fixture host's link can name too; `None`
    /// when it cannot be read.
    pub fn netns(&self, pid: i32) -> Option<u64> {
        let target = std::fs::read_link(self.pid_path(pid, "ns/net")).ok()?;
        let number = target
            .as_os_str()
            .as_encoded_bytes()
            .strip_prefix(b"net:[")?
            .strip_suffix(b"]")?;
        parse_u64(number)
    }

    /// The socket inodes `pid` holds (from its `fd/` links), `None` when its fd directory cannot
    /// be read; and whether some of it was refused (another user's process: then only what could
    /// be seen).
    pub fn socket_inodes(&self, pid: i32) -> (Option<FxHashSet<u64>>, bool) {
        let (files, denied) = self.open_files(pid, false);
        (files.map(|f| f.sockets), denied)
    }

    /// What `pid`'s `fd/` links name: its socket inodes and, with `devices`, the character
    /// devices it holds (only links into `/dev` are followed, see [`is_device_link`]); `None`
    /// when the directory cannot be read, and whether some of it was refused.
    pub fn open_files(&self, pid: i32, devices: bool) -> (Option<OpenFiles>, bool) {
        let directory = self.pid_path(pid, "fd");
        let fds = match std::fs::read_dir(&directory) {
            Ok(fds) => fds,
            Err(err) => return (None, err.kind() == ErrorKind::PermissionDenied),
        };
        let host = self.host_prefix();
        let mut denied = false;
        let mut files = OpenFiles::default();
        for fd in fds.flatten() {
            let target = match std::fs::read_link(fd.path()) {
                Ok(target) => target,
                Err(err) => {
                    denied |= err.kind() == ErrorKind::PermissionDenied;
                    continue;
                }
            };
            let target = target.as_os_str().as_encoded_bytes();
            if let Some(inode) = parse_socket_link(target) {
                files.sockets.insert(inode);
            } else if devices && is_device_link(target, host) {
                let number = fd.file_name().to_str().and_then(|n| n.parse::<i32>().ok());
                if let (Some(number), Some((major, minor))) = (number, char_device(&fd.path())) {
                    files.devices.push((number, major, minor));
                }
            }
        }
        files.devices.sort_unstable();
        (Some(files), denied)
    }

    /// The directory a fixture host's links name their `/dev` below (the parent of `ROOT/proc`);
    /// empty for the host's own `/proc`.
    fn host_prefix(&self) -> &[u8] {
        match self.root.parent() {
            Some(host) if self.root != Path::new("/proc") => host.as_os_str().as_encoded_bytes(),
            _ => b"",
        }
    }

    /// The LISTEN sockets of `pid`'s network namespace, and whether a table was refused: those
    /// of the scanner's own namespace asked of the kernel (`NETLINK_SOCK_DIAG`), others read from
    /// its `net/tcp` and `net/tcp6` (as far as their listening part goes).
    pub fn listen_table(&self, pid: i32) -> (Vec<TcpListen>, bool) {
        let own = self
            .own_netns()
            .is_some_and(|own| self.netns(pid) == Some(own));
        let mut found = Vec::new();
        let mut data = Vec::new();
        let mut denied = false;
        for (table, family) in [("net/tcp", AF_INET), ("net/tcp6", AF_INET6)] {
            if let Some(sockets) = own.then(|| diag_listening(family)).flatten() {
                found.extend(sockets);
                continue;
            }
            match self.read_listening(pid, table, &mut data) {
                Ok(()) => found.extend(parse_tcp_listen(&data)),
                Err(ReadError::Denied) => denied = true,
                Err(ReadError::Gone) => {}
            }
        }
        (found, denied)
    }

    /// The inode of the scanner's own network namespace, when this root is the host's `/proc`
    /// (`None` for a fixture host: its tables are always read).
    fn own_netns(&self) -> Option<u64> {
        if self.root != Path::new("/proc") {
            return None;
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata("/proc/self/ns/net").ok().map(|m| m.ino())
        }
        #[cfg(not(unix))]
        None
    }

    /// What the fds of the tree of `pid` (with `others`, its descendants) hold: with `ports`,
    /// the TCP ports in LISTEN state whose sockets they hold, sorted; with `devices`, each listed
    /// pid's character devices. And whether some fd directory, fd link or socket table could not
    /// be read for lack of permission (what was found is then only what could be seen).
    /// `tables` keeps each namespace's table for the rest of the scan.
    pub fn tree_files(
        &self,
        pid: i32,
        others: &[i32],
        wanted: TreeReads,
        tables: &mut Tables,
    ) -> TreeFiles {
        let mut found = TreeFiles::default();
        if !wanted.ports && !wanted.devices {
            return found;
        }
        let mut inodes: FxHashSet<u64> = FxHashSet::default();
        for p in std::iter::once(pid).chain(others.iter().copied()) {
            let (files, denied) = self.open_files(p, wanted.devices);
            found.denied |= denied;
            if let Some(files) = files {
                inodes.extend(files.sockets);
                if wanted.devices {
                    found.devices.push((p, files.devices));
                }
            }
        }
        if !wanted.ports || inodes.is_empty() {
            return found;
        }
        let netns = self.netns(pid);
        let cached = netns.and_then(|ns| tables.get(&ns));
        let read;
        let listening: &[TcpListen] = if let Some(listening) = cached {
            listening
        } else {
            let (listening, denied_here) = self.listen_table(pid);
            found.denied |= denied_here;
            match netns {
                Some(ns) if !denied_here => tables.entry(ns).or_insert(listening),
                _ => {
                    read = listening;
                    &read
                }
            }
        };
        found.listen_ports.extend(
            listening
                .iter()
                .filter(|l| inodes.contains(&l.inode))
                .map(|l| l.port),
        );
        found.listen_ports.sort_unstable();
        found.listen_ports.dedup();
        found
    }
}

/// What one process's `fd/` links name.
#[derive(Debug, Default)]
pub struct OpenFiles {
    pub sockets: FxHashSet<u64>,
    /// Each character device, sorted.
    pub devices: Vec<OpenDevice>,
}

/// A character device a process holds open: (fd, major, minor).
pub type OpenDevice = (i32, u32, u32);

/// A process's character devices: its pid and each it holds, sorted.
pub type ProcessDevices = (i32, Vec<OpenDevice>);

/// Which of a tree's open files [`ProcRoot::tree_files`] reads.
#[derive(Debug, Clone, Copy, Default)]
pub struct TreeReads {
    pub ports: bool,
    pub devices: bool,
}

/// What the fds of a process tree hold, read at one refresh.
#[derive(Debug, Default)]
pub struct TreeFiles {
    pub listen_ports: Vec<u16>,
    /// Each pid whose `fd/` could be listed, in the tree's order, with its character devices.
    pub devices: Vec<ProcessDevices>,
    /// Some fd directory, fd link or socket table could not be read (another user's process).
    pub denied: bool,
}

/// The (major, minor) of the character device at `path` (an fd's link, followed), `None` for
/// anything else. Asked with `AT_STATX_DONT_SYNC`: the attributes as the kernel holds them, so a
/// FUSE or network filesystem the process mounted over part of its `/dev` is never asked and
/// cannot keep the scan waiting.
#[cfg(target_os = "linux")]
fn char_device(path: &Path) -> Option<(u32, u32)> {
    let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    let mut found = std::mem::MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: statx(2) with a NUL-terminated path and a buffer of the kernel's `struct statx`;
    // a raw syscall because musl gained the wrapper only in 1.2.5.
    let done = unsafe {
        libc::syscall(
            libc::SYS_statx,
            libc::AT_FDCWD,
            name.as_ptr(),
            libc::AT_STATX_DONT_SYNC,
            libc::STATX_TYPE,
            found.as_mut_ptr(),
        )
    };
    if done != 0 {
        let error = std::io::Error::last_os_error().raw_os_error();
        // A kernel before 4.11, or a container whose seccomp profile refuses statx: a plain
        // stat, on a link already known to name a path in `/dev`.
        return matches!(error, Some(libc::ENOSYS | libc::EPERM))
            .then(|| plain_char_device(path))
            .flatten();
    }
    // SAFETY: the kernel filled the buffer (and it was zeroed before).
    let found = unsafe { found.assume_init() };
    let character = u32::from(found.stx_mode) & libc::S_IFMT == libc::S_IFCHR;
    character.then_some((found.stx_rdev_major, found.stx_rdev_minor))
}

#[cfg(target_os = "linux")]
fn plain_char_device(path: &Path) -> Option<(u32, u32)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let found = std::fs::metadata(path).ok()?;
    let rdev = found.rdev();
    found
        .file_type()
        .is_char_device()
        .then(|| (libc::major(rdev), libc::minor(rdev)))
}

#[cfg(not(target_os = "linux"))]
fn char_device(_path: &Path) -> Option<(u32, u32)> {
    None
}

/// The (socket inode, local port) of every TCP socket of `family` listening in the scanner's own
/// network namespace, asked of the kernel through `NETLINK_SOCK_DIAG` as `ss -lt` asks: it walks
/// its listening sockets only, where reading `net/tcp{,6}` walks every bucket of the
/// established-connection hash too (a millisecond or more per table, whatever the connections).
/// `None` when it cannot be asked: the table is read instead.
#[cfg(target_os = "linux")]
fn diag_listening(family: u8) -> Option<Vec<TcpListen>> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    // SAFETY: plain socket(2); the fd is owned at once.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if raw < 0 {
        return None;
    }
    // SAFETY: `raw` is a fresh fd nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // The kernel makes a dump as it is received; a bound keeps a scan from ever waiting long.
    let timeout = libc::timeval {
        tv_sec: 1,
        tv_usec: 0,
    };
    // SAFETY: `timeout` is a valid timeval of the size passed.
    let set = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&timeout as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    let seq = 0x5eed;
    let request = diag_listen_request(family, seq);
    // SAFETY: `request` is valid for its length.
    if set != 0
        || unsafe { libc::send(fd.as_raw_fd(), request.as_ptr().cast(), request.len(), 0) }
            != request.len() as isize
    {
        return None;
    }
    let mut buf = vec![0u8; 32 * 1024];
    let mut found = Vec::new();
    loop {
        // SAFETY: `buf` is writable for its length.
        let got = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if got < 0 && std::io::Error::last_os_error().kind() == ErrorKind::Interrupted {
            continue;
        }
        let datagram = buf.get(..usize::try_from(got).ok()?)?;
        match parse_diag_listen(datagram, seq, &mut found) {
            DiagAnswer::Done => return Some(found),
            DiagAnswer::More if !datagram.is_empty() => {}
            _ => return None,
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn diag_listening(_family: u8) -> Option<Vec<TcpListen>> {
    None
}

fn read_into(path: &Path, buf: &mut Vec<u8>) -> Result<(), ReadError> {
    buf.clear();
    let mut file = File::open(path).map_err(classify_io)?;
    read_to_end(&mut file, buf).map_err(classify_io)
}

/// The room a read is given at least: a whole `stat`, and most `cmdline`s, in one `read`.
const READ_CHUNK: usize = 4096;

/// Reads `file` to its end, appending to `buf`, straight into the buffer's spare room. std's
/// `read_to_end` first asks `statx` and `lseek` for a size hint (procfs files say 0) and then
/// probes with small reads: twice the system calls of `open`, `read`, the `read` that returns 0,
/// and `close`, which is all this costs for a file that fits in [`READ_CHUNK`] bytes.
fn read_to_end(file: &mut File, buf: &mut Vec<u8>) -> std::io::Result<()> {
    loop {
        let filled = buf.len();
        if buf.capacity() - filled < READ_CHUNK {
            buf.reserve(READ_CHUNK.max(filled));
        }
        let read = read_spare(file, buf);
        match read {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(err) if err.kind() == ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
}

/// One `read` into `buf`'s spare room, which it then holds; the number of bytes read.
#[cfg(unix)]
fn read_spare(file: &File, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    let room = buf.spare_capacity_mut();
    // SAFETY: `room` is writable for its length; read(2) initialises the bytes it reports.
    let read = unsafe { libc::read(file.as_raw_fd(), room.as_mut_ptr().cast(), room.len()) };
    let Ok(read) = usize::try_from(read) else {
        return Err(std::io::Error::last_os_error());
    };
    // SAFETY: the first `read` bytes of the spare room were just initialised (read <= room).
    unsafe { buf.set_len(buf.len() + read) };
    Ok(read)
}

/// The same without libc: the spare room is zeroed first.
#[cfg(not(unix))]
fn read_spare(mut file: &File, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    let filled = buf.len();
    buf.resize(buf.capacity(), 0);
    let read = match buf.get_mut(filled..) {
        Some(room) => file.read(room),
        None => Ok(0),
    };
    buf.truncate(filled + *read.as_ref().unwrap_or(&0));
    read
}

fn classify_io(err: std::io::Error) -> ReadError {
    match err.kind() {
        ErrorKind::PermissionDenied => ReadError::Denied,
        // ENOENT, ESRCH (process exited while being read), anything else: treat as gone.
        _ => ReadError::Gone,
    }
}

fn read_small(path: &Path) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    read_into(path, &mut buf).ok()?;
    Some(buf)
}

/// Fills `buf` from `offset` on, as far as the file goes; the number of bytes read.
fn read_at_most(file: &File, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        let Some(rest) = buf.get_mut(filled..) else {
            break;
        };
        #[cfg(unix)]
        let read = file.read_at(rest, offset + filled as u64)?;
        // The scanner reads no procfs off Linux; this only keeps the crate building there.
        #[cfg(windows)]
        let read = file.seek_read(rest, offset + filled as u64)?;
        match read {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(sl: usize, state: &str, inode: u64) -> String {
        format!(
            "{sl:4}: 0100007F:{:04X} 00000000:0000 {state} 00000000:00000000 00:00000000 00000000     0        0 {inode} 1 0000000000000000 100 0 0 10 0\n",
            8000 + sl
        )
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_kernel_tells_the_listening_sockets_of_our_own_namespace() {
        use std::os::fd::AsRawFd;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let link = std::fs::read_link(format!("/proc/self/fd/{}", listener.as_raw_fd())).unwrap();
        let inode = crate::procfs::parse_socket_link(link.as_os_str().as_encoded_bytes()).unwrap();
        let found = diag_listening(AF_INET).expect("NETLINK_SOCK_DIAG answers");
        let loopback = TcpListen {
            inode,
            address: vec![127, 0, 0, 1],
            port,
        };
        assert!(found.contains(&loopback), "{found:?}");
        let connection = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let local = connection.local_addr().unwrap().port();
        assert!(diag_listening(AF_INET)
            .unwrap()
            .iter()
            .all(|l| l.port != local));
        assert!(diag_listening(AF_INET6).is_some());
        // The host's /proc asks the kernel for our own namespace; a fixture root never does.
        assert!(ProcRoot::new("/proc".into()).own_netns().is_some());
        assert!(ProcRoot::new("/tmp/proc".into()).own_netns().is_none());
    }

    #[test]
    fn a_tcp_table_is_read_as_far_as_its_listening_sockets() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("100/net")).unwrap();
        let header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";
        // Listeners over several reads, then connections; a listener after those is never printed
        // by the kernel, so its row shows where the reading stopped.
        let listening: String = (0..300).map(|sl| row(sl, "0A", 5000 + sl as u64)).collect();
        let rest: String = [row(300, "01", 1), row(301, "06", 2), row(302, "0A", 3)].concat();
        std::fs::write(
            dir.path().join("100/net/tcp"),
            format!("{header}{listening}{rest}"),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("100/net/tcp6"),
            format!("{header}{}", row(0, "0A", 7)),
        )
        .unwrap();
        let proc = ProcRoot::new(dir.path().to_path_buf());
        let mut buf = Vec::new();
        assert!(proc.read_listening(100, "net/tcp", &mut buf).is_ok());
        assert_eq!(buf, format!("{header}{listening}").into_bytes());
        assert!(proc.read_listening(100, "net/tcp6", &mut buf).is_ok());
        let found: Vec<(u64, u16)> = parse_tcp_listen(&buf).map(|l| (l.inode, l.port)).collect();
        assert_eq!(found, vec![(7, 8000)]);
        assert!(proc.read_listening(101, "net/tcp", &mut buf).is_err());
    }
}
