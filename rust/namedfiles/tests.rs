use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::sync::mpsc;

use tempfile::TempDir;

use super::*;

/// The worker and the resolver choice are process-wide: these tests take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

const NOBODY: u32 = 65534;

/// A fixture host: `proc/PID/{status,root,cwd}` and the process's filesystem under `fs/`.
struct Host {
    dir: TempDir,
}

impl Host {
    fn new() -> Self {
        let dir = TempDir::new().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        fs::create_dir_all(dir.path().join("fs/opt/tabby/common")).unwrap();
        fs::create_dir_all(dir.path().join("fs/tmp")).unwrap();
        Host { dir }
    }

    fn fs(&self, relative: &str) -> std::path::PathBuf {
        self.dir.path().join("fs").join(relative)
    }

    /// Process `pid` of `uid`, rooted at `fs/` and working in `fs/CWD`.
    fn process(&self, pid: i32, uid: u32, cwd: &str) {
        let at = self.dir.path().join(format!("proc/{pid}"));
        fs::create_dir_all(&at).unwrap();
        let status = format!(
            "Name:\tpython3\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\nGroups:\t\n"
        );
        fs::write(at.join("status"), status).unwrap();
        symlink(self.dir.path().join("fs"), at.join("root")).unwrap();
        symlink(self.fs(cwd), at.join("cwd")).unwrap();
    }

    fn proc(&self) -> ProcRoot {
        ProcRoot::new(self.dir.path().join("proc"))
    }

    fn missing(&self, pid: i32, paths: &[&str]) -> Result<Option<usize>, Refused> {
        let paths: Vec<Vec<u8>> = paths.iter().map(|p| p.as_bytes().to_vec()).collect();
        first_missing(&self.proc(), pid, &paths)
    }
}

fn me() -> u32 {
    // SAFETY: a plain query.
    unsafe { libc::geteuid() }
}

#[test]
fn a_path_is_placed_inside_the_root_from_the_working_directory() {
    assert_eq!(
        in_root(b"/etc/x", b"/jail", b"/elsewhere"),
        Some(b"/etc/x".to_vec())
    );
    assert_eq!(
        in_root(b"x", b"/", b"/opt/tabby"),
        Some(b"/opt/tabby/x".to_vec())
    );
    assert_eq!(
        in_root(b"x", b"/jail", b"/jail/etc"),
        Some(b"/etc/x".to_vec())
    );
    assert_eq!(in_root(b"x", b"/jail", b"/jail"), Some(b"/x".to_vec()));
    // A working directory outside the root (a process that chrooted without chdir): not looked at.
    assert_eq!(in_root(b"x", b"/jail", b"/jailhouse"), None);
    assert_eq!(in_root(b"x", b"/jail", b"/tmp"), None);
}

#[test]
fn files_are_checked_inside_the_root_with_either_resolver() {
    let _turn = serial();
    let host = Host::new();
    fs::write(host.fs("opt/tabby/main.py"), "").unwrap();
    fs::write(host.fs("opt/tabby/common/args.py"), "").unwrap();
    symlink("main.py", host.fs("opt/tabby/link.py")).unwrap();
    fs::create_dir(host.fs("opt/tabby/dir.py")).unwrap();
    // An absolute link means the root's own path, never the scanner's.
    let outside = host.dir.path().join("outside.py");
    fs::write(&outside, "").unwrap();
    symlink(&outside, host.fs("opt/tabby/common/escape")).unwrap();
    symlink(host.dir.path(), host.fs("opt/tabby/common/escape-dir")).unwrap();
    symlink("/opt/tabby", host.fs("tmp/to-tabby")).unwrap();
    host.process(10, me(), "opt/tabby");
    for openat2_allowed in [true, false] {
        set_use_openat2(openat2_allowed);
        let missing = |paths: &[&str]| host.missing(10, paths);
        assert_eq!(missing(&["main.py", "common/args.py"]), Ok(None));
        assert_eq!(
            missing(&["/opt/tabby/main.py", "./common/../main.py"]),
            Ok(None)
        );
        // `..` stops at the root: the host's directories above it are never reached.
        assert_eq!(missing(&["../../../../../opt/tabby/main.py"]), Ok(None));
        // Only regular files count, the last component not followed.
        assert_eq!(missing(&["main.py", "link.py"]), Ok(Some(1)));
        assert_eq!(missing(&["dir.py"]), Ok(Some(0)));
        assert_eq!(missing(&["absent.py"]), Ok(Some(0)));
        // Links on the way are followed, inside the root.
        assert_eq!(missing(&["/tmp/to-tabby/main.py"]), Ok(None));
        assert!(outside.is_file());
        assert_eq!(missing(&["common/escape-dir/outside.py"]), Ok(Some(0)));
        assert_eq!(missing(&["common/escape"]), Ok(Some(0)));
    }
    set_use_openat2(true);
}

#[test]
fn files_are_checked_with_the_owners_permissions() {
    let _turn = serial();
    let host = Host::new();
    fs::write(host.fs("opt/tabby/main.py"), "").unwrap();
    fs::create_dir(host.fs("private")).unwrap();
    fs::write(host.fs("private/main.py"), "").unwrap();
    fs::set_permissions(host.fs("private"), fs::Permissions::from_mode(0o700)).unwrap();
    host.process(11, NOBODY, "/");
    // nobody may not search root's 0700 directory, whoever scans.
    assert!(host.missing(11, &["/private/main.py"]) != Ok(None));
    if me() == 0 {
        assert_eq!(host.missing(11, &["/opt/tabby/main.py"]), Ok(None));
        assert_eq!(host.missing(11, &["/private/main.py"]), Ok(Some(0)));
        // The worker took its own credentials back.
        assert_eq!(in_worker(|| credentials().uid), Ok(0));
    }
}

#[test]
fn a_process_whose_files_cannot_be_placed_is_refused() {
    let _turn = serial();
    let host = Host::new();
    assert_eq!(host.missing(12, &["main.py"]), Err(Refused::Unknown));
    host.process(13, me(), "tmp");
    fs::write(host.dir.path().join("proc/13/status"), "Name:\tx\n").unwrap();
    assert_eq!(host.missing(13, &["main.py"]), Err(Refused::Unknown));
    host.process(14, me(), "tmp");
    fs::remove_file(host.dir.path().join("proc/14/cwd")).unwrap();
    symlink(host.dir.path(), host.dir.path().join("proc/14/cwd")).unwrap();
    assert_eq!(host.missing(14, &["main.py"]), Err(Refused::Unknown));
    // An absolute path needs no working directory.
    assert_eq!(host.missing(14, &["/tmp"]), Ok(Some(0)));
}

#[test]
fn a_step_that_hangs_is_abandoned_and_enough_of_them_stop_further_steps() {
    let _turn = serial();
    let mut releases = Vec::new();
    for _ in 0..MAX_STUCK {
        let (release, wait) = mpsc::channel::<()>();
        releases.push(release);
        assert_eq!(
            in_worker(move || wait.recv_timeout(Duration::from_secs(60)).is_ok()),
            Err(Refused::TooLong)
        );
    }
    assert_eq!(stuck(), MAX_STUCK);
    assert_eq!(in_worker(|| 1), Err(Refused::StillHanging(MAX_STUCK)));
    drop(releases); // the kernel lets the steps go: their workers retire
    let deadline = Instant::now() + Duration::from_secs(30);
    while stuck() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(stuck(), 0);
    assert_eq!(in_worker(|| 2), Ok(2));
}

#[test]
fn a_fifo_or_a_device_is_no_file_and_is_never_opened() {
    let _turn = serial();
    let host = Host::new();
    let fifo = CString::new(
        host.fs("opt/tabby/main.py")
            .into_os_string()
            .into_encoded_bytes(),
    )
    .unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o666) }, 0);
    symlink("/dev/null", host.fs("opt/tabby/null")).unwrap();
    host.process(15, me(), "opt/tabby");
    // A FIFO opened for reading would block the worker: it is looked at through O_PATH only.
    assert_eq!(host.missing(15, &["main.py"]), Ok(Some(0)));
    assert_eq!(host.missing(15, &["null"]), Ok(Some(0)));
    assert!(Path::new(&host.fs("opt/tabby/main.py")).exists());
}

#[test]
fn a_worker_that_dies_is_replaced_and_counts_as_no_stuck_step() {
    let _turn = serial();
    let before = stuck();
    let died = in_worker(|| -> u8 { panic!("a step that panics ends its worker") });
    assert_eq!(died, Err(Refused::Busy));
    assert_eq!(stuck(), before);
    assert_eq!(in_worker(|| 3), Ok(3));
}
