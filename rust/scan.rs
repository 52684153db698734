//! Incremental scanner of `/proc` (Linux): finds every engine server on the host.
//!
//! Cost model. A cold scan lists `/proc` and reads each process's `cmdline` once, and the `stat`
//! of the newest (for their start time: see below, and `SETTLED_RUN`); only engine
//! processes get more reads (`stat`, `exe`, children, sockets). Later scans trust
//! processes already classified without any per-pid read, except:
//! - pids the kernel may have handed out again since the last scan: those whose `/proc/PID`
//!   inode (free with the listing) changed, and those the pid allocation cursor
//!   (`/proc/sys/kernel/ns_last_pid`) and the fork counter (`processes` in `/proc/stat`) place in
//!   the cyclic interval (last cursor, cursor]; those are classified again;
//! - engines, whose `stat` is re-read to confirm their identity (pid, start time) and liveness,
//!   and whose argv is checked for a rewrite in place (setproctitle) at a cost bounded whatever its
//!   size: `comm` and argv's address range from that `stat`, and the first and last
//!   [`CMDLINE_PEEK`](crate::procread::CMDLINE_PEEK) bytes of `cmdline`; it is re-read whole and parsed again only when one differs;
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

use std::io::ErrorKind;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::{FxHashMap, FxHashSet};

use crate::matcher::{basename, program_path, CompiledSignatures, Facts};
use crate::proc_events::Change;
use crate::procfs::{capped_argv, environ_entries, parse_u64, proc_stat_value, ProcStat, ARGV_CUT};
use crate::procread::{ProcRoot, ProcessDevices, ReadError, Tables, TreeReads};
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
    /// What else is read of each engine process.
    pub read_set: ReadSet,
}

/// What a scan reads of each engine process beyond its identity, argv, `exe`, tree and sockets,
/// declared by the caller as sysinfo's `ProcessRefreshKind` declares a refresh: read once per
/// record, for engine processes only, by the same reading layer as everything else.
#[derive(Debug, Clone, Default)]
pub struct ReadSet {
    /// Per engine (by its signature's index), the environment variables whose values are kept;
    /// `environ` is read only for an engine that names some.
    pub environ: Vec<Vec<Vec<u8>>>,
    /// Read the process's `cgroup` (which container it runs in).
    pub cgroup: bool,
    /// Read which network namespace the process is in.
    pub netns: bool,
    /// Per engine, the programs that are that engine only inside its checkout (TabbyAPI's
    /// `main.py`), by name, with the files that must lie next to them (`LaunchForm.
    /// checkout_files`): whether they do is looked at as the process's owner, inside its root.
    pub checkouts: Vec<FxHashMap<Vec<u8>, Vec<Vec<u8>>>>,
    /// List the character devices the process tree holds open (a GPU driver's nodes), from the
    /// same listing of `fd/` its sockets come from, at each tree refresh: a process opens its
    /// devices after it starts, so this one is not read once per record.
    pub devices: bool,
}

/// Longest program directory a checkout is looked for in (a path, as argv gives it).
pub const MAX_CHECKOUT_DIRECTORY: usize = 4096;

impl ReadSet {
    /// The files of the checkout `argv`'s program must be in, as the process names them (from
    /// its working directory when argv names the program without a directory), when its
    /// engine's read set names that program; `Some(None)` for a directory never looked into (one
    /// with a `..` component, or longer than a path). The facade's `_host.shapes.checkout_paths`.
    pub fn checkout_paths(&self, engine: usize, argv: &[Vec<u8>]) -> Option<Option<Vec<Vec<u8>>>> {
        // Most engines name no such program: their argv is not looked at.
        let programs = self.checkouts.get(engine).filter(|p| !p.is_empty())?;
        let program = program_path(argv);
        let files = programs.get(basename(program))?;
        let cut = program
            .iter()
            .rposition(|&b| b == b'/' || b == b'\\')
            .map_or(0, |at| at + 1);
        let directory = &program[..cut];
        let climbs = directory
            .split(|&b| b == b'/' || b == b'\\')
            .any(|part| part == b"..");
        if directory.len() > MAX_CHECKOUT_DIRECTORY || climbs {
            return Some(None);
        }
        Some(Some(
            files
                .iter()
                .map(|name| [directory, name].concat())
                .collect(),
        ))
    }
}

/// At most this much of a process's environment is read (Linux caps argv and environment together
/// at 6 MiB); the facade's `settings.MAX_ENVIRON_BYTES`.
pub const MAX_ENVIRON_BYTES: usize = 1 << 20;
/// At most this much of a process's `cgroup` is read (a path per hierarchy, a few hundred bytes).
pub const MAX_CGROUP_BYTES: usize = 1 << 16;

/// The variables of a process's environment its read set names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environ {
    /// `(name, value)` in the environment's order, a repeated name as often as it is there.
    pub vars: Vec<(Vec<u8>, Vec<u8>)>,
    /// The environment goes on beyond [`MAX_ENVIRON_BYTES`]: only that much was read.
    pub cut: bool,
}

impl Default for ScanOptions {
    fn default() -> Self {
        ScanOptions {
            wrappers: Vec::new(),
            young: Duration::from_secs(5),
            listen_ports: true,
            refresh: Duration::from_secs(2),
            proc_root: PathBuf::from("/proc"),
            read_set: ReadSet::default(),
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
    /// The variables its read set names; `None`: not asked, or the environment is not readable
    /// (another user's process, for a scanner that is not root).
    pub environ: Option<Environ>,
    /// Its `cgroup` (at most [`MAX_CGROUP_BYTES`]); `None`: not asked, or not readable.
    pub cgroup: Option<Vec<u8>>,
    /// The inode of its network namespace; `None`: not asked, or not readable.
    pub netns: Option<u64>,
    /// Whether it runs inside its engine's checkout; `None`: its program needs none.
    pub in_checkout: Option<bool>,
    /// The character devices its tree (itself, then its descendants) holds, per pid whose fds
    /// could be listed at the last tree refresh; `None`: not asked, or no fds are listed by this
    /// source (sysinfo).
    pub devices: Option<Vec<ProcessDevices>>,
}

#[cfg(target_os = "linux")]
fn all_regular_files(proc: &ProcRoot, pid: i32, paths: &[Vec<u8>]) -> bool {
    crate::namedfiles::first_missing(proc, pid, paths) == Ok(None)
}

/// Without Linux's per-thread credentials nothing is looked at as another user.
#[cfg(not(target_os = "linux"))]
fn all_regular_files(_proc: &ProcRoot, _pid: i32, _paths: &[Vec<u8>]) -> bool {
    false
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

/// A first scan walks those pids newest first and stops at this many processes in a row that
/// started before the young window: pids are handed out in increasing order, so the processes
/// beyond are older still, unless the cursor wrapped around `pid_max` and skipped a run of this
/// many long-lived processes within the window (a process born below them is then not watched,
/// as one born more than `RECENT_PIDS` pids back is not). On a settled host a cold scan reads this
/// many `stat`s, not one per process near the cursor.
const SETTLED_RUN: usize = 64;

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

/// Which processes of the first listing started less than `young` before it.
#[derive(Debug)]
enum ColdBirths {
    /// Those of the processes near the pid cursor (see `Scanner::recent_births`).
    Found(FxHashSet<i32>),
    /// The cursor could not be read: each process's `stat` is read to tell.
    Unbounded,
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
    compiled: Arc<CompiledSignatures>,
    options: ScanOptions,
    /// Every file is read through it, under `options.proc_root`.
    proc: ProcRoot,
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
    /// During the first listing: the processes it found started less than `young` before it began
    /// (see `recent_births`).
    cold_births: Option<ColdBirths>,
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
        Ok(Self::compiled(
            CompiledSignatures::new(signatures)?,
            options,
        ))
    }

    /// A scanner of signatures already compiled.
    pub fn compiled(compiled: Arc<CompiledSignatures>, options: ScanOptions) -> Self {
        let proc = ProcRoot::new(options.proc_root.clone());
        let stat = proc.host_file("stat").unwrap_or_default();
        let boot_time = proc_stat_value(&stat, b"btime").unwrap_or(0) as f64;
        let pid_max = proc
            .host_file("sys/kernel/pid_max")
            .and_then(|d| parse_u64(&d))
            .unwrap_or(4_194_304);
        Scanner {
            compiled,
            wrappers: options.wrappers.iter().cloned().collect(),
            options,
            proc,
            known: FxHashMap::default(),
            cursor: None,
            forks_listed: None,
            generation: 0,
            cold_uptime: None,
            cold_births: None,
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
        }
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
        let last_pid = parse_u64(&self.proc.host_file("sys/kernel/ns_last_pid")?)?;
        let forks = proc_stat_value(&self.proc.host_file("stat")?, b"processes")?;
        Some(Cursor { last_pid, forks })
    }

    fn list_pids(&mut self) {
        self.proc.list(&mut self.pids);
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
        match self.proc.read_into(pid, "cmdline", buf) {
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
        if let Some(parsed) = self.compiled.matcher.parse(&argv) {
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
        match &self.cold_births {
            Some(ColdBirths::Found(births)) => births.contains(&pid),
            Some(ColdBirths::Unbounded) => self
                .proc
                .stat(pid)
                .is_some_and(|s| self.born_after(&s, uptime)),
            None => false,
        }
    }

    /// Whether the process started less than `young` before `uptime` (seconds since boot).
    fn born_after(&self, stat: &ProcStat, uptime: f64) -> bool {
        uptime - stat.start_ticks as f64 / self.host.clock_ticks < self.options.young.as_secs_f64()
    }

    /// The processes among `pids` that started less than `young` before `uptime`, found by
    /// reading the `stat` of those near the pid cursor (see `near_cursor`: `before` is the cursor
    /// when the listing began), newest first (counting back from `after`, the cursor when it
    /// ended), until [`SETTLED_RUN`] in a row started earlier.
    fn recent_births(
        &self,
        pids: &[(i32, u64)],
        before: u64,
        after: u64,
        uptime: f64,
    ) -> FxHashSet<i32> {
        let span = self.host.pid_max.max(1);
        let mut near: Vec<(u64, i32)> = pids
            .iter()
            .map(|&(pid, _)| (u64::try_from(pid).unwrap_or(0), pid))
            .filter(|&(n, _)| near_cursor(n, before, span) || near_cursor(n, after, span))
            .map(|(n, pid)| ((after + span - n % span) % span, pid))
            .collect();
        near.sort_unstable();
        let mut births = FxHashSet::default();
        let mut settled = 0;
        for (_, pid) in near {
            let Some(stat) = self.proc.stat(pid) else {
                continue;
            };
            if self.born_after(&stat, uptime) {
                births.insert(pid);
                settled = 0;
            } else {
                settled += 1;
                if settled == SETTLED_RUN {
                    break;
                }
            }
        }
        births
    }

    /// A process whose argv says it is an engine: its record, built once here.
    fn engine_state(
        &mut self,
        pid: i32,
        cmdline: Vec<u8>,
        argv: Vec<Vec<u8>>,
        facts: Facts,
    ) -> Option<Class> {
        let Some(stat) = self.proc.stat(pid) else {
            self.stats.vanished += 1;
            return None;
        };
        if stat.is_dead() {
            return Some(Class::Other { watch: None });
        }
        self.engine_appeared = true;
        if self.event_driven {
            self.appeared_parents.push(stat.ppid);
        }
        let facts_engine = facts.engine;
        let exe = self.proc.exe(pid);
        let exe_denied = exe
            .as_ref()
            .is_err_and(|e| e.kind() == ErrorKind::PermissionDenied);
        let in_checkout = self.in_checkout(pid, facts_engine, &argv);
        let record = EngineProc {
            pid,
            revision: self.revisions.next(),
            start_time: stat.start_ticks as f64 / self.host.clock_ticks + self.host.boot_time,
            ppid: stat.ppid,
            argv,
            facts,
            exe: exe.ok().map(|p| p.into_os_string().into_encoded_bytes()),
            descendants: Vec::new(),
            parent_argv: self.proc.argv(stat.ppid),
            listen_ports: Vec::new(),
            environ: self.environ(pid, facts_engine),
            cgroup: self.cgroup(pid),
            netns: self
                .options
                .read_set
                .netns
                .then(|| self.proc.netns(pid))
                .flatten(),
            in_checkout,
            devices: None,
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

    /// The variables of `pid`'s environment that its engine's read set names.
    fn environ(&self, pid: i32, engine: usize) -> Option<Environ> {
        let names = self.options.read_set.environ.get(engine)?;
        if names.is_empty() {
            return None;
        }
        let mut buf = Vec::new();
        let cut = self
            .proc
            .read_capped(pid, "environ", MAX_ENVIRON_BYTES, &mut buf)
            .ok()?;
        let vars = environ_entries(&buf, cut, names)
            .into_iter()
            .map(|(name, value)| (name.to_vec(), value.to_vec()))
            .collect();
        Some(Environ { vars, cut })
    }

    /// Whether `pid` runs inside the checkout its program needs (see [`crate::namedfiles`]); one
    /// whose files cannot be looked at (another user's, for a scan that is not root) does not:
    /// the program's name alone says nothing.
    fn in_checkout(&self, pid: i32, engine: usize, argv: &[Vec<u8>]) -> Option<bool> {
        let paths = self.options.read_set.checkout_paths(engine, argv)?;
        Some(paths.is_some_and(|paths| all_regular_files(&self.proc, pid, &paths)))
    }

    /// `pid`'s `cgroup`, when the read set asks for it.
    fn cgroup(&self, pid: i32) -> Option<Vec<u8>> {
        if !self.options.read_set.cgroup {
            return None;
        }
        let mut buf = Vec::new();
        self.proc
            .read_capped(pid, "cgroup", MAX_CGROUP_BYTES, &mut buf)
            .ok()?;
        Some(buf)
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
        let Some(stat) = self.proc.stat(pid) else {
            self.stats.vanished += 1;
            return None;
        };
        if stat.is_dead() {
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
            || !self.proc.cmdline_holds(pid, &state.cmdline);
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
            let parent_argv = self.proc.argv(stat.ppid);
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
                _ => self.proc.inode(pid),
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

    /// `scan` at a given time, so a fixture host's scenario (these tests, and the Python ones
    /// through `ProcessScanner::scan_at`) can step through the young and refresh windows.
    pub fn scan_at(&mut self, now: Instant) -> Vec<Arc<EngineProc>> {
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
            self.cold_uptime = self.proc.host_file("uptime").and_then(|d| parse_uptime(&d));
        }
        self.list_pids();
        // Read after listing, so any pid reused before the listing falls inside the window.
        let cursor = self.read_cursor();
        if let (true, Some(uptime)) = (first, self.cold_uptime) {
            self.cold_births = Some(match (before, cursor) {
                (Some(before), Some(after)) => ColdBirths::Found(self.recent_births(
                    &self.pids,
                    before.last_pid,
                    after.last_pid,
                    uptime,
                )),
                _ => ColdBirths::Unbounded,
            });
        }
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
        self.cold_births = None;
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

    /// An engine's process tree and what its fds hold, read now (`tables`: see
    /// [`ProcRoot::tree_files`]).
    fn read_tree(&self, pid: i32, engine: usize, tables: &mut Tables) -> Tree {
        let descendants = if self.compiled.fold.get(engine).copied().unwrap_or(false) {
            self.proc.descendants(pid)
        } else {
            Vec::new()
        };
        let wanted = TreeReads {
            ports: self.options.listen_ports,
            devices: self.options.read_set.devices,
        };
        let files = self.proc.tree_files(pid, &descendants, wanted, tables);
        Tree {
            descendants,
            listen_ports: files.listen_ports,
            devices: wanted.devices.then_some(files.devices),
            denied: files.denied,
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
                let Some(stat) = self.proc.stat(pid) else {
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
                let alive: Vec<i32> = state
                    .record
                    .descendants
                    .iter()
                    .copied()
                    .filter(|d| self.known.contains_key(d))
                    .filter(|&d| !quiet || self.proc.exists(d))
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
                    let record = self.revisions.change(&mut state.record);
                    if let Some(devices) = &mut record.devices {
                        // The engine itself, then the workers still alive.
                        devices.retain(|(p, _)| *p == pid || alive.contains(p));
                    }
                    record.descendants = alive;
                }
                TreeUpdate::Read(tree) => {
                    state.tree_read = Some(now);
                    state.tree_denied = tree.denied;
                    if tree.descendants != state.record.descendants
                        || tree.listen_ports != state.record.listen_ports
                        || tree.devices != state.record.devices
                    {
                        let record = self.revisions.change(&mut state.record);
                        record.descendants = tree.descendants;
                        record.listen_ports = tree.listen_ports;
                        record.devices = tree.devices;
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

/// An engine's process tree as read at one refresh.
struct Tree {
    descendants: Vec<i32>,
    listen_ports: Vec<u16>,
    devices: Option<Vec<ProcessDevices>>,
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

// Fixture /proc trees are made of Unix symlinks (fds, exe).
#[cfg(all(test, unix))]
pub(crate) mod fixture;
#[cfg(all(test, unix))]
mod tests;
