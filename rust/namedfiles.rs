//! Files a process names (the files of its checkout), looked at as that process's owner would
//! and resolved inside that process's root: the Rust side of the facade's `_host.procfiles`, with
//! the same rules, because any user on the host can name any path (a FIFO, `/dev/tty`, a symlink
//! out of a container into the host, `/proc/self/...`, a directory on a FUSE mount that never
//! answers):
//!
//! - a path is resolved inside the process's root: `openat2(RESOLVE_IN_ROOT |
//!   RESOLVE_NO_MAGICLINKS)` from an fd of `/proc/PID/root` (a relative path from its working
//!   directory, as seen inside that root); where the kernel has no `openat2` (before 5.6, or a
//!   seccomp filter), a walk of the path one component at a time with `O_NOFOLLOW` that resolves
//!   symlinks itself, inside the root, and follows none that lives on `/proc`;
//! - with the owner's permissions: the resolving thread takes the process's filesystem uid, gid
//!   and supplementary groups (`setfsuid`/`setfsgid` and the raw `setgroups` syscall change only
//!   the calling thread's credentials, and a non-root fsuid drops its DAC capabilities), so the
//!   kernel itself checks search permission on every directory as it would for the owner;
//! - nothing is opened but `O_PATH` (no FIFO blocks, no device is opened);
//! - every step runs in a worker thread under a deadline ([`STEP`]); a step that misses it is
//!   abandoned (its worker retires when the kernel lets it go), and after [`MAX_STUCK`] abandoned
//!   steps none is begun until one of them ends.
//!
//! The procfs files (`status`, the `root` and `cwd` links) are read through [`ProcRoot`].

use std::any::Any;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender, TryRecvError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::procfs::{parse_owner, Owner};
use crate::procread::ProcRoot;

/// How long one step (resolving the files of one process) may take: `_host.procfiles.STEP_SECONDS`.
pub const STEP: Duration = Duration::from_secs(2);
/// Steps abandoned after missing their deadline (still blocked in the kernel) before no more
/// begin: `_host.procfiles.MAX_STUCK`.
pub const MAX_STUCK: usize = 4;
/// Symlinks followed in one path, as the kernel's own limit (MAXSYMLINKS).
const MAX_SYMLINKS: usize = 40;
/// At most this much of `/proc/PID/status` is read (a few KiB; the groups line is the longest).
const MAX_STATUS_BYTES: usize = 1 << 16;

/// `f_type` of the kernel's own filesystems (<linux/magic.h>): a symlink on one of them is not
/// followed by the walk, as `RESOLVE_NO_MAGICLINKS` does not follow `/proc`'s magic links.
const PSEUDO_FILESYSTEMS: [i64; 8] = [
    0x9FA0,      // proc
    0x6265_6572, // sysfs
    0x6462_6720, // debugfs
    0x7472_6163, // tracefs
    0x7363_6673, // securityfs
    0x6265_6570, // configfs
    0xDE5E_81E4, // efivarfs
    0xCAFE_4A11, // bpf
];

/// Why the files were not looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The process's owner, root or working directory could not be read (it is gone, or the
    /// scanner may not see them), or its working directory lies outside its root.
    Unknown,
    /// This thread could not take the owner's credentials (a scanner that is not root, looking
    /// at another user's process).
    NotAsOwner,
    /// Another step held the worker for a whole [`STEP`].
    Busy,
    /// The step took longer than [`STEP`] and was abandoned.
    TooLong,
    /// This many abandoned steps still hang in the kernel.
    StillHanging(usize),
}

/// The first of `paths` (as process `pid` names them: relative ones from its working directory)
/// that is not a regular file to its owner, the last component not followed; `None` when all
/// are. What the facade's `_host.procfiles.first_missing` tells.
pub fn first_missing(
    proc: &ProcRoot,
    pid: i32,
    paths: &[Vec<u8>],
) -> Result<Option<usize>, Refused> {
    let mut status = Vec::new();
    proc.read_capped(pid, "status", MAX_STATUS_BYTES, &mut status)
        .map_err(|_| Refused::Unknown)?;
    let owner = parse_owner(&status).ok_or(Refused::Unknown)?;
    let root_link = proc.link(pid, "root").map_err(|_| Refused::Unknown)?;
    let cwd_link = proc.link(pid, "cwd").map_err(|_| Refused::Unknown)?;
    let inside = paths
        .iter()
        .map(|path| in_root(path, &root_link, &cwd_link).ok_or(Refused::Unknown))
        .collect::<Result<Vec<_>, _>>()?;
    let root = proc
        .open_directory(pid, "root")
        .map_err(|_| Refused::Unknown)?;
    in_worker(move || {
        as_owner(&owner)?;
        Ok(inside.iter().position(|path| !is_regular_file(&root, path)))
    })?
}

/// `path` as an absolute path inside a process's root, given where its `root` and `cwd` links
/// point: a relative one from its working directory; `None` when that lies outside its root.
fn in_root(path: &[u8], root: &[u8], cwd: &[u8]) -> Option<Vec<u8>> {
    if path.starts_with(b"/") {
        return Some(path.to_vec());
    }
    let inside = if root == b"/" {
        cwd
    } else if cwd == root {
        b""
    } else {
        cwd.strip_prefix(root)
            .filter(|rest| rest.starts_with(b"/"))?
    };
    Some([inside, b"/", path].concat())
}

/// Whether `path` (absolute, inside the root `root`) is a regular file, its last component not
/// followed; anything that cannot be resolved is not.
fn is_regular_file(root: &OwnedFd, path: &[u8]) -> bool {
    resolve(root, path, false)
        .and_then(|found| fstat(found.as_raw_fd()))
        .is_ok_and(|status| status.st_mode & libc::S_IFMT == libc::S_IFREG)
}

// --- resolving inside a root ----------------------------------------------------------------

/// Whether `openat2` is used: 0 not found out yet, 1 yes, 2 no (the walk).
static USE_OPENAT2: AtomicU8 = AtomicU8::new(0);

/// Makes every later resolution walk (`false`) or find out again whether `openat2` works
/// (`true`): tests exercise the walk the kernel here does not need.
#[cfg(test)]
fn set_use_openat2(allowed: bool) {
    USE_OPENAT2.store(if allowed { 0 } else { 2 }, Ordering::Relaxed);
}

/// An `O_PATH` fd of `path` (absolute, inside the root) in `root`.
fn resolve(root: &OwnedFd, path: &[u8], follow_last: bool) -> io::Result<OwnedFd> {
    if openat2_works() {
        let nofollow = if follow_last { 0 } else { libc::O_NOFOLLOW };
        openat2(
            root.as_raw_fd(),
            path,
            libc::O_PATH | libc::O_CLOEXEC | nofollow,
        )
    } else {
        walk(root, path, follow_last)
    }
}

/// Whether `openat2` works here (ENOSYS before Linux 5.6; EPERM or ENOSYS from a seccomp
/// filter): found out once.
fn openat2_works() -> bool {
    match USE_OPENAT2.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let works = open_at(libc::AT_FDCWD, b"/", libc::O_PATH | libc::O_CLOEXEC)
                .and_then(|here| openat2(here.as_raw_fd(), b".", libc::O_PATH | libc::O_CLOEXEC))
                .is_ok();
            USE_OPENAT2.store(if works { 1 } else { 2 }, Ordering::Relaxed);
            works
        }
    }
}

fn openat2(dir: RawFd, path: &[u8], flags: libc::c_int) -> io::Result<OwnedFd> {
    let path = c_path(path)?;
    // SAFETY: an all-zero open_how is valid (no mode, no resolve flags) and is filled in below;
    // libc makes the struct non-exhaustive, as the kernel may grow it.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags as u64;
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    // EAGAIN: a rename raced a `..`, and the kernel asks to retry.
    for _ in 0..8 {
        // SAFETY: a NUL-terminated path and an open_how of the size given, both alive here.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir,
                path.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd >= 0 {
            // SAFETY: the kernel just gave us this fd, and nothing else owns it.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EAGAIN) {
            return Err(err);
        }
    }
    Err(io::Error::from_raw_os_error(libc::EAGAIN))
}

/// `path` resolved inside `root` one component at a time, as `openat2(RESOLVE_IN_ROOT |
/// RESOLVE_NO_MAGICLINKS)` would: `..` stops at the root, an absolute symlink starts again from
/// it, a symlink on a kernel filesystem is not followed.
fn walk(root: &OwnedFd, path: &[u8], follow_last: bool) -> io::Result<OwnedFd> {
    let root_status = fstat(root.as_raw_fd())?;
    let mut names: Vec<Vec<u8>> = path
        .split(|&b| b == b'/')
        .rev()
        .map(<[u8]>::to_vec)
        .collect();
    let mut current = root.try_clone()?;
    let mut links = 0;
    while let Some(name) = names.pop() {
        if name.is_empty() || name == b"." {
            continue;
        }
        if name == b".." {
            let here = fstat(current.as_raw_fd())?;
            if (here.st_dev, here.st_ino) == (root_status.st_dev, root_status.st_ino) {
                continue;
            }
        }
        let found = open_at(
            current.as_raw_fd(),
            &name,
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )?;
        let status = fstat(found.as_raw_fd())?;
        let kind = status.st_mode & libc::S_IFMT;
        if kind == libc::S_IFLNK && (!names.is_empty() || follow_last) {
            links += 1;
            if links > MAX_SYMLINKS || on_kernel_filesystem(&current)? {
                return Err(io::Error::from_raw_os_error(libc::ELOOP));
            }
            let target = read_link_at(current.as_raw_fd(), &name)?;
            names.extend(target.split(|&b| b == b'/').rev().map(<[u8]>::to_vec));
            if target.starts_with(b"/") {
                current = root.try_clone()?;
            }
            continue;
        }
        if !names.is_empty() && kind != libc::S_IFDIR {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        current = found;
    }
    Ok(current)
}

fn c_path(path: &[u8]) -> io::Result<CString> {
    CString::new(path).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn open_at(dir: RawFd, name: &[u8], flags: libc::c_int) -> io::Result<OwnedFd> {
    let name = c_path(name)?;
    // SAFETY: a NUL-terminated name, alive for the call.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just gave us this fd, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: an all-zero stat is a valid value for the kernel to overwrite.
    let mut status: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `status` is a live, writable stat.
    if unsafe { libc::fstat(fd, &mut status) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(status)
}

fn on_kernel_filesystem(fd: &OwnedFd) -> io::Result<bool> {
    // SAFETY: an all-zero statfs is a valid value for the kernel to overwrite.
    let mut status: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `status` is a live, writable statfs.
    if unsafe { libc::fstatfs(fd.as_raw_fd(), &mut status) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // f_type's width differs by machine; the magic numbers are 32-bit.
    Ok(PSEUDO_FILESYSTEMS.contains(&(status.f_type as i64 & 0xFFFF_FFFF)))
}

fn read_link_at(dir: RawFd, name: &[u8]) -> io::Result<Vec<u8>> {
    let name = c_path(name)?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: a NUL-terminated name and a writable buffer of the length given.
    let len = unsafe { libc::readlinkat(dir, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if len < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(len as usize);
    Ok(buf)
}

// --- credentials of one thread --------------------------------------------------------------

/// `setgroups` taking 32-bit gids (the plain one takes 16-bit gids on these machines).
#[cfg(any(target_arch = "x86", target_arch = "arm"))]
const SYS_SETGROUPS: libc::c_long = libc::SYS_setgroups32;
#[cfg(not(any(target_arch = "x86", target_arch = "arm")))]
const SYS_SETGROUPS: libc::c_long = libc::SYS_setgroups;

/// This thread's filesystem credentials (`setfsuid(-1)` changes nothing, and says them).
fn credentials() -> Owner {
    // SAFETY: -1 is no id: these calls change nothing and return the current ids.
    let (uid, gid) = unsafe { (libc::setfsuid(u32::MAX), libc::setfsgid(u32::MAX)) };
    // SAFETY: a size of 0 asks only for the count; the second call fills a buffer that large.
    let count = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    let mut groups = vec![0 as libc::gid_t; count.max(0) as usize];
    let filled = unsafe { libc::getgroups(count.max(0), groups.as_mut_ptr()) };
    groups.truncate(filled.max(0) as usize);
    Owner {
        uid: uid as u32,
        gid: gid as u32,
        groups,
    }
}

fn same_credentials(a: &Owner, b: &Owner) -> bool {
    let mut ours = a.groups.clone();
    let mut theirs = b.groups.clone();
    ours.sort_unstable();
    ours.dedup();
    theirs.sort_unstable();
    theirs.dedup();
    (a.uid, a.gid, ours) == (b.uid, b.gid, theirs)
}

/// Gives this thread the credentials `who` (only this thread: the raw syscalls, not libc's
/// wrappers, which would change every thread of the process).
fn set_credentials(who: &Owner) -> bool {
    // SAFETY: a buffer of the count given, alive for the call.
    let grouped =
        unsafe { libc::syscall(SYS_SETGROUPS, who.groups.len(), who.groups.as_ptr()) } == 0;
    if !grouped {
        return false;
    }
    // SAFETY: plain calls on this thread's credentials.
    unsafe {
        libc::setfsgid(who.gid);
        libc::setfsuid(who.uid);
    }
    let now = credentials();
    now.uid == who.uid && now.gid == who.gid
}

fn as_owner(who: &Owner) -> Result<(), Refused> {
    if same_credentials(who, &credentials()) || set_credentials(who) {
        Ok(())
    } else {
        Err(Refused::NotAsOwner)
    }
}

// --- one step at a time, in a worker thread, under a deadline --------------------------------

type Outcome = Box<dyn Any + Send>;

struct Job {
    action: Box<dyn FnOnce() -> Outcome + Send>,
    reply: SyncSender<Outcome>,
    /// Given up on by its caller: the worker that runs it retires when it ends.
    late: Arc<AtomicBool>,
}

#[derive(Default)]
struct Workers {
    /// The process these belong to: a forked child has none of its parent's threads.
    pid: u32,
    /// The worker steps are sent to, and its number.
    current: Option<(u64, Sender<Job>)>,
    started: u64,
    stuck: usize,
    busy: bool,
}

static WORKERS: Mutex<Workers> = Mutex::new(Workers {
    pid: 0,
    current: None,
    started: 0,
    stuck: 0,
    busy: false,
});
static FREED: Condvar = Condvar::new();

fn workers() -> MutexGuard<'static, Workers> {
    let mut guard = WORKERS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let me = std::process::id();
    if guard.pid != me {
        *guard = Workers {
            pid: me,
            ..Workers::default()
        };
    }
    guard
}

fn spawn_worker(number: u64) -> io::Result<Sender<Job>> {
    let (jobs, inbox) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("enginespec-namedfiles".into())
        .spawn(move || run_worker(number, &inbox))?;
    Ok(jobs)
}

/// Runs steps one at a time and gives its credentials back after each; retires after a step
/// its caller gave up on, or whose credentials it could not give back.
fn run_worker(number: u64, inbox: &Receiver<Job>) {
    let mine = credentials();
    while let Ok(job) = inbox.recv() {
        let outcome = (job.action)();
        let restored = same_credentials(&mine, &credentials()) || set_credentials(&mine);
        let mut state = workers();
        let late = job.late.load(Ordering::Relaxed);
        if late {
            state.stuck = state.stuck.saturating_sub(1);
        } else {
            // Room for one reply: never blocks.
            let _ = job.reply.try_send(outcome);
        }
        if !restored && state.current.as_ref().is_some_and(|(n, _)| *n == number) {
            state.current = None;
        }
        if late || !restored {
            return;
        }
    }
}

/// `action()` in the worker thread, waited for at most [`STEP`].
fn in_worker<T: Send + 'static>(action: impl FnOnce() -> T + Send + 'static) -> Result<T, Refused> {
    let deadline = Instant::now() + STEP;
    let mut state = workers();
    while state.busy {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Refused::Busy);
        }
        state = FREED
            .wait_timeout(state, left)
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .0;
    }
    if state.stuck >= MAX_STUCK {
        return Err(Refused::StillHanging(state.stuck));
    }
    let (number, jobs) = match &state.current {
        Some((number, jobs)) => (*number, jobs.clone()),
        None => {
            state.started += 1;
            let number = state.started;
            let jobs = spawn_worker(number).map_err(|_| Refused::Busy)?;
            state.current = Some((number, jobs.clone()));
            (number, jobs)
        }
    };
    state.busy = true;
    drop(state);
    let (reply, answer) = mpsc::sync_channel(1);
    let late = Arc::new(AtomicBool::new(false));
    let job = Job {
        action: Box::new(move || Box::new(action()) as Outcome),
        reply,
        late: Arc::clone(&late),
    };
    let waited = if jobs.send(job).is_ok() {
        answer.recv_timeout(STEP)
    } else {
        Err(RecvTimeoutError::Disconnected)
    };
    let mut state = workers();
    state.busy = false;
    FREED.notify_one();
    let outcome = match waited {
        Ok(outcome) => outcome,
        // Sent between the deadline and this lock: answered in time after all.
        Err(_) => match answer.try_recv() {
            Ok(outcome) => outcome,
            Err(gone) => {
                if state.current.as_ref().is_some_and(|(n, _)| *n == number) {
                    state.current = None;
                }
                // A worker that dropped the step (it never does, short of a bug) holds nothing
                // in the kernel: only a step still running counts as stuck.
                if gone == TryRecvError::Disconnected {
                    return Err(Refused::Busy);
                }
                late.store(true, Ordering::Relaxed);
                state.stuck += 1;
                return Err(Refused::TooLong);
            }
        },
    };
    drop(state);
    Ok(*outcome
        .downcast::<T>()
        .expect("a step's outcome is of its action's type"))
}

/// Abandoned steps that still hang in the kernel.
#[cfg(test)]
fn stuck() -> usize {
    workers().stuck
}

#[cfg(test)]
mod tests;
