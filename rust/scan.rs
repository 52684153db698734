//! Incremental scanner of `/proc` (Linux): finds every engine server on the host.
//!
//! Cost model. A cold scan lists `/proc` and reads each process's `cmdline` once, and the `stat`
//! of those with pids handed out just before it (for their start time: see below); only engine
//! processes get more reads (`stat`, `exe`, children, sockets). Later scans trust
//! processes already classified without any per-pid read, except:
//! - pids the kernel may have handed out again since the last scan: those whose `/proc/PID`
//!   inode (free with the listing) changed, and those the pid allocation cursor
//!   (`/proc/sys/kernel/ns_last_pid`) and the fork counter (`processes` in `/proc/stat`) place in
//!   the cyclic interval (last cursor, cursor]; those are classified again;
//! - engines, whose `stat` is re-read to confirm their identity (pid, start time) and liveness,
//!   and whose argv is checked for a rewrite in place (setproctitle) at a cost bounded whatever its
//!   size: `comm` and argv's address range from that `stat`, and the first and last
//!   [`CMDLINE_PEEK`] bytes of `cmdline`; it is re-read whole and parsed again only when one differs;
//! - processes that may still `exec` an engine: exec wrappers (shells, `env`, `nohup`, ... given by
//!   the caller) and processes born since the previous scan, for a short while (on the first
//!   scan, those born shortly before it: caught between fork and exec, they show their parent's
//!   argv, and nothing else would make them read again once they exec).
//!
//! When nothing was forked since the previous listing began (`processes` is unchanged), not even
//! the listing is done: only engines and watched processes are read.
//!
//! What is reported for an engine is kept between scans as one shared record, with a revision
//! that changes whenever anything in it changes, so an unchanged engine costs a scan nothing more
//! whatever the size of its argv, and its callers can keep what they built from it.
//!
//! Event-driven mode ([`Scanner::apply_events`], fed by `proc_events`): the kernel says which
//! processes forked, exec'd, renamed themselves or exited, and only those are read; a tick then
//! re-checks the engines as a scan without listing does ([`Scanner::scan_after_events`]). Nothing
//! is watched for an exec, since the exec itself is reported. A listing scan stays available and
//! is what the caller runs when events were lost.
//!
//! Nothing here panics or fails on a process that vanishes, is a zombie, or hides its files.

use std::fs::File;
use std::io::{ErrorKind, Read};
#[cfg(unix)]
use std::os::unix::fs::FileExt;
#[cfg(windows)]
use std::os::windows::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::{FxHashMap, FxHashSet};

use crate::matcher::{basename, Facts, Matcher};
use crate::proc_events::Change;
#[cfg(target_os = "linux")]
use crate::procfs::parse_pid_dirents;
use crate::procfs::{
    capped_argv, parse_children, parse_socket_link, parse_stat, parse_tcp_listen, parse_u64,
    proc_stat_value, ProcStat, ARGV_CUT,
};
use crate::signature::Signature;

/// Caller-supplied knobs (the wrapper list is data owned by the Python package).
#[derive(Debug, Clone)]
pub struct ScanOptions {
    /// Basenames of programs that commonly `exec` another program (`sh`, `env`, `nohup`, ...).
    pub wrappers: Vec<Vec<u8>>,
    /// How long a process born since the previous scan is watched for an `exec`.
    pub young: Duration,
    /// Read the TCP ports the engine's process tree listens on.
    pub listen_ports: bool,
    /// How often an engine's process tree (workers) and sockets are re-read.
    pub refresh: Duration,
    /// Root of procfs (tests may point elsewhere).
    pub proc_root: PathBuf,
}

impl Default for ScanOptions {
    fn default() -> Self {
        ScanOptions {
            wrappers: Vec::new(),
            young: Duration::from_secs(5),
            listen_ports: true,
            refresh: Duration::from_secs(2),
            proc_root: PathBuf::from("/proc"),
        }
    }
}

/// Counts of the last scan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanStats {
    /// Processes listed in `/proc`.
    pub scanned: u64,
    /// Processes seen for the first time (their `cmdline` was read).
    pub new: u64,
    /// Processes gone since the previous scan, or that vanished while being read.
    pub vanished: u64,
    /// Processes whose `cmdline` could not be read (permissions, hidepid), counted on every scan.
    pub unreadable: u64,
    /// Engines reported without some of their facts because their `exe`, fds or sockets could
    /// not be read (another user's process, for a scanner that is not root).
    pub restricted: u64,
    /// Known processes read again: watched for `exec`, or in the reused-pid window.
    pub reread: u64,
    /// Whether the pid cursor could not bound reuse, so every known process was re-checked.
    pub full_recheck: bool,
}

/// One engine server process, with everything Python needs to build its model.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineProc {
    pub pid: i32,
    /// Changes whenever anything below changes; unique within one scanner, so a caller may keep
    /// what it built from a record for as long as the record's revision comes back.
    pub revision: u64,
    /// Epoch seconds, computed as psutil does (start ticks / CLK_TCK + btime).
    pub start_time: f64,
    pub ppid: i32,
    pub argv: Vec<Vec<u8>>,
    /// What the argv says: engine, model, served names, host, port.
    pub facts: Facts,
    pub exe: Option<Vec<u8>>,
    /// Every descendant process (for engines that fold their workers), sorted.
    pub descendants: Vec<i32>,
    /// The parent's argv, to tell who supervises the engine.
    pub parent_argv: Vec<Vec<u8>>,
    /// TCP ports in LISTEN state held by the engine or its descendants, sorted.
    pub listen_ports: Vec<u16>,
}

/// Hands out record revisions, unique within one scanner.
#[derive(Debug, Default)]
pub(crate) struct Revisions(u64);

impl Revisions {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }

    /// `record` with a new revision, to be changed: copied first only if a caller still holds it.
    fn change<'a>(&mut self, record: &'a mut Arc<EngineProc>) -> &'a mut EngineProc {
        let revision = self.next();
        let record = Arc::make_mut(record);
        record.revision = revision;
        record
    }
}

#[derive(Debug)]
struct EngineState {
    /// What is reported, parsed once from `cmdline`.
    record: Arc<EngineProc>,
    /// The `cmdline` the record was parsed from, to tell when the process rewrites it.
    cmdline: Vec<u8>,
    /// The `stat` last read: identity (start time), parent, and the signs of an argv rewrite.
    stat: ProcStat,
    exe_denied: bool,
    /// Whether some fd or socket of the process tree could not be read at the last refresh.
    tree_denied: bool,
    /// When `descendants` and `listen_ports` were last read.
    tree_read: Option<Instant>,
}

#[derive(Debug)]
enum Class {
    /// Not an engine. `watch` holds the cmdline of a process that may still exec an engine, and
    /// until when to watch it (`None`: while it lives, for exec wrappers).
    Other {
        watch: Option<(Vec<u8>, Option<Instant>)>,
    },
    Unreadable,
    Engine(Box<EngineState>),
}

#[derive(Debug)]
struct Known {
    generation: u64,
    /// Inode of `/proc/PID` from the listing: procfs gives each process's directory a fresh inode,
    /// so a change means the pid now belongs to another process (even when the pid cursor was
    /// moved by hand through `ns_last_pid`, as checkpoint/restore tools do).
    inode: u64,
    class: Class,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cursor {
    last_pid: u64,
    forks: u64,
}

/// Which known pids may belong to a different process than at the previous scan.
#[derive(Debug, Clone, Copy)]
enum Reuse {
    Nothing,
    Interval { after: u64, upto: u64 },
    Everything,
}

impl Reuse {
    fn may_reuse(self, pid: i32) -> bool {
        let pid = u64::try_from(pid).unwrap_or(0);
        match self {
            Reuse::Nothing => false,
            Reuse::Everything => true,
            Reuse::Interval { after, upto } if after <= upto => pid > after && pid <= upto,
            // the cursor wrapped around pid_max
            Reuse::Interval { after, upto } => pid > after || pid <= upto,
        }
    }
}

enum ReadError {
    Gone,
    Denied,
}

/// How much of each end of an engine's `cmdline` is compared on every scan to notice a rewrite.
pub const CMDLINE_PEEK: usize = 4096;

fn read_into(path: &Path, buf: &mut Vec<u8>) -> Result<(), ReadError> {
    buf.clear();
    let mut file = File::open(path).map_err(classify_io)?;
    file.read_to_end(buf).map_err(classify_io)?;
    Ok(())
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

/// Whether the file at `path` (a `cmdline`, which procfs reads from any offset) still holds
/// `known`, judged from its first and last [`CMDLINE_PEEK`] bytes and its length: at most about
/// twice that is read, whatever the size of `known`. Any failure answers `false`, so the caller
/// reads the whole file and counts what went wrong.
fn ends_match(path: &Path, known: &[u8]) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    // `expected` at `offset`; at the end of the file one byte more is asked for, so that a file
    // that grew does not match.
    let holds = |offset: usize, expected: &[u8], last: bool| {
        let mut buf = [0u8; 2 * CMDLINE_PEEK + 1];
        let Some(window) = buf.get_mut(..expected.len() + usize::from(last)) else {
            return false;
        };
        read_at_most(&file, offset as u64, window).is_ok_and(|n| window.get(..n) == Some(expected))
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

/// A zombie (`Z`) or dead (`X`) process: whatever its argv says, it serves nothing.
fn is_dead(state: u8) -> bool {
    state == b'Z' || state == b'X'
}

#[cfg(not(unix))]
fn clock_ticks() -> f64 {
    100.0
}

#[cfg(unix)]
fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// Pids handed out within this many before the cursor (or after it, during the listing) are the
/// ones a first scan checks for a recent birth: pids are handed out in order, so a process forked
/// in the last seconds has one of them unless the host forks thousands of times a second. The
/// bound keeps a cold scan to about one read per process.
const RECENT_PIDS: u64 = 4096;

/// Whether `pid` lies within [`RECENT_PIDS`] of the cursor `last`, either side, cyclically.
fn near_cursor(pid: u64, last: u64, pid_max: u64) -> bool {
    let span = pid_max.max(1);
    let behind = (last + span - pid % span) % span;
    let ahead = (pid + span - last % span) % span;
    behind < RECENT_PIDS || ahead < RECENT_PIDS
}

/// Seconds since boot, the first field of `/proc/uptime`.
fn parse_uptime(data: &[u8]) -> Option<f64> {
    std::str::from_utf8(data)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The kernel's process-wide facts read once per scanner.
#[derive(Debug)]
struct Host {
    boot_time: f64,
    clock_ticks: f64,
    pid_max: u64,
}

/// The incremental scanner. Keep one per polling loop.
#[derive(Debug)]
pub struct Scanner {
    matcher: Matcher,
    fold: Vec<bool>,
    options: ScanOptions,
    wrappers: FxHashSet<Vec<u8>>,
    known: FxHashMap<i32, Known>,
    /// The kernel's cursor read after the last listing: bounds the pids reused since.
    cursor: Option<Cursor>,
    /// The fork count read just before the last listing: every process forked up to then was
    /// listed. (The count read after the listing may include processes forked during it, in a
    /// part of `/proc` already listed.)
    forks_listed: Option<u64>,
    /// Number of listing scans so far.
    generation: u64,
    /// During the first listing: seconds since boot (`/proc/uptime`) when it began. No process
    /// is then "born since the previous scan", yet one forked just before may still `exec` an
    /// engine (caught between its fork and its exec, it shows its parent's argv): those started
    /// less than `young` before are watched as young ones are.
    cold_uptime: Option<f64>,
    /// During the first listing: the pid cursor when it began, so that only processes whose pids
    /// were handed out shortly before (or during) it have their `stat` read (see `near_cursor`).
    cold_cursor: Option<u64>,
    host: Host,
    stats: ScanStats,
    /// Whether this scan classified a process as an engine for the first time.
    engine_appeared: bool,
    /// Process events tell of every exec, so no process is watched for one (see `apply_events`).
    event_driven: bool,
    /// Event-driven: the parents of the engines classified since the last collect. Only the
    /// engines above them may have to fold a new one, so only their trees are re-read at once:
    /// with events, engines starting elsewhere on the host must not cost every engine a walk.
    appeared_parents: Vec<i32>,
    /// Events were applied since the last tick (`stats` then counts from the first of them).
    events_pending: bool,
    revisions: Revisions,
    buf: Vec<u8>,
    pids: Vec<(i32, u64)>,
}

impl Scanner {
    /// Compiles the signatures; engines with `fold_workers` get their descendants walked.
    pub fn new(signatures: &[Signature], options: ScanOptions) -> Result<Self, String> {
        let matcher = Matcher::new(signatures)?;
        let fold = signatures.iter().map(|s| s.fold_workers).collect();
        let stat = read_small(&options.proc_root.join("stat")).unwrap_or_default();
        let boot_time = proc_stat_value(&stat, b"btime").unwrap_or(0) as f64;
        let pid_max = read_small(&options.proc_root.join("sys/kernel/pid_max"))
            .and_then(|d| parse_u64(&d))
            .unwrap_or(4_194_304);
        Ok(Scanner {
            matcher,
            fold,
            wrappers: options.wrappers.iter().cloned().collect(),
            options,
            known: FxHashMap::default(),
            cursor: None,
            forks_listed: None,
            generation: 0,
            cold_uptime: None,
            cold_cursor: None,
            host: Host {
                boot_time,
                clock_ticks: clock_ticks(),
                pid_max,
            },
            stats: ScanStats::default(),
            engine_appeared: false,
            event_driven: false,
            appeared_parents: Vec::new(),
            events_pending: false,
            revisions: Revisions::default(),
            buf: Vec::with_capacity(4096),
            pids: Vec::new(),
        })
    }

    pub fn stats(&self) -> ScanStats {
        self.stats
    }

    /// The boot time (`btime`, epoch seconds) read when the scanner was made: every start time
    /// it reports is `start ticks / CLK_TCK + boot_time`, so start ticks can be had back exactly
    /// (the kernel's `btime` moves when the clock is stepped; the ticks never do).
    pub fn boot_time(&self) -> f64 {
        self.host.boot_time
    }

    /// Number of processes the scanner currently remembers (bounded by the live processes).
    pub fn known_len(&self) -> usize {
        self.known.len()
    }

    fn read_cursor(&self) -> Option<Cursor> {
        let root = &self.options.proc_root;
        let last_pid = parse_u64(&read_small(&root.join("sys/kernel/ns_last_pid"))?)?;
        let forks = proc_stat_value(&read_small(&root.join("stat"))?, b"processes")?;
        Some(Cursor { last_pid, forks })
    }

    fn list_pids(&mut self) {
        list_proc(&self.options.proc_root, &mut self.pids);
    }

    fn proc_path(&self, pid: i32, file: &str) -> PathBuf {
        use std::io::Write;
        // One allocation; std opens short paths through a stack buffer. Built from the root's
        // bytes, not its `display()`, which would replace non-UTF-8 bytes.
        let root = self.options.proc_root.as_os_str().as_encoded_bytes();
        let mut path = Vec::with_capacity(root.len() + 32);
        path.extend_from_slice(root);
        // Writing into a Vec cannot fail.
        let _ = write!(path, "/{pid}/{file}");
        // SAFETY: the root's own encoded bytes followed by ASCII, as from_encoded_bytes_unchecked
        // requires.
        PathBuf::from(unsafe { std::ffi::OsString::from_encoded_bytes_unchecked(path) })
    }

    /// A wrapper that is running a command (`sh -c ...`, `bash run.sh`, `env X=1 vllm ...`), as
    /// opposed to an interactive or login shell (`-bash`, `bash --login`), which is not watched.
    fn is_wrapper(&self, argv: &[&[u8]]) -> bool {
        let Some((argv0, rest)) = argv.split_first() else {
            return false;
        };
        !argv0.starts_with(b"-")
            && self.wrappers.contains(basename(argv0))
            && rest.iter().any(|a| *a == b"-c" || !a.starts_with(b"-"))
    }

    /// Reads a process's `cmdline` into `buf`. A failure is counted, and gives what the process
    /// is then: gone (`None`) or unreadable.
    fn read_cmdline(&mut self, pid: i32, buf: &mut Vec<u8>) -> Result<(), Option<Class>> {
        match read_into(&self.proc_path(pid, "cmdline"), buf) {
            Ok(()) => Ok(()),
            Err(ReadError::Gone) => {
                self.stats.vanished += 1;
                Err(None)
            }
            Err(ReadError::Denied) => {
                self.stats.unreadable += 1;
                Err(Some(Class::Unreadable))
            }
        }
    }

    /// Reads and classifies a process; `None` when it vanished.
    fn classify(&mut self, pid: i32, young: bool, now: Instant) -> Option<Class> {
        let mut buf = std::mem::take(&mut self.buf);
        let class = match self.read_cmdline(pid, &mut buf) {
            Ok(()) => self.classify_cmdline(pid, &buf, young, now),
            Err(class) => class,
        };
        self.buf = buf;
        class
    }

    fn classify_cmdline(
        &mut self,
        pid: i32,
        cmdline: &[u8],
        young: bool,
        now: Instant,
    ) -> Option<Class> {
        let (argv, cut) = capped_argv(cmdline);
        if let Some(parsed) = self.matcher.parse(&argv) {
            let facts = parsed.to_facts();
            let mut argv: Vec<Vec<u8>> = argv.iter().map(|a| a.to_vec()).collect();
            if cut {
                argv.push(ARGV_CUT.to_vec());
            }
            return self.engine_state(pid, cmdline.to_vec(), argv, facts);
        }
        // An empty cmdline is a kernel thread, a zombie, or a process caught inside execve (the
        // kernel publishes the new argv only after the exec is under way): watch it for a while.
        let watch = if self.event_driven && !argv.is_empty() {
            None
        } else if self.is_wrapper(&argv) {
            Some((cmdline.to_vec(), None))
        } else if young || argv.is_empty() || self.born_before_cold_scan(pid) {
            Some((cmdline.to_vec(), Some(now + self.options.young)))
        } else {
            None
        };
        Some(Class::Other { watch })
    }

    /// Whether the first listing is under way and the process started less than `young` before
    /// it (one more read, of `stat`, only then and only for processes that are not engines).
    fn born_before_cold_scan(&self, pid: i32) -> bool {
        let Some(uptime) = self.cold_uptime else {
            return false;
        };
        if let Some(last) = self.cold_cursor {
            if !near_cursor(pid as u64, last, self.host.pid_max) {
                return false;
            }
        }
        self.read_stat(pid).is_some_and(|stat| {
            uptime - stat.start_ticks as f64 / self.host.clock_ticks
                < self.options.young.as_secs_f64()
        })
    }

    fn read_stat(&self, pid: i32) -> Option<ProcStat> {
        parse_stat(&read_small(&self.proc_path(pid, "stat"))?)
    }

    /// A process whose argv says it is an engine: its record, built once here.
    fn engine_state(
        &mut self,
        pid: i32,
        cmdline: Vec<u8>,
        argv: Vec<Vec<u8>>,
        facts: Facts,
    ) -> Option<Class> {
        let Some(stat) = self.read_stat(pid) else {
            self.stats.vanished += 1;
            return None;
        };
        if is_dead(stat.state) {
            return Some(Class::Other { watch: None });
        }
        self.engine_appeared = true;
        if self.event_driven {
            self.appeared_parents.push(stat.ppid);
        }
        let exe = std::fs::read_link(self.proc_path(pid, "exe"));
        let exe_denied = exe
            .as_ref()
            .is_err_and(|e| e.kind() == ErrorKind::PermissionDenied);
        let record = EngineProc {
            pid,
            revision: self.revisions.next(),
            start_time: stat.start_ticks as f64 / self.host.clock_ticks + self.host.boot_time,
            ppid: stat.ppid,
            argv,
            facts,
            exe: exe.ok().map(|p| p.into_os_string().into_encoded_bytes()),
            descendants: Vec::new(),
            parent_argv: self.read_argv(stat.ppid),
            listen_ports: Vec::new(),
        };
        Some(Class::Engine(Box::new(EngineState {
            record: Arc::new(record),
            cmdline,
            stat,
            exe_denied,
            tree_denied: false,
            tree_read: None,
        })))
    }

    fn read_argv(&self, pid: i32) -> Vec<Vec<u8>> {
        read_small(&self.proc_path(pid, "cmdline"))
            .map(|data| {
                capped_argv(&data)
                    .0
                    .into_iter()
                    .map(<[u8]>::to_vec)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Re-checks a known engine: same start time, alive, and the same argv. `None` when it is
    /// gone. The argv is read again whole when a cheap look says it may have changed (see the
    /// module's cost model), and when the pid may have been handed out again, since a process
    /// started in the same clock tick as its predecessor has the same start time.
    fn recheck_engine(
        &mut self,
        pid: i32,
        mut state: Box<EngineState>,
        maybe_reused: bool,
        now: Instant,
    ) -> Option<Class> {
        let Some(stat) = self.read_stat(pid) else {
            self.stats.vanished += 1;
            return None;
        };
        if is_dead(stat.state) {
            return Some(Class::Other { watch: None });
        }
        if stat.start_ticks != state.stat.start_ticks {
            // Same pid, another process: classify it from scratch.
            self.stats.new += 1;
            return self.classify(pid, true, now);
        }
        let reread = maybe_reused
            || stat.comm != state.stat.comm
            || stat.args != state.stat.args
            || !ends_match(&self.proc_path(pid, "cmdline"), &state.cmdline);
        if reread {
            self.stats.reread += 1;
            let mut buf = std::mem::take(&mut self.buf);
            let replaced = match self.read_cmdline(pid, &mut buf) {
                Err(class) => Some(class),
                Ok(()) if buf != state.cmdline => {
                    if maybe_reused {
                        self.stats.new += 1;
                    }
                    Some(self.classify_cmdline(pid, &buf, true, now))
                }
                Ok(()) => None,
            };
            self.buf = buf;
            if let Some(class) = replaced {
                return class;
            }
        }
        if stat.ppid != state.stat.ppid {
            let parent_argv = self.read_argv(stat.ppid);
            let record = self.revisions.change(&mut state.record);
            record.ppid = stat.ppid;
            record.parent_argv = parent_argv;
        }
        state.stat = stat;
        Some(Class::Engine(state))
    }

    /// Scans the host. Never fails; see `stats()` for what was skipped.
    pub fn scan(&mut self) -> Vec<Arc<EngineProc>> {
        self.scan_at(Instant::now())
    }

    /// Turns event-driven mode on: from now on the caller reports every process change through
    /// [`Scanner::apply_events`], so processes are no longer watched for an exec. Processes
    /// watched so far stay watched until their window ends.
    pub fn set_event_driven(&mut self) {
        self.event_driven = true;
    }

    /// Back to polling (the events stopped): everything is forgotten, so the next scan is a cold
    /// one and processes are watched for an exec again.
    pub fn set_polling(&mut self) {
        self.event_driven = false;
        self.events_pending = false;
        self.known.clear();
        self.cursor = None;
        self.forks_listed = None;
        self.generation = 0;
    }

    /// Reads again the processes named by process events, in order: a process that exited is
    /// forgotten; one that forked, exec'd or renamed itself is classified from what `/proc` says
    /// now (a fork's argv is its parent's until it execs, and the exec is reported). Whether an
    /// engine appeared, changed or is gone, or one of its folded workers exited, so the caller
    /// knows a tick is worth running now.
    pub fn apply_events(&mut self, changes: &[(i32, Change)]) -> bool {
        self.apply_events_at(changes, Instant::now())
    }

    fn apply_events_at(&mut self, changes: &[(i32, Change)], now: Instant) -> bool {
        if !self.events_pending {
            self.stats = ScanStats::default();
            self.engine_appeared = false;
            self.events_pending = true;
        }
        let mut engines_changed = false;
        for &(pid, change) in changes {
            let previous = self.known.remove(&pid);
            let was_engine = previous
                .as_ref()
                .is_some_and(|k| matches!(k.class, Class::Engine(_)));
            if change == Change::Exited {
                // A folded worker's exit matters at once too (a server that lost its engine core).
                engines_changed |= was_engine || self.is_folded_worker(pid);
                self.stats.vanished += u64::from(previous.is_some());
                continue;
            }
            // A fork gives the pid a new /proc/PID (and inode); an exec or rename keeps it.
            let inode = match (&previous, change) {
                (Some(known), Change::Exec | Change::Comm) => Some(known.inode),
                _ => proc_inode(&self.proc_path(pid, "")),
            };
            let class = match previous {
                Some(known) => {
                    self.stats.reread += 1;
                    self.revisit(pid, known.class, true, change == Change::Forked, now)
                }
                None => {
                    self.stats.new += 1;
                    self.classify(pid, false, now)
                }
            };
            let (Some(class), Some(inode)) = (class, inode) else {
                engines_changed |= was_engine;
                continue;
            };
            let is_engine = matches!(class, Class::Engine(_));
            engines_changed |= was_engine || is_engine;
            self.remember(pid, inode, class);
        }
        engines_changed
    }

    /// Whether `pid` is among the folded workers of an engine known now.
    fn is_folded_worker(&self, pid: i32) -> bool {
        self.known.values().any(|known| match &known.class {
            Class::Engine(state) => state.record.descendants.contains(&pid),
            _ => false,
        })
    }

    /// The engines after the events applied since the last call: with `recheck`, a scan without
    /// listing (engines re-checked, watched processes read); without, the engines as the events
    /// left them (what a wake-up for an engine's start or exit needs). Trees are refreshed on
    /// schedule either way. `stats` counts the events' reads too.
    pub fn scan_after_events(&mut self, recheck: bool) -> Vec<Arc<EngineProc>> {
        let now = Instant::now();
        if !self.events_pending {
            self.stats = ScanStats::default();
            self.engine_appeared = false;
        }
        self.events_pending = false;
        if recheck {
            self.quiet_scan(now);
        }
        self.collect(now, true)
    }

    /// `scan` at a given time, so tests can step through the young and refresh windows.
    fn scan_at(&mut self, now: Instant) -> Vec<Arc<EngineProc>> {
        let first = self.generation == 0;
        self.stats = ScanStats::default();
        self.engine_appeared = false;
        self.events_pending = false;
        // No fork anywhere since the last listing began: no process can have appeared and no pid
        // can have been reused, so the listing is skipped and only engines and watched processes
        // are read.
        let before = self.read_cursor();
        if let (Some(listed), Some(current)) = (self.forks_listed, before) {
            if current.forks == listed {
                self.quiet_scan(now);
                return self.collect(now, true);
            }
        }
        self.forks_listed = before.map(|c| c.forks);
        self.generation += 1;
        if first {
            self.cold_uptime =
                read_small(&self.options.proc_root.join("uptime")).and_then(|d| parse_uptime(&d));
            self.cold_cursor = before.map(|c| c.last_pid);
        }
        self.list_pids();
        // Read after listing, so any pid reused before the listing falls inside the window.
        let cursor = self.read_cursor();
        let reuse = match (self.cursor, cursor) {
            (_, None) | (None, _) => Reuse::Everything,
            (Some(old), Some(new)) if new.forks == old.forks => Reuse::Nothing,
            (Some(old), Some(new))
                if new.forks.saturating_sub(old.forks) >= self.host.pid_max.saturating_sub(301) =>
            {
                Reuse::Everything
            }
            (Some(old), Some(new)) => Reuse::Interval {
                after: old.last_pid,
                upto: new.last_pid,
            },
        };
        self.stats.full_recheck = !first && matches!(reuse, Reuse::Everything);
        let pids = std::mem::take(&mut self.pids);
        self.stats.scanned = pids.len() as u64;
        self.known
            .reserve(pids.len().saturating_sub(self.known.len()));
        let generation = self.generation;
        for &(pid, inode) in &pids {
            if let Some(known) = self.known.get_mut(&pid) {
                // A changed /proc/PID inode means another process; the cursor's window only says
                // the pid may have been handed out again. Only the former restarts the young
                // watch: a sweep of the cursor over thousands of long-lived pids must cost one
                // reread each, not a reread on every scan for the next few seconds.
                let born_again = known.inode != inode;
                let maybe_reused = born_again || reuse.may_reuse(pid);
                // The common case on every poll: a settled process, trusted without any read.
                if !maybe_reused && matches!(known.class, Class::Other { watch: None }) {
                    known.generation = generation;
                    continue;
                }
                let previous = std::mem::replace(&mut known.class, Class::Unreadable);
                match self.revisit(pid, previous, maybe_reused, born_again, now) {
                    Some(class) => {
                        self.remember(pid, inode, class);
                    }
                    None => {
                        self.known.remove(&pid);
                    }
                }
            } else {
                self.stats.new += 1;
                if let Some(class) = self.classify(pid, !first, now) {
                    self.remember(pid, inode, class);
                }
            }
        }
        self.pids = pids;
        self.cold_uptime = None;
        self.cold_cursor = None;
        let before = self.known.len();
        self.known.retain(|_, known| known.generation == generation);
        self.stats.vanished += (before - self.known.len()) as u64;
        self.known.shrink_to(self.known.len() * 2);
        self.cursor = cursor;
        self.collect(now, false)
    }

    /// A scan without listing (see `scan`): processes that vanished are dropped when next read;
    /// the others, which nothing can have replaced, stay as they are, and those whose argv could
    /// not be read are counted as in a listing scan.
    fn quiet_scan(&mut self, now: Instant) {
        self.stats.scanned = self.known.len() as u64;
        let mut watched = Vec::new();
        for (&pid, known) in &self.known {
            match known.class {
                Class::Other { watch: None } => {}
                Class::Unreadable => self.stats.unreadable += 1,
                _ => watched.push(pid),
            }
        }
        for pid in watched {
            let Some(known) = self.known.get_mut(&pid) else {
                continue;
            };
            let previous = std::mem::replace(&mut known.class, Class::Unreadable);
            match self.revisit(pid, previous, false, false, now) {
                Some(class) => {
                    if let Some(known) = self.known.get_mut(&pid) {
                        known.class = class;
                    }
                }
                None => {
                    self.known.remove(&pid);
                }
            }
        }
    }

    fn remember(&mut self, pid: i32, inode: u64, class: Class) {
        let generation = self.generation;
        self.known.insert(
            pid,
            Known {
                generation,
                inode,
                class,
            },
        );
    }

    fn revisit(
        &mut self,
        pid: i32,
        class: Class,
        maybe_reused: bool,
        born_again: bool,
        now: Instant,
    ) -> Option<Class> {
        match class {
            Class::Engine(state) => self.recheck_engine(pid, state, maybe_reused, now),
            _ if maybe_reused => {
                self.stats.reread += 1;
                self.classify(pid, born_again, now)
            }
            Class::Other {
                watch: Some((cmdline, until)),
            } => {
                if until.is_some_and(|t| now >= t) {
                    return Some(Class::Other { watch: None });
                }
                self.stats.reread += 1;
                let mut buf = std::mem::take(&mut self.buf);
                let class = match self.read_cmdline(pid, &mut buf) {
                    Err(class) => class,
                    Ok(()) if buf == cmdline => Some(Class::Other {
                        watch: Some((cmdline, until)),
                    }),
                    // It exec'd: classify the new program, watching it for the rest of its window.
                    Ok(()) => {
                        self.classify_cmdline(pid, &buf, until.is_some(), now)
                            .map(|c| match c {
                                Class::Other {
                                    watch: Some((data, Some(_))),
                                } => Class::Other {
                                    watch: Some((data, until)),
                                },
                                other => other,
                            })
                    }
                };
                self.buf = buf;
                class
            }
            Class::Unreadable => {
                self.stats.unreadable += 1;
                Some(Class::Unreadable)
            }
            other => Some(other),
        }
    }

    /// An engine's process tree and its sockets, read now (`tables`: see [`listen_ports`]).
    fn read_tree(&self, pid: i32, engine: usize, tables: &mut Tables) -> Tree {
        let root = &self.options.proc_root;
        let descendants = if self.fold.get(engine).copied().unwrap_or(false) {
            descendants(root, pid)
        } else {
            Vec::new()
        };
        let (listen_ports, denied) = if self.options.listen_ports {
            listen_ports(root, pid, &descendants, tables)
        } else {
            (Vec::new(), false)
        };
        Tree {
            descendants,
            listen_ports,
            denied,
        }
    }

    /// The known engines among `pids` and their ancestors (followed through `stat`, a few reads
    /// each).
    fn engines_above(&self, pids: &[i32]) -> FxHashSet<i32> {
        let mut found = FxHashSet::default();
        for &start in pids {
            let mut pid = start;
            // pid 1's parent is 0; a cycle cannot happen, but a bound costs nothing.
            for _ in 0..64 {
                if pid <= 1 {
                    break;
                }
                if let Some(Known {
                    class: Class::Engine(_),
                    ..
                }) = self.known.get(&pid)
                {
                    found.insert(pid);
                }
                let Some(stat) = self.read_stat(pid) else {
                    break;
                };
                pid = stat.ppid;
            }
        }
        found
    }

    /// The engines' records, their trees brought up to date. `quiet`: no listing ran, so
    /// workers are checked to still exist.
    fn collect(&mut self, now: Instant, quiet: bool) -> Vec<Arc<EngineProc>> {
        let parents = std::mem::take(&mut self.appeared_parents);
        let folding = self.engines_above(&parents);
        let engines: Vec<i32> = self
            .known
            .iter()
            .filter(|(_, k)| matches!(k.class, Class::Engine(_)))
            .map(|(&pid, _)| pid)
            .collect();
        let mut out = Vec::with_capacity(engines.len());
        let mut tables = Tables::default();
        for pid in engines {
            let Some(Known {
                class: Class::Engine(state),
                ..
            }) = self.known.get(&pid)
            else {
                continue;
            };
            // The process tree and its sockets are re-read when a new engine appeared (a forked
            // child keeping the server's argv must be folded at once) and otherwise at most once
            // per `refresh`: walking every thread's children and every fd on each poll is the
            // most expensive thing a scan could do.
            let appeared = if self.event_driven {
                folding.contains(&pid)
            } else {
                self.engine_appeared
            };
            let stale = appeared
                || state
                    .tree_read
                    .is_none_or(|t| now.duration_since(t) >= self.options.refresh);
            let update = if stale {
                TreeUpdate::Read(self.read_tree(pid, state.record.facts.engine, &mut tables))
            } else {
                // Between refreshes, workers that exited are dropped at once.
                let root = &self.options.proc_root;
                let alive: Vec<i32> = state
                    .record
                    .descendants
                    .iter()
                    .copied()
                    .filter(|d| self.known.contains_key(d))
                    .filter(|d| !quiet || root.join(d.to_string()).exists())
                    .collect();
                if alive.len() == state.record.descendants.len() {
                    TreeUpdate::Keep
                } else {
                    TreeUpdate::Workers(alive)
                }
            };
            let Some(Known {
                class: Class::Engine(state),
                ..
            }) = self.known.get_mut(&pid)
            else {
                continue;
            };
            match update {
                TreeUpdate::Keep => {}
                TreeUpdate::Workers(alive) => {
                    self.revisions.change(&mut state.record).descendants = alive;
                }
                TreeUpdate::Read(tree) => {
                    state.tree_read = Some(now);
                    state.tree_denied = tree.denied;
                    if tree.descendants != state.record.descendants
                        || tree.listen_ports != state.record.listen_ports
                    {
                        let record = self.revisions.change(&mut state.record);
                        record.descendants = tree.descendants;
                        record.listen_ports = tree.listen_ports;
                    }
                }
            }
            if state.exe_denied || state.tree_denied {
                self.stats.restricted += 1;
            }
            out.push(Arc::clone(&state.record));
        }
        out.sort_by_key(|p| p.pid);
        out
    }
}

/// The inode of `/proc/PID` (as the listing gives it), `None` when the process is gone.
#[cfg(unix)]
fn proc_inode(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| m.ino())
}

/// Without inodes (Windows, where this scanner only builds): whether the entry exists.
#[cfg(not(unix))]
fn proc_inode(path: &Path) -> Option<u64> {
    std::fs::metadata(path).ok().map(|_| 0)
}

/// An engine's process tree as read at one refresh.
struct Tree {
    descendants: Vec<i32>,
    listen_ports: Vec<u16>,
    /// Some fd, socket or socket table could not be read (another user's process).
    denied: bool,
}

/// What a scan does to an engine's tree.
enum TreeUpdate {
    Keep,
    /// Between refreshes: the workers still alive.
    Workers(Vec<i32>),
    Read(Tree),
}

/// Lists the numeric entries of procfs as (pid, inode of `/proc/PID`). Portable version for
/// systems whose procfs is not Linux's (the native backend uses `scan_sysinfo` there; without
/// inodes, on Windows, a reused pid is told by the cursor alone).
#[cfg(not(target_os = "linux"))]
pub fn list_proc(proc_root: &Path, out: &mut Vec<(i32, u64)>) {
    #[cfg(unix)]
    use std::os::unix::fs::DirEntryExt;
    #[cfg(not(unix))]
    let inode = |_: &std::fs::DirEntry| 0;
    #[cfg(unix)]
    let inode = |entry: &std::fs::DirEntry| entry.ino();

    out.clear();
    let Ok(entries) = std::fs::read_dir(proc_root) else {
        return;
    };
    for entry in entries.flatten() {
        if let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) {
            out.push((pid, inode(&entry)));
        }
    }
}

/// Lists the numeric entries of procfs as (pid, inode of `/proc/PID`), with raw `getdents64`
/// calls into one buffer: no allocation per entry. Leaves `out` empty if procfs cannot be read.
#[cfg(target_os = "linux")]
pub fn list_proc(proc_root: &Path, out: &mut Vec<(i32, u64)>) {
    use std::os::fd::AsRawFd;

    out.clear();
    let Ok(dir) = File::open(proc_root) else {
        return;
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: the fd is open for the whole loop and `buf` is writable for `buf.len()` bytes.
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

/// Every live descendant of `pid`, from `/proc/PID/task/TID/children`. Those lists include
/// zombies (exited, not yet reaped), which serve nothing and have no children left: each child's
/// `stat` is read to leave them out.
pub fn descendants(proc_root: &Path, pid: i32) -> Vec<i32> {
    let mut seen: FxHashSet<i32> = FxHashSet::default();
    let mut queue = vec![pid];
    while let Some(parent) = queue.pop() {
        let Ok(tasks) = std::fs::read_dir(proc_root.join(parent.to_string()).join("task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let Some(children) = read_small(&task.path().join("children")) else {
                continue;
            };
            for child in parse_children(&children) {
                if child != pid && !seen.contains(&child) && is_alive(proc_root, child) {
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
fn is_alive(proc_root: &Path, pid: i32) -> bool {
    read_small(&proc_root.join(pid.to_string()).join("stat"))
        .and_then(|data| parse_stat(&data))
        .is_some_and(|stat| !is_dead(stat.state))
}

/// The (inode, port) LISTEN sockets of each network namespace (by its inode) read so far in one
/// scan: a socket table can take 10 ms to read, and 1,024 engines of one namespace need it once.
pub type Tables = FxHashMap<u64, Vec<(u64, u16)>>;

/// The inode of `pid`'s network namespace, `None` when it cannot be told (a fixture root).
fn netns_of(proc_root: &Path, pid: i32) -> Option<u64> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(proc_root.join(pid.to_string()).join("ns/net"))
            .ok()
            .map(|m| m.ino())
    }
    #[cfg(not(unix))]
    {
        let _ = (proc_root, pid);
        None
    }
}

/// TCP ports in LISTEN state whose sockets are held by `pid` or `others`, sorted; and whether
/// some fd directory, fd link or socket table could not be read for lack of permission (the
/// ports found are then only those that could be seen). `tables` keeps each namespace's table
/// for the rest of the scan.
pub fn listen_ports(
    proc_root: &Path,
    pid: i32,
    others: &[i32],
    tables: &mut Tables,
) -> (Vec<u16>, bool) {
    let denied = |err: &std::io::Error| err.kind() == ErrorKind::PermissionDenied;
    let mut any_denied = false;
    let mut inodes: FxHashSet<u64> = FxHashSet::default();
    for p in std::iter::once(pid).chain(others.iter().copied()) {
        let fds = match std::fs::read_dir(proc_root.join(p.to_string()).join("fd")) {
            Ok(fds) => fds,
            Err(err) => {
                any_denied |= denied(&err);
                continue;
            }
        };
        for fd in fds.flatten() {
            match std::fs::read_link(fd.path()) {
                Ok(target) => {
                    inodes.extend(parse_socket_link(target.as_os_str().as_encoded_bytes()));
                }
                Err(err) => any_denied |= denied(&err),
            }
        }
    }
    let mut ports: Vec<u16> = Vec::new();
    if inodes.is_empty() {
        return (ports, any_denied);
    }
    let netns = netns_of(proc_root, pid);
    let cached = netns.and_then(|ns| tables.get(&ns));
    let read;
    let listening: &[(u64, u16)] = if let Some(found) = cached {
        found
    } else {
        let mut found = Vec::new();
        let mut data = Vec::new();
        let mut denied_here = false;
        for table in ["net/tcp", "net/tcp6"] {
            match read_into(&proc_root.join(pid.to_string()).join(table), &mut data) {
                Ok(()) => found.extend(parse_tcp_listen(&data)),
                Err(ReadError::Denied) => denied_here = true,
                Err(ReadError::Gone) => {}
            }
        }
        any_denied |= denied_here;
        match netns {
            Some(ns) if !denied_here => tables.entry(ns).or_insert(found),
            _ => {
                read = found;
                &read
            }
        }
    };
    ports.extend(
        listening
            .iter()
            .filter(|(inode, _)| inodes.contains(inode))
            .map(|&(_, port)| port),
    );
    ports.sort_unstable();
    ports.dedup();
    (ports, any_denied)
}

// Fixture /proc trees are made of Unix symlinks (fds, exe).
#[cfg(all(test, unix))]
pub(crate) mod fixture;
#[cfg(all(test, unix))]
mod tests;
