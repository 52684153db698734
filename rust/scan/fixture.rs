//! A fake procfs in a temporary directory, for tests that drive the scanner through
//! `ScanOptions.proc_root`: the files it reads, in the kernel's formats, and the kernel's
//! counters (`processes` in `stat`, `sys/kernel/ns_last_pid`) moved as forks would move them.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use tempfile::TempDir;

use crate::scan::{ReadSet, ScanOptions};
use crate::signature::{signatures_from_json, Signature};

/// Two made-up engines (no real engine knowledge lives in Rust): `demo` folds its workers,
/// `solo` does not.
pub(crate) const SIGNATURES: &str = r#"[
  {"engine": "demo",
   "launch_forms": [{"executables": ["demo"], "subcommand": ["serve"], "positional_model": true}],
   "model_flags": ["--model"], "port_flags": ["--port"], "fold_workers": true},
  {"engine": "solo",
   "launch_forms": [{"executables": ["solo-server"]}],
   "model_flags": ["-m"]}
]"#;

pub(crate) fn signatures() -> Vec<Signature> {
    signatures_from_json(SIGNATURES).expect("test signatures are valid")
}

pub(crate) const BOOT_TIME: u64 = 1_700_000_000;
/// A command name that trips a parser splitting `stat` at the first `)`.
const COMM: &str = "x) R 9 (y";

/// A process as written into the fake procfs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stat {
    pub state: char,
    pub ppid: i32,
    pub start_ticks: u64,
    pub comm: &'static str,
    /// `arg_start`, `arg_end`.
    pub args: (u64, u64),
}

impl Default for Stat {
    /// A sleeping child of pid 1 started at boot.
    fn default() -> Self {
        Stat {
            state: 'S',
            ppid: 1,
            start_ticks: 0,
            comm: COMM,
            args: (0x7ffc_0000_1000, 0x7ffc_0000_1040),
        }
    }
}

/// Atomics, not cells, so a helper thread may add processes while the scanner reads.
pub(crate) struct FakeProc {
    dir: TempDir,
    forks: AtomicU64,
    last_pid: AtomicU64,
    /// Start ticks of the last spawned process: each is later than the one before.
    clock: AtomicU64,
}

impl FakeProc {
    pub fn new() -> Self {
        let proc = FakeProc {
            dir: tempfile::tempdir().expect("temporary directory"),
            forks: AtomicU64::new(1000),
            last_pid: AtomicU64::new(1),
            clock: AtomicU64::new(5000),
        };
        fs::create_dir_all(proc.path("sys/kernel")).unwrap();
        fs::write(proc.path("sys/kernel/pid_max"), "32768\n").unwrap();
        proc.write_cursor();
        proc
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    /// Options of a polling loop over this tree; `sh` and `env` are exec wrappers.
    pub fn options(&self) -> ScanOptions {
        ScanOptions {
            wrappers: vec![b"sh".to_vec(), b"env".to_vec()],
            young: Duration::from_secs(5),
            listen_ports: true,
            refresh: Duration::from_secs(2),
            proc_root: self.root().to_path_buf(),
            read_set: ReadSet::default(),
        }
    }

    /// Sets the kernel's counters by hand (as a checkpoint/restore tool may set the cursor).
    pub fn set_cursor(&self, last_pid: u64, forks: u64) {
        self.last_pid.store(last_pid, SeqCst);
        self.forks.store(forks, SeqCst);
        self.write_cursor();
    }

    pub fn forks(&self) -> u64 {
        self.forks.load(SeqCst)
    }

    pub fn last_pid(&self) -> u64 {
        self.last_pid.load(SeqCst)
    }

    /// `/proc/stat` with `forks` processes forked since boot.
    pub fn stat_text(forks: u64) -> String {
        format!(
            "cpu  10 0 10 1000 0 0 0 0 0 0\nintr 1 1\nctxt 99\nbtime {BOOT_TIME}\nprocesses {forks}\nprocs_running 1\nprocs_blocked 0\n"
        )
    }

    fn write_cursor(&self) {
        fs::write(self.path("stat"), Self::stat_text(self.forks())).unwrap();
        fs::write(
            self.path("sys/kernel/ns_last_pid"),
            format!("{}\n", self.last_pid()),
        )
        .unwrap();
    }

    /// A process forked (the counters move) that runs `argv`, child of pid 1.
    pub fn spawn(&self, pid: i32, argv: &[&str]) -> Stat {
        self.spawn_child(pid, 1, argv)
    }

    pub fn spawn_child(&self, pid: i32, ppid: i32, argv: &[&str]) -> Stat {
        self.forks.fetch_add(1, SeqCst);
        self.last_pid.store(u64::try_from(pid).unwrap(), SeqCst);
        self.write_cursor();
        let stat = Stat {
            ppid,
            start_ticks: self.clock.fetch_add(1, SeqCst) + 1,
            ..Stat::default()
        };
        self.create(pid, argv, stat);
        stat
    }

    /// Writes a process directory without moving the counters.
    pub fn create(&self, pid: i32, argv: &[&str], stat: Stat) {
        fs::create_dir_all(self.path(&format!("{pid}/task/{pid}"))).unwrap();
        fs::create_dir_all(self.path(&format!("{pid}/fd"))).unwrap();
        fs::create_dir_all(self.path(&format!("{pid}/net"))).unwrap();
        fs::write(self.path(&format!("{pid}/task/{pid}/children")), "").unwrap();
        self.exec(pid, argv);
        self.set_stat(pid, stat);
        let exe = argv.first().map_or("/bin/true", |a| a);
        symlink(format!("/usr/bin/{exe}"), self.path(&format!("{pid}/exe"))).unwrap();
    }

    /// Replaces the argv in place, as `execve` does (the `/proc/PID` directory stays), or as a
    /// process rewriting its own argv does (`stat` is left as it is).
    pub fn exec(&self, pid: i32, argv: &[&str]) {
        let cmdline: Vec<u8> = argv
            .iter()
            .flat_map(|a| a.bytes().chain(std::iter::once(0)))
            .collect();
        fs::write(self.path(&format!("{pid}/cmdline")), cmdline).unwrap();
    }

    pub fn set_stat(&self, pid: i32, stat: Stat) {
        let Stat {
            state,
            ppid,
            start_ticks,
            comm,
            args: (arg_start, arg_end),
        } = stat;
        // All 52 fields of Linux 6.
        let line = format!(
            "{pid} ({comm}) {state} {ppid} {pid} {pid} 0 -1 4194560 100 0 0 0 10 5 0 0 20 0 1 0 {start_ticks} 1000000 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 {arg_start} {arg_end} {arg_end} {arg_end} 0\n"
        );
        fs::write(self.path(&format!("{pid}/stat")), line).unwrap();
    }

    /// The process exited and was reaped.
    pub fn kill(&self, pid: i32) {
        fs::remove_dir_all(self.path(&pid.to_string())).unwrap();
    }

    /// The pid now belongs to another process: a new `/proc/PID` directory, hence a new inode
    /// (the new directory is made while the old one still exists, so the inode must differ).
    /// The counters are left alone.
    pub fn replace(&self, pid: i32, argv: &[&str], stat: Stat) {
        let old = self.path(&format!("{pid}.old"));
        fs::rename(self.path(&pid.to_string()), &old).unwrap();
        self.create(pid, argv, stat);
        fs::remove_dir_all(old).unwrap();
    }

    /// The children of thread `tid` of `pid`.
    pub fn set_children(&self, pid: i32, tid: i32, children: &[i32]) {
        let dir = self.path(&format!("{pid}/task/{tid}"));
        fs::create_dir_all(&dir).unwrap();
        let text: String = children.iter().map(|c| format!("{c} ")).collect();
        fs::write(dir.join("children"), text).unwrap();
    }

    /// `/proc/PID/fd/FD` -> `socket:[INODE]`.
    pub fn add_socket(&self, pid: i32, fd: u32, inode: u64) {
        symlink(
            format!("socket:[{inode}]"),
            self.path(&format!("{pid}/fd/{fd}")),
        )
        .unwrap();
    }

    /// `/proc/PID/net/tcp` (or `tcp6`) with one row per (inode, port, state hex).
    pub fn set_tcp(&self, pid: i32, table: &str, rows: &[(u64, u16, &str)]) {
        let mut text = String::from(
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n",
        );
        for (sl, (inode, port, state)) in rows.iter().enumerate() {
            text.push_str(&format!(
                "{sl:4}: 0100007F:{port:04X} 00000000:0000 {state} 00000000:00000000 00:00000000 00000000     0        0 {inode} 1 0000000000000000 100 0 0 10 0\n"
            ));
        }
        fs::write(self.path(&format!("{pid}/net/{table}")), text).unwrap();
    }
}
