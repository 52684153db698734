//! The scanner's state machine on fake procfs trees (see `fixture.rs`): what a cold scan finds,
//! what later scans re-read and trust, and how pid reuse, exec, zombies and unreadable files are
//! handled. Time is passed in (`scan_at`), so the young and refresh windows are stepped, not slept.

use std::path::Path;
use std::time::{Duration, Instant};

use super::fixture::{signatures, FakeProc, Stat, BOOT_TIME};
use super::*;

fn scanner(proc: &FakeProc) -> Scanner {
    Scanner::new(&signatures(), proc.options()).expect("scanner")
}

fn pids(found: &[Arc<EngineProc>]) -> Vec<i32> {
    found.iter().map(|p| p.pid).collect()
}

fn find(found: &[Arc<EngineProc>], pid: i32) -> &EngineProc {
    found
        .iter()
        .find(|p| p.pid == pid)
        .unwrap_or_else(|| panic!("pid {pid} not found in {:?}", pids(found)))
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn bytes(values: &[&str]) -> Vec<Vec<u8>> {
    values.iter().map(|v| v.as_bytes().to_vec()).collect()
}

#[test]
fn reuse_window() {
    let w = Reuse::Interval {
        after: 100,
        upto: 200,
    };
    assert!(!w.may_reuse(100) && w.may_reuse(101) && w.may_reuse(200) && !w.may_reuse(201));
    let wrapped = Reuse::Interval {
        after: 32000,
        upto: 310,
    };
    assert!(wrapped.may_reuse(32001) && wrapped.may_reuse(5) && !wrapped.may_reuse(400));
    let none = Reuse::Interval { after: 7, upto: 7 };
    assert!(!none.may_reuse(7) && !none.may_reuse(8));
    assert!(!Reuse::Nothing.may_reuse(1) && Reuse::Everything.may_reuse(1));
}

#[test]
fn cold_scan_finds_engines_and_not_look_alikes() {
    let proc = FakeProc::new();
    proc.spawn(1, &["/sbin/init"]);
    let demo = proc.spawn(100, &["demo", "serve", "/m/a", "--port", "8001"]);
    proc.spawn(101, &["tail", "-f", "/var/log/demo.log"]);
    proc.spawn(102, &["grep", "demo serve"]);
    proc.spawn(103, &["vim", "/src/demo/serve/README.md"]);
    proc.spawn(104, &["demo", "bench", "serve"]);
    proc.spawn(105, &["/opt/venv/bin/solo-server", "-m", "/m/b.gguf"]);
    proc.spawn(106, &["python3", "/opt/demo/serve.py"]);
    proc.spawn(107, &["sh", "-c", "demo serve /m/x"]);
    let mut scanner = scanner(&proc);
    let found = scanner.scan_at(Instant::now());
    assert_eq!(pids(&found), vec![100, 105]);

    let a = find(&found, 100);
    assert_eq!((a.facts.engine, a.ppid, a.facts.port), (0, 1, Some(8001)));
    assert_eq!(a.facts.model.as_deref(), Some(&b"/m/a"[..]));
    assert_eq!(a.argv, bytes(&["demo", "serve", "/m/a", "--port", "8001"]));
    assert_eq!(a.exe.as_deref(), Some(&b"/usr/bin/demo"[..]));
    assert_eq!(a.parent_argv, bytes(&["/sbin/init"]));
    let expected = demo.start_ticks as f64 / clock_ticks() + BOOT_TIME as f64;
    assert!((a.start_time - expected).abs() < 1e-6, "{}", a.start_time);

    let b = find(&found, 105);
    assert_eq!(b.facts.engine, 1);
    assert_eq!(b.facts.model.as_deref(), Some(&b"/m/b.gguf"[..]));

    assert_eq!(
        scanner.stats(),
        ScanStats {
            scanned: 9,
            new: 9,
            ..ScanStats::default()
        }
    );
    assert_eq!(scanner.known_len(), 9);
}

#[test]
fn quiet_scan_lists_nothing_drops_the_vanished_and_keeps_the_rest() {
    let proc = FakeProc::new();
    proc.spawn(1, &["/sbin/init"]);
    proc.spawn(100, &["demo", "serve", "/m/a"]);
    proc.spawn(101, &["solo-server", "-m", "/m/b"]);
    proc.spawn(102, &["sleep", "1000"]);
    let mut scanner = scanner(&proc);
    let t0 = Instant::now();
    let first = scanner.scan_at(t0);
    assert_eq!(pids(&first), vec![100, 101]);

    // No fork since: a directory that appears anyway cannot be a new process, and is not even
    // seen, because the listing is skipped.
    proc.create(
        200,
        &["demo", "serve", "/m/probe"],
        Stat {
            start_ticks: 9,
            ..Stat::default()
        },
    );
    proc.kill(101);
    let quiet = scanner.scan_at(t0 + secs(1));
    assert_eq!(pids(&quiet), vec![100]);
    assert_eq!(quiet[0].start_time, first[0].start_time);
    assert_eq!(quiet[0].argv, first[0].argv);
    let stats = scanner.stats();
    assert_eq!((stats.new, stats.vanished, stats.reread), (0, 1, 0));
    assert_eq!(scanner.known_len(), 3);

    // One fork anywhere and the next scan lists /proc again.
    proc.spawn(300, &["sleep", "1"]);
    let listed = scanner.scan_at(t0 + secs(2));
    assert_eq!(pids(&listed), vec![100, 200]);
    assert_eq!(scanner.stats().new, 2);
}

#[test]
fn a_watched_exec_wrapper_is_reported_once_it_execs_an_engine() {
    let proc = FakeProc::new();
    proc.spawn(1, &["/sbin/init"]);
    proc.spawn(100, &["sh", "-c", "exec demo serve /m/w"]);
    proc.spawn(101, &["env", "A=1", "solo-server", "-m", "/m/e"]);
    proc.spawn(102, &["-sh"]); // a login shell: not watched
    proc.spawn(103, &["sh"]); // an interactive shell: not watched
    let mut scanner = scanner(&proc);
    let t0 = Instant::now();
    assert!(scanner.scan_at(t0).is_empty());

    // exec keeps the pid and the /proc/PID directory, and forks nothing: a quiet scan.
    proc.exec(100, &["demo", "serve", "/m/w"]);
    let found = scanner.scan_at(t0 + secs(60));
    assert_eq!(pids(&found), vec![100]);
    assert_eq!(scanner.stats().reread, 2, "only the two wrappers are read");

    // The same through a listing scan.
    proc.exec(101, &["solo-server", "-m", "/m/e"]);
    proc.spawn(300, &["sleep", "1"]);
    let found = scanner.scan_at(t0 + secs(61));
    assert_eq!(pids(&found), vec![100, 101]);
    assert_eq!(
        find(&found, 101).facts.model.as_deref(),
        Some(&b"/m/e"[..]),
        "classified from its new argv"
    );
}

#[test]
fn young_processes_are_watched_for_the_young_window_only() {
    let proc = FakeProc::new();
    proc.spawn(1, &["/sbin/init"]);
    let mut scanner = scanner(&proc);
    let t0 = Instant::now();
    scanner.scan_at(t0);

    // Born after the first scan: watched for `young` (5 s) from when it was first seen.
    proc.spawn(200, &["python3", "launch.py"]);
    proc.spawn(201, &["python3", "prepare.py"]);
    assert!(scanner.scan_at(t0 + secs(1)).is_empty());
    assert!(scanner.scan_at(t0 + secs(2)).is_empty());
    assert_eq!(scanner.stats().reread, 2);
    proc.exec(200, &["demo", "serve", "/m/y"]);
    assert_eq!(pids(&scanner.scan_at(t0 + secs(3))), vec![200]);

    // Once the window is over the process is settled: trusted without reads, so a late exec
    // is not seen (the cost model's bargain; exec wrappers are the exception).
    scanner.scan_at(t0 + secs(7));
    assert_eq!(scanner.stats().reread, 0);
    proc.exec(201, &["demo", "serve", "/m/late"]);
    assert_eq!(pids(&scanner.scan_at(t0 + secs(8))), vec![200]);
    assert_eq!(scanner.stats().reread, 0);
}

#[test]
fn processes_present_at_the_first_scan_are_not_young() {
    let proc = FakeProc::new();
    proc.spawn(1, &["/sbin/init"]);
    proc.spawn(100, &["python3", "old.py"]);
    let mut scanner = scanner(&proc);
    let t0 = Instant::now();
    scanner.scan_at(t0);
    scanner.scan_at(t0 + secs(1));
    assert_eq!(scanner.stats().reread, 0);
}

#[test]
fn a_process_born_just_before_the_first_scan_is_watched_for_its_exec() {
    let proc = FakeProc::new();
    proc.spawn(1, &["/sbin/init"]);
    // 200 started 2 s before the first scan (a watch started as an engine is launched), caught
    // between its fork and its exec with its parent's argv; 100 started 10 s before.
    let ticks = clock_ticks();
    let old = proc.spawn(100, &["python3", "old.py"]).start_ticks as f64 / ticks;
    let early = Stat {
        start_ticks: ((old + 8.0) * ticks) as u64,
        ..Stat::default()
    };
    proc.create(200, &["python3", "-m", "launcher"], early);
    std::fs::write(proc.path("uptime"), format!("{:.2} 0.00\n", old + 10.0)).unwrap();
    let mut scanner = scanner(&proc);
    let t0 = Instant::now();
    assert!(scanner.scan_at(t0).is_empty());
    assert!(scanner.scan_at(t0 + secs(1)).is_empty());
    assert_eq!(scanner.stats().reread, 1);
    proc.exec(200, &["demo", "serve", "/m/early"]);
    proc.exec(100, &["demo", "serve", "/m/old"]);
    assert_eq!(pids(&scanner.scan_at(t0 + secs(2))), vec![200]);
    // Its window is `young` from the first scan, as for a process born after it.
    scanner.scan_at(t0 + secs(7));
    assert_eq!(scanner.stats().reread, 0);
}

#[test]
fn a_first_scan_looks_for_recent_births_back_from_the_cursor_until_a_settled_run() {
    // 200 was born 1 s before the first scan, and long-lived processes have the pids after it (as
    // when the cursor wrapped around pid_max and skipped them). Newest first, the first scan reads
    // `stat`s until SETTLED_RUN of them in a row started before the young window.
    for (settled, watched) in [(SETTLED_RUN - 1, true), (SETTLED_RUN, false)] {
        let proc = FakeProc::new();
        proc.spawn(1, &["/sbin/init"]);
        let ticks = clock_ticks();
        let now = proc.spawn(100, &["python3", "old.py"]).start_ticks as f64 / ticks + 60.0;
        std::fs::write(proc.path("uptime"), format!("{now:.2} 0.00\n")).unwrap();
        let early = Stat {
            start_ticks: ((now - 1.0) * ticks) as u64,
            ..Stat::default()
        };
        proc.create(200, &["python3", "-m", "launcher"], early);
        for n in 0..settled {
            proc.spawn(201 + n as i32, &["sleep", "1000"]);
        }
        let mut scanner = scanner(&proc);
        let t0 = Instant::now();
        assert!(scanner.scan_at(t0).is_empty());
        proc.exec(200, &["demo", "serve", "/m/early"]);
        let found = pids(&scanner.scan_at(t0 + secs(1)));
        assert_eq!(
            found,
            if watched { vec![200] } else { vec![] },
            "{settled} settled"
        );
    }
}

/// An engine folding workers (`demo`, pid 100) and one that does not (`solo`, pid 200), each
/// with children, sockets and an unrelated listener in the same network namespace.
fn engine_tree(proc: &FakeProc) {
    proc.spawn(1, &["/sbin/init"]);
    proc.spawn(100, &["demo", "serve", "/m/a"]);
    proc.spawn_child(110, 100, &["demo::Worker_TP0"]);
    proc.spawn_child(111, 100, &["demo::Worker_TP1"]);
    proc.spawn_child(112, 110, &["demo::helper"]);
    // 111 was forked by a second thread of 100
    proc.set_children(100, 100, &[110]);
    proc.set_children(100, 105, &[111]);
    proc.set_children(110, 110, &[112]);
    proc.add_socket(100, 3, 5001);
    proc.add_socket(110, 4, 5002);
    proc.add_socket(111, 5, 5003);
    proc.add_socket(111, 6, 5999);
    std::os::unix::fs::symlink("/dev/null", proc.path("100/fd/0")).unwrap();
    proc.set_tcp(
        100,
        "tcp",
        &[(5001, 8001, "0A"), (5003, 40000, "01"), (5004, 7777, "0A")],
    );
    proc.set_tcp(100, "tcp6", &[(5002, 9001, "0A")]);

    proc.spawn(120, &["sleep", "1000"]);
    proc.add_socket(120, 3, 5004);

    proc.spawn(200, &["solo-server", "-m", "/m/s"]);
    proc.spawn_child(210, 200, &["solo-helper"]);
    proc.set_children(200, 200, &[210]);
    proc.add_socket(200, 3, 6001);
    proc.add_socket(210, 3, 6002);
    proc.set_tcp(200, "tcp", &[(6001, 8080, "0A"), (6002, 8081, "0A")]);
}

#[test]
fn collect_folds_descendants_and_their_listen_ports() {
    let proc = FakeProc::new();
    engine_tree(&proc);
    let mut scanner = scanner(&proc);
    let found = scanner.scan_at(Instant::now());
    assert_eq!(pids(&found), vec![100, 200]);
    let demo = find(&found, 100);
    assert_eq!(demo.descendants, vec![110, 111, 112]);
    // 5003 is a connection, 5004 another process's listener, 5999 in no table
    assert_eq!(demo.listen_ports, vec![8001, 9001]);
    let solo = find(&found, 200);
    assert!(solo.descendants.is_empty(), "solo does not fold workers");
    assert_eq!(
        solo.listen_ports,
        vec![8080],
        "its child's socket is not its own"
    );
}

#[test]
fn the_read_set_is_read_for_engines_once_per_record() {
    let proc = FakeProc::new();
    proc.spawn(1, &["/sbin/init"]);
    proc.spawn(100, &["demo", "serve", "/m/a"]);
    proc.spawn(200, &["solo-server", "-m", "/m/b"]);
    proc.spawn(300, &["bash"]);
    for pid in [100, 200, 300] {
        std::fs::write(
            proc.path(&format!("{pid}/environ")),
            b"PATH=/bin\0DEMO_PORT=1\0DEMO_PORT=2\0",
        )
        .unwrap();
    }
    std::fs::write(proc.path("100/cgroup"), b"0::/user.slice\n").unwrap();
    std::fs::create_dir(proc.path("100/ns")).unwrap();
    std::os::unix::fs::symlink("net:[4026532999]", proc.path("100/ns/net")).unwrap();
    let options = ScanOptions {
        read_set: ReadSet {
            environ: vec![bytes(&["DEMO_PORT"]), Vec::new()],
            cgroup: true,
            netns: true,
            checkouts: Vec::new(),
            devices: false,
        },
        ..proc.options()
    };
    let mut scanner = Scanner::new(&signatures(), options).unwrap();
    let start = Instant::now();
    let found = scanner.scan_at(start);
    assert_eq!(pids(&found), vec![100, 200]);
    let demo = find(&found, 100);
    let expected = Environ {
        vars: vec![
            (b"DEMO_PORT".to_vec(), b"1".to_vec()),
            (b"DEMO_PORT".to_vec(), b"2".to_vec()),
        ],
        cut: false,
    };
    assert_eq!(demo.environ.as_ref(), Some(&expected));
    assert_eq!(demo.cgroup.as_deref(), Some(&b"0::/user.slice\n"[..]));
    assert_eq!(demo.netns, Some(4026532999));
    // solo's read set names no variable; its other facts are not there to read
    let solo = find(&found, 200);
    assert_eq!(
        (&solo.environ, &solo.cgroup, solo.netns),
        (&None, &None, None)
    );
    // kept while the process lives
    std::fs::write(proc.path("100/environ"), b"DEMO_PORT=9\0").unwrap();
    let again = scanner.scan_at(start + secs(1));
    assert!(Arc::ptr_eq(&found[0], &again[0]));
}

#[test]
fn the_devices_a_tree_holds_are_listed_with_its_sockets() {
    use std::os::unix::fs::{symlink, MetadataExt};
    let device = |name: &str| {
        let rdev = std::fs::metadata(format!("/dev/{name}")).unwrap().rdev();
        (libc::major(rdev), libc::minor(rdev))
    };
    let ((zero_major, zero_minor), (full_major, full_minor)) = (device("zero"), device("full"));
    let proc = FakeProc::new();
    proc.spawn(100, &["demo", "serve", "/m/a"]);
    proc.spawn_child(101, 100, &["python3", "-c", "worker"]);
    proc.set_children(100, 100, &[101]);
    proc.spawn(300, &["bash"]);
    let hold = |pid: i32, fd: u32, target: &str| {
        symlink(target, proc.path(&format!("{pid}/fd/{fd}"))).unwrap();
    };
    std::fs::write(proc.path("notes"), b"a file").unwrap();
    hold(100, 3, "/dev/zero");
    hold(100, 4, "/dev/null");
    proc.add_socket(100, 5, 77);
    hold(100, 6, "/dev/pts/0");
    hold(100, 7, "/dev/gone");
    hold(100, 8, proc.path("notes").to_str().unwrap());
    hold(101, 12, "/dev/full");
    hold(300, 3, "/dev/zero");
    let options = ScanOptions {
        read_set: ReadSet {
            devices: true,
            ..ReadSet::default()
        },
        ..proc.options()
    };
    let mut scanner = Scanner::new(&signatures(), options).unwrap();
    let start = Instant::now();
    let found = scanner.scan_at(start);
    assert_eq!(pids(&found), vec![100]);
    let zero = (3, zero_major, zero_minor);
    let expected = vec![(100, vec![zero]), (101, vec![(12, full_major, full_minor)])];
    assert_eq!(found[0].devices.as_ref(), Some(&expected));
    // Read again at the tree's refresh, not before.
    hold(100, 9, "/dev/full");
    let again = scanner.scan_at(start + secs(1));
    assert!(Arc::ptr_eq(&found[0], &again[0]));
    let refreshed = scanner.scan_at(start + secs(3));
    let both = vec![zero, (9, full_major, full_minor)];
    assert_eq!(
        refreshed[0].devices.as_ref().unwrap()[0],
        (100, both.clone())
    );
    // A worker that exits takes its devices with it at once.
    proc.kill(101);
    proc.set_children(100, 100, &[]);
    let gone = scanner.scan_at(start + secs(4));
    assert_eq!(gone[0].devices, Some(vec![(100, both)]));
    // Not asked: not listed.
    let mut plain = Scanner::new(&signatures(), proc.options()).unwrap();
    assert_eq!(plain.scan_at(start)[0].devices, None);
}

#[test]
fn listen_ports_off_reads_no_sockets() {
    let proc = FakeProc::new();
    engine_tree(&proc);
    let options = ScanOptions {
        listen_ports: false,
        ..proc.options()
    };
    let mut scanner = Scanner::new(&signatures(), options).unwrap();
    let found = scanner.scan_at(Instant::now());
    assert!(found.iter().all(|p| p.listen_ports.is_empty()));
    assert_eq!(find(&found, 100).descendants, vec![110, 111, 112]);
}

#[test]
fn the_tree_is_reread_once_per_refresh_or_when_an_engine_appears() {
    let proc = FakeProc::new();
    engine_tree(&proc);
    let mut scanner = scanner(&proc);
    let t0 = Instant::now();
    scanner.scan_at(t0);

    // A new worker and a new listener, within the refresh period (2 s): not read yet.
    proc.spawn_child(113, 100, &["demo::Worker_TP2"]);
    proc.set_children(100, 100, &[110, 113]);
    proc.add_socket(113, 3, 5005);
    proc.set_tcp(
        100,
        "tcp",
        &[(5001, 8001, "0A"), (5005, 8002, "0A"), (5004, 7777, "0A")],
    );
    let found = scanner.scan_at(t0 + secs(1));
    assert_eq!(find(&found, 100).descendants, vec![110, 111, 112]);
    assert_eq!(find(&found, 100).listen_ports, vec![8001, 9001]);

    // Past the refresh period (a quiet scan: nothing forked since).
    let found = scanner.scan_at(t0 + secs(3));
    assert_eq!(find(&found, 100).descendants, vec![110, 111, 112, 113]);
    assert_eq!(find(&found, 100).listen_ports, vec![8001, 8002, 9001]);

    // A worker that exits between refreshes is dropped at once, without reading the tree, in
    // quiet scans (its directory is gone) and in listing scans (it is no longer listed).
    proc.kill(112);
    proc.set_children(110, 110, &[]);
    let found = scanner.scan_at(t0 + secs(4));
    assert_eq!(find(&found, 100).descendants, vec![110, 111, 113]);
    proc.kill(111);
    proc.set_children(100, 105, &[]);
    proc.spawn(300, &["sleep", "1"]);
    let found = scanner.scan_at(t0 + secs(4));
    assert_eq!(find(&found, 100).descendants, vec![110, 113]);

    // A new engine (here a forked copy of the server) has every tree re-read at once.
    proc.add_socket(200, 4, 6003);
    proc.set_tcp(200, "tcp", &[(6001, 8080, "0A"), (6003, 8090, "0A")]);
    proc.spawn_child(114, 100, &["demo", "serve", "/m/a"]);
    proc.set_children(100, 100, &[110, 113, 114]);
    let found = scanner.scan_at(t0 + secs(4));
    assert_eq!(find(&found, 100).descendants, vec![110, 113, 114]);
    assert_eq!(find(&found, 200).listen_ports, vec![8080, 8090]);
}

#[test]
fn an_unchanged_engine_is_the_same_record_and_any_change_is_a_new_revision() {
    let proc = FakeProc::new();
    engine_tree(&proc);
    let mut scanner = scanner(&proc);
    let t0 = Instant::now();
    let first = scanner.scan_at(t0);
    // A quiet scan, then a listing scan that re-reads both trees (past the refresh period) and
    // finds them as they were: the very same records.
    let quiet = scanner.scan_at(t0 + secs(1));
    proc.spawn(300, &["sleep", "1"]);
    let listed = scanner.scan_at(t0 + secs(3));
    for later in [&quiet, &listed] {
        assert!(first
            .iter()
            .zip(later.iter())
            .all(|(a, b)| Arc::ptr_eq(a, b)));
    }

    // A worker exits: the server gets a new revision, the other engine keeps its record, and the
    // record the caller still holds is left as it was.
    proc.kill(112);
    proc.set_children(110, 110, &[]);
    let after = scanner.scan_at(t0 + secs(4));
    assert_eq!(find(&after, 100).descendants, vec![110, 111]);
    assert_ne!(find(&after, 100).revision, first[0].revision);
    assert!(Arc::ptr_eq(&after[1], &first[1]));
    assert_eq!(first[0].descendants, vec![110, 111, 112]);
}

#[test]
fn an_engine_that_rewrites_its_argv_is_reported_anew_at_the_next_scan() {
    let proc = FakeProc::new();
    proc.spawn(1, &["/sbin/init"]);
    proc.spawn(100, &["demo", "serve", "/m/old", "--port", "8001"]);
    proc.spawn(101, &["demo", "serve", "/m/retitled"]);
    proc.spawn(102, &["solo-server", "-m", "/m/same"]);
    let mut scanner = scanner(&proc);
    let t0 = Instant::now();
    let first = scanner.scan_at(t0);
    assert_eq!(pids(&first), vec![100, 101, 102]);

    // Rewritten in place (setproctitle), keeping the argv's length, the command name and where
    // argv lies: only the bytes say it. No fork, so the scan lists nothing.
    proc.exec(100, &["demo", "serve", "/m/new", "--port", "8002"]);
    proc.exec(101, &["demo::Worker_TP0"]);
    let found = scanner.scan_at(t0 + secs(1));
    assert_eq!(pids(&found), vec![100, 102]);
    let renamed = find(&found, 100);
    assert_eq!(renamed.facts.model.as_deref(), Some(&b"/m/new"[..]));
    assert_eq!(renamed.facts.port, Some(8002));
    assert_eq!(
        renamed.argv,
        bytes(&["demo", "serve", "/m/new", "--port", "8002"])
    );
    assert_ne!(renamed.revision, first[0].revision);
    assert_eq!(renamed.start_time, first[0].start_time);
    assert!(Arc::ptr_eq(&found[1], &first[2]));
    assert_eq!(scanner.stats().reread, 2, "only the two rewritten argv");

    // 100 is compared, not re-read; 101, no longer an engine, is watched for a while as a young
    // process is, in case it execs or rewrites its argv again.
    scanner.scan_at(t0 + secs(2));
    assert_eq!(scanner.stats().reread, 1);
    scanner.scan_at(t0 + secs(7));
    assert_eq!(scanner.stats().reread, 0);
}

#[test]
fn a_huge_argv_is_compared_at_both_ends_and_read_whole_only_when_they_differ() {
    let proc = FakeProc::new();
    proc.spawn(1, &["/sbin/init"]);
    // 13,500 bytes, past both ends compared; 905 arguments, within what a scan keeps.
    let filler = vec!["--flag-padding"; 900];
    let argv = |port: &'static str| {
        [&["demo", "serve", "/m/big"][..], &filler, &["--port", port]].concat()
    };
    let stat = proc.spawn(100, &argv("8001"));
    let mut scanner = scanner(&proc);
    let t0 = Instant::now();
    let first = scanner.scan_at(t0);
    assert!(first[0].argv.len() > 900);
    scanner.scan_at(t0 + secs(1));
    assert_eq!(scanner.stats().reread, 0);

    // The last bytes change.
    proc.exec(100, &argv("8002"));
    let found = scanner.scan_at(t0 + secs(2));
    assert_eq!(found[0].facts.port, Some(8002));
    assert_eq!(scanner.stats().reread, 1);

    // It grows at the end, its old last bytes staying where they were.
    let longer = [argv("8002"), vec!["--more"]].concat();
    proc.exec(100, &longer);
    let found = scanner.scan_at(t0 + secs(3));
    assert_eq!(found[0].argv, bytes(&longer));

    // A change in the middle that keeps the length, the command name and argv's place goes
    // unseen: the price of a scan whose cost does not grow with argv ...
    let mut middle = longer.clone();
    middle[450] = "--flag-paddinx";
    proc.exec(100, &middle);
    let found = scanner.scan_at(t0 + secs(4));
    assert_eq!(found[0].argv, bytes(&longer));
    assert_eq!(scanner.stats().reread, 0);
    // ... until the command name changes, or argv moves.
    proc.set_stat(
        100,
        Stat {
            comm: "retitled",
            ..stat
        },
    );
    let found = scanner.scan_at(t0 + secs(5));
    assert_eq!(found[0].argv, bytes(&middle));
    let record = Arc::clone(&found[0]);
    proc.set_stat(
        100,
        Stat {
            comm: "retitled",
            args: (0x5000, 0x9000),
            ..stat
        },
    );
    let found = scanner.scan_at(t0 + secs(6));
    assert_eq!(scanner.stats().reread, 1);
    assert!(
        Arc::ptr_eq(&found[0], &record),
        "read again, found the same"
    );
}

#[test]
fn zombie_workers_are_left_out_of_the_tree() {
    let proc = FakeProc::new();
    engine_tree(&proc);
    // 111 exited and its parent has not reaped it: still in the children list.
    let zombie = Stat {
        state: 'Z',
        ppid: 100,
        ..Stat::default()
    };
    proc.set_stat(111, zombie);
    let mut scanner = scanner(&proc);
    let t0 = Instant::now();
    assert_eq!(scanner.scan_at(t0)[0].descendants, vec![110, 112]);
    // One that dies between refreshes is left out at the next one.
    proc.set_stat(
        112,
        Stat {
            ppid: 110,
            ..zombie
        },
    );
    let found = scanner.scan_at(t0 + secs(3));
    assert_eq!(found[0].descendants, vec![110]);
}

#[test]
fn a_pid_whose_proc_inode_changed_is_classified_again() {
    let proc = FakeProc::new();
    proc.spawn(1, &["/sbin/init"]);
    proc.spawn(100, &["sleep", "1000"]);
    let engine = proc.spawn(101, &["demo", "serve", "/m/old"]);
    proc.spawn(102, &["sleep", "1000"]);
    let mut scanner = scanner(&proc);
    let t0 = Instant::now();
    assert_eq!(pids(&scanner.scan_at(t0)), vec![101]);

    // Both pids handed to new processes while the cursor says nothing (it was set back by
    // hand, as checkpoint/restore tools do): only the new /proc/PID inode tells. 101 keeps its
    // start time, so only its argv shows it is another process.
    let settled = Stat {
        start_ticks: 1,
        ..Stat::default()
    };
    proc.replace(100, &["demo", "serve", "/m/new"], settled);
    proc.replace(101, &["sleep", "5"], engine);
    // 102 exec'd in place: same inode, outside the cursor's window, so it stays trusted.
    proc.exec(102, &["demo", "serve", "/m/exec"]);
    proc.set_cursor(proc.last_pid(), proc.forks() + 2);
    let found = scanner.scan_at(t0 + secs(1));
    assert_eq!(pids(&found), vec![100]);
    assert_eq!(
        find(&found, 100).facts.model.as_deref(),
        Some(&b"/m/new"[..])
    );
    assert_eq!(scanner.stats().reread, 2);
}

#[test]
fn pids_in_the_cursor_window_are_classified_again() {
    let proc = FakeProc::new();
    proc.spawn(1, &["/sbin/init"]);
    proc.spawn(100, &["sleep", "1000"]);
    proc.spawn(120, &["demo", "serve", "/m/kept"]);
    proc.spawn(200, &["sleep", "1000"]);
    proc.set_cursor(50, proc.forks());
    let mut scanner = scanner(&proc);
    let t0 = Instant::now();
    assert_eq!(pids(&scanner.scan_at(t0)), vec![120]);

    // The cursor moved over 100 and 120 (51..=150) but not 200: 100 and 200 got new programs
    // under the same /proc inode (a reuse whose inode procfs happened to recycle).
    proc.exec(100, &["demo", "serve", "/m/reused"]);
    proc.exec(200, &["demo", "serve", "/m/outside"]);
    proc.set_cursor(150, proc.forks() + 100);
    let found = scanner.scan_at(t0 + secs(1));
    assert_eq!(pids(&found), vec![100, 120]);
    let stats = scanner.stats();
    assert!(!stats.full_recheck);
    // 100 classified again; 120's argv compared (the same: kept)
    assert_eq!(stats.reread, 2);
}

#[test]
fn the_cursor_window_wraps_around_pid_max() {
    let proc = FakeProc::new();
    proc.spawn(1, &["/sbin/init"]);
    proc.spawn(40, &["sleep", "1000"]);
    proc.spawn(100, &["sleep", "1000"]);
    proc.spawn(32710, &["sleep", "1000"]);
    proc.set_cursor(32700, proc.forks());
    let mut scanner = scanner(&proc);
    let t0 = Instant::now();
    scanner.scan_at(t0);
    // (32700, 32768] then [1, 60]: 40 and 32710 may be reused, 100 may not.
    for pid in [40, 100, 32710] {
        proc.exec(pid, &["demo", "serve", "/m/exec"]);
    }
    proc.set_cursor(60, proc.forks() + 10);
    assert_eq!(pids(&scanner.scan_at(t0 + secs(1))), vec![40, 32710]);
}

#[test]
fn more_forks_than_pids_recheck_everything() {
    let proc = FakeProc::new();
    proc.spawn(1, &["/sbin/init"]);
    proc.spawn(100, &["sleep", "1000"]);
    let mut scanner = scanner(&proc);
    let t0 = Instant::now();
    scanner.scan_at(t0);
    assert!(
        !scanner.stats().full_recheck,
        "the first scan reads everything anyway"
    );
    proc.exec(100, &["demo", "serve", "/m/wrapped"]);
    proc.set_cursor(proc.last_pid(), proc.forks() + 32768);
    assert_eq!(pids(&scanner.scan_at(t0 + secs(1))), vec![100]);
    assert!(scanner.stats().full_recheck);
}

#[test]
fn same_pid_with_a_new_start_time_is_another_process() {
    let proc = FakeProc::new();
    proc.spawn(1, &["/sbin/init"]);
    proc.spawn(7, &["supervisor", "--all"]);
    let old = proc.spawn(100, &["demo", "serve", "/m/a"]);
    let mut scanner = scanner(&proc);
    let t0 = Instant::now();
    let before = scanner.scan_at(t0);
    assert_eq!(before[0].parent_argv, bytes(&["/sbin/init"]));

    // Same argv, same inode, no cursor evidence; only the start time differs.
    let new = Stat {
        start_ticks: old.start_ticks + 50,
        ppid: 7,
        ..old
    };
    proc.set_stat(100, new);
    proc.set_cursor(proc.last_pid(), proc.forks() + 1);
    let after = scanner.scan_at(t0 + secs(1));
    assert_eq!(pids(&after), vec![100]);
    let expected = new.start_ticks as f64 / clock_ticks() + BOOT_TIME as f64;
    assert!((after[0].start_time - expected).abs() < 1e-6);
    assert_eq!(after[0].ppid, 7);
    assert_eq!(after[0].parent_argv, bytes(&["supervisor", "--all"]));
    assert_eq!(scanner.stats().new, 1);
}

#[test]
fn an_engine_that_changes_parent_has_its_parent_argv_read_again() {
    let proc = FakeProc::new();
    proc.spawn(1, &["/sbin/init"]);
    proc.spawn(7, &["supervisor"]);
    let stat = proc.spawn_child(100, 7, &["demo", "serve", "/m/a"]);
    let mut scanner = scanner(&proc);
    let t0 = Instant::now();
    assert_eq!(scanner.scan_at(t0)[0].parent_argv, bytes(&["supervisor"]));
    // The supervisor exited: the engine is re-parented to init.
    proc.kill(7);
    proc.set_stat(100, Stat { ppid: 1, ..stat });
    let found = scanner.scan_at(t0 + secs(1));
    assert_eq!(found[0].ppid, 1);
    assert_eq!(found[0].parent_argv, bytes(&["/sbin/init"]));
    assert_eq!(scanner.stats().reread, 0, "the argv was not read again");
}

#[test]
fn zombie_engines_are_not_reported() {
    let proc = FakeProc::new();
    proc.spawn(1, &["/sbin/init"]);
    let zombie = proc.spawn(100, &["demo", "serve", "/m/z"]);
    proc.set_stat(
        100,
        Stat {
            state: 'Z',
            ..zombie
        },
    );
    let live = proc.spawn(101, &["solo-server", "-m", "/m/l"]);
    let mut scanner = scanner(&proc);
    let t0 = Instant::now();
    assert_eq!(pids(&scanner.scan_at(t0)), vec![101]);
    // it dies: a zombie until its parent reaps it
    proc.set_stat(101, Stat { state: 'Z', ..live });
    assert!(scanner.scan_at(t0 + secs(1)).is_empty());
    proc.set_stat(101, Stat { state: 'X', ..live });
    proc.set_cursor(proc.last_pid(), proc.forks() + 1);
    assert!(scanner.scan_at(t0 + secs(2)).is_empty());
    assert_eq!(scanner.known_len(), 3);
}

#[test]
fn malformed_and_missing_files_never_panic() {
    let proc = FakeProc::new();
    proc.spawn(1, &["/sbin/init"]);
    // cmdline is a directory
    proc.spawn(100, &["sleep", "1"]);
    std::fs::remove_file(proc.path("100/cmdline")).unwrap();
    std::fs::create_dir(proc.path("100/cmdline")).unwrap();
    // an engine whose stat is junk, and one without stat or exe
    proc.spawn(101, &["demo", "serve", "/m/junk-stat"]);
    std::fs::write(proc.path("101/stat"), b"101 (demo\xff) \x00\x01").unwrap();
    proc.spawn(102, &["demo", "serve", "/m/no-stat"]);
    std::fs::remove_file(proc.path("102/stat")).unwrap();
    // an engine with junk everywhere else
    proc.spawn(103, &["demo", "serve", "/m/junk"]);
    std::fs::remove_file(proc.path("103/exe")).unwrap();
    std::fs::write(
        proc.path("103/task/103/children"),
        b"\xff\xfe 12x -5 \0 99999999999",
    )
    .unwrap();
    std::fs::write(proc.path("103/fd/7"), b"a regular file").unwrap();
    std::os::unix::fs::symlink("socket:[", proc.path("103/fd/8")).unwrap();
    std::os::unix::fs::symlink("socket:[5001]", proc.path("103/fd/9")).unwrap();
    std::fs::write(
        proc.path("103/net/tcp"),
        b"\xff\n 0: x:y z 0A\n 1: 0100007F:1F90 0 0A 0 0 0 0 0 5001\n 2: 0:FFFFF 0 0A 0 0 0 0 0 5001\n 3: :1F91 0 0A 0 0 0 0 0 5001\n\n",
    )
    .unwrap();
    std::fs::create_dir(proc.path("103/net/tcp6")).unwrap();
    // an engine without task/, fd/ or net/
    proc.spawn(104, &["demo", "serve", "/m/bare"]);
    for dir in ["task", "fd", "net"] {
        std::fs::remove_dir_all(proc.path(&format!("104/{dir}"))).unwrap();
    }
    // entries that are not process directories
    std::fs::write(proc.path("555"), b"not a directory").unwrap();
    std::fs::create_dir(proc.path("123abc")).unwrap();
    std::os::unix::fs::symlink("1", proc.path("self")).unwrap();
    std::os::unix::fs::symlink("/nonexistent", proc.path("556")).unwrap();

    let mut scanner = scanner(&proc);
    let t0 = Instant::now();
    let found = scanner.scan_at(t0);
    assert_eq!(pids(&found), vec![103, 104]);
    let junk = find(&found, 103);
    assert_eq!(junk.exe, None);
    assert!(junk.descendants.is_empty());
    // a port beyond 16 bits, an address that is not 8 or 32 hex digits: not rows
    assert_eq!(junk.listen_ports, vec![0x1F90], "the one well-formed row");
    // 100's, 101's and 102's reads failed as if they had exited, and so did 555's and 556's
    assert_eq!(scanner.stats().vanished, 5);
    // a later listing tries them again
    proc.spawn(300, &["sleep", "1"]);
    assert_eq!(pids(&scanner.scan_at(t0 + secs(1))), vec![103, 104]);
}

#[test]
fn missing_kernel_counters_make_every_listing_a_full_recheck() {
    let proc = FakeProc::new();
    proc.spawn(1, &["/sbin/init"]);
    proc.spawn(100, &["sleep", "1000"]);
    std::fs::remove_file(proc.path("sys/kernel/ns_last_pid")).unwrap();
    std::fs::write(proc.path("sys/kernel/pid_max"), b"junk").unwrap();
    let mut scanner = scanner(&proc);
    let t0 = Instant::now();
    assert!(scanner.scan_at(t0).is_empty());
    // Without a cursor nothing bounds pid reuse: every known process is read again.
    std::fs::write(proc.path("100/cmdline"), b"demo\0serve\0/m/a\0").unwrap();
    assert_eq!(pids(&scanner.scan_at(t0 + secs(1))), vec![100]);
    let stats = scanner.stats();
    assert_eq!(stats.reread, 2);
    // Regression: the first scan was taken to be "the scan without a previous cursor", so with
    // no cursor at all every scan was a first one and never reported its full recheck.
    assert!(stats.full_recheck);
}

/// Regression: per-process paths were built from the root's `display()`, which replaces
/// non-UTF-8 bytes, so such a root found the listing but none of the processes' files.
#[test]
fn a_proc_root_that_is_not_utf8_is_honoured() {
    use std::os::unix::ffi::OsStrExt;
    let proc = FakeProc::new();
    proc.spawn(100, &["demo", "serve", "/m/a"]);
    let root = proc.root().join(std::ffi::OsStr::from_bytes(b"proc\xff"));
    std::fs::create_dir(&root).unwrap();
    for entry in ["100", "stat", "sys"] {
        std::fs::rename(proc.path(entry), root.join(entry)).unwrap();
    }
    let options = ScanOptions {
        proc_root: root,
        ..proc.options()
    };
    let mut scanner = Scanner::new(&signatures(), options).unwrap();
    let found = scanner.scan();
    assert_eq!(pids(&found), vec![100]);
    assert_eq!(found[0].exe.as_deref(), Some(&b"/usr/bin/demo"[..]));
}

#[test]
fn a_missing_proc_root_scans_nothing() {
    let proc = FakeProc::new();
    let options = ScanOptions {
        proc_root: proc.path("absent"),
        ..proc.options()
    };
    let mut scanner = Scanner::new(&signatures(), options).unwrap();
    assert!(scanner.scan().is_empty());
    assert!(scanner.scan().is_empty());
    assert_eq!(scanner.known_len(), 0);
}

/// Runs `f` on a thread without the capabilities that let root read any file
/// (`CAP_DAC_OVERRIDE`, `CAP_DAC_READ_SEARCH`), so that a mode-000 file is unreadable as another
/// user's files are under `hidepid`. Capabilities belong to a thread on Linux: the rest of the
/// test process keeps its own.
#[cfg(target_os = "linux")]
fn without_read_override<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut header = Header {
                version: VERSION_3,
                pid: 0,
            };
            let mut data = [Data::default(); 2];
            // SAFETY: `header` and the two `data` words are the layout capget/capset take for
            // version 3; pid 0 is the calling thread.
            let got = unsafe {
                libc::syscall(
                    libc::SYS_capget,
                    &mut header as *mut Header,
                    data.as_mut_ptr(),
                )
            };
            assert_eq!(got, 0, "capget");
            for word in &mut data {
                word.effective = 0;
            }
            // SAFETY: as above; lowering the effective set needs no privilege.
            let set = unsafe {
                libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr())
            };
            assert_eq!(set, 0, "capset");
            f()
        })
        .join()
        .expect("scanner thread")
    })
}

#[cfg(target_os = "linux")]
fn make_unreadable(proc: &FakeProc, file: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(proc.path(file), std::fs::Permissions::from_mode(0o000)).unwrap();
}

#[cfg(target_os = "linux")]
#[test]
fn unreadable_processes_are_counted_and_never_reported() {
    let proc = FakeProc::new();
    proc.spawn(1, &["/sbin/init"]);
    proc.spawn(100, &["demo", "serve", "/m/hidden"]);
    make_unreadable(&proc, "100/cmdline");
    proc.spawn(101, &["demo", "serve", "/m/hidden-stat"]);
    make_unreadable(&proc, "101/stat");
    proc.spawn(102, &["demo", "serve", "/m/visible"]);
    proc.add_socket(102, 3, 7001);
    proc.set_tcp(102, "tcp", &[(7001, 8001, "0A")]);
    for file in ["102/task/102/children", "102/net/tcp"] {
        make_unreadable(&proc, file);
    }
    proc.spawn(103, &["sh", "-c", "sleep 1; exec demo serve /m/w"]);
    let mut scanner = scanner(&proc);
    let t0 = Instant::now();
    without_read_override(|| {
        let found = scanner.scan_at(t0);
        assert_eq!(pids(&found), vec![102]);
        assert!(found[0].descendants.is_empty() && found[0].listen_ports.is_empty());
        let stats = scanner.stats();
        // 101's stat is unreadable: it cannot be confirmed as a live engine, so it is left for
        // the next listing, like a process that exited while being read
        assert_eq!((stats.unreadable, stats.vanished), (1, 1));
        // 102 is reported without the ports its unreadable socket table would have shown
        assert_eq!(stats.restricted, 1);

        // A watched wrapper whose argv turns unreadable, in a scan that lists nothing (no
        // fork): 100 is still counted with it.
        make_unreadable(&proc, "103/cmdline");
        assert_eq!(pids(&scanner.scan_at(t0 + secs(1))), vec![102]);
        assert_eq!(
            (scanner.stats().unreadable, scanner.stats().restricted),
            (2, 1)
        );
        // An unreadable process is not read again (nothing would change) but is counted.
        proc.spawn(300, &["sleep", "1"]);
        assert_eq!(pids(&scanner.scan_at(t0 + secs(2))), vec![102]);
        assert_eq!(scanner.stats().unreadable, 2);

        // The engine's pid may have been reused (the cursor wrapped over it), and its argv can
        // no longer be read: unreadable, not gone. The other unreadable pids are tried again.
        make_unreadable(&proc, "102/cmdline");
        proc.set_cursor(110, proc.forks() + 1);
        assert!(scanner.scan_at(t0 + secs(3)).is_empty());
        let stats = scanner.stats();
        assert_eq!((stats.unreadable, stats.vanished), (3, 1));
    });
}

#[cfg(target_os = "linux")]
#[test]
fn engines_whose_sockets_cannot_be_read_are_counted_as_restricted() {
    let proc = FakeProc::new();
    engine_tree(&proc);
    make_unreadable(&proc, "200/fd");
    let mut scanner = scanner(&proc);
    without_read_override(|| {
        let found = scanner.scan_at(Instant::now());
        assert_eq!(pids(&found), vec![100, 200]);
        assert!(find(&found, 200).listen_ports.is_empty());
        assert_eq!(find(&found, 100).listen_ports, vec![8001, 9001]);
        assert_eq!(
            (scanner.stats().restricted, scanner.stats().unreadable),
            (1, 0)
        );
    });
    // Without reading sockets nothing is missing.
    let options = ScanOptions {
        listen_ports: false,
        ..proc.options()
    };
    let mut scanner = Scanner::new(&signatures(), options).unwrap();
    without_read_override(|| {
        scanner.scan_at(Instant::now());
        assert_eq!(scanner.stats().restricted, 0);
    });
}

/// Answers the scanner's reads of `stat` from a helper thread with `texts`, one per read, so two
/// reads within one scan can see different fork counts. Each read gets its own FIFO: the next
/// one is renamed into place before the current one is closed, so no read can see another's
/// text. `before(i)` runs once read `i` has opened the file, that is, once the scanner is past
/// everything it did before that read. Afterwards `stat` is a regular file holding the last
/// text. Returns `run`'s result and how many reads were answered; a scanner that reads `stat`
/// fewer times than expected makes the count short instead of hanging.
#[cfg(target_os = "linux")]
fn with_stat_feed<R>(
    proc: &FakeProc,
    texts: &[String],
    before: impl FnMut(usize) + Send,
    run: impl FnOnce() -> R,
) -> (R, usize) {
    use std::ffi::CString;
    use std::io::Write;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

    let stat = proc.path("stat");
    let next = proc.path("stat.next");
    let mkfifo = |path: &Path| {
        let c_path = CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "mkfifo");
    };
    let last = texts.last().expect("at least one text");
    let settle = || {
        std::fs::write(&next, last).unwrap();
        std::fs::rename(&next, &stat).unwrap();
    };
    mkfifo(&next);
    std::fs::rename(&next, &stat).unwrap();
    let stop = AtomicBool::new(false);
    let mut before = before;
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            for (i, text) in texts.iter().enumerate() {
                // Blocks until the scanner (or `stop` below) opens the FIFO for reading.
                let mut fifo = std::fs::OpenOptions::new().write(true).open(&stat).unwrap();
                if stop.load(SeqCst) {
                    settle();
                    return i;
                }
                before(i);
                fifo.write_all(text.as_bytes()).unwrap();
                if i + 1 < texts.len() {
                    mkfifo(&next);
                    std::fs::rename(&next, &stat).unwrap();
                } else {
                    settle();
                }
            }
            texts.len()
        });
        let result = run();
        stop.store(true, SeqCst);
        // Releases a writer still waiting for a reader; a regular `stat` is opened harmlessly.
        drop(
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&stat),
        );
        (result, writer.join().expect("stat writer"))
    })
}

/// Regression: the check that skips the listing compared the fork count with the one read
/// *after* the previous listing, so a process forked while /proc was being listed (counted, but
/// not listed) stayed unseen until some other process forked.
#[cfg(target_os = "linux")]
#[test]
fn a_process_forked_during_the_listing_is_found_by_the_next_scan() {
    let proc = FakeProc::new();
    proc.spawn(1, &["/sbin/init"]);
    proc.spawn(100, &["demo", "serve", "/m/a"]);
    let mut scanner = scanner(&proc);
    let t0 = Instant::now();
    assert_eq!(pids(&scanner.scan_at(t0)), vec![100]);

    // One fork before the next scan starts, one while it lists /proc (pid 200).
    let forks = proc.forks();
    proc.set_cursor(200, forks + 2);
    let texts = [
        FakeProc::stat_text(forks + 1),
        FakeProc::stat_text(forks + 2),
    ];
    let engine = Stat {
        start_ticks: 90_000,
        ..Stat::default()
    };
    let (found, reads) = with_stat_feed(
        &proc,
        &texts,
        |read| {
            if read == 1 {
                proc.create(200, &["solo-server", "-m", "/m/late"], engine);
            }
        },
        || scanner.scan_at(t0 + secs(1)),
    );
    assert_eq!(reads, 2, "the scan reads stat before and after listing");
    assert_eq!(pids(&found), vec![100], "200 appeared after the listing");

    // Nothing forked since the listing ended, but 200 was forked after it began.
    assert_eq!(pids(&scanner.scan_at(t0 + secs(2))), vec![100, 200]);
}

/// A scanner in event-driven mode after its first (listing) scan.
fn event_scanner(proc: &FakeProc) -> Scanner {
    let mut scanner = scanner(proc);
    scanner.set_event_driven();
    scanner.scan();
    scanner
}

#[test]
fn events_find_an_engine_exec_by_a_forked_shell_without_listing() {
    let proc = FakeProc::new();
    proc.spawn(10, &["bash", "-c", "run"]);
    let mut scanner = event_scanner(&proc);
    // A fork: the child still runs its parent's program.
    proc.spawn_child(11, 10, &["bash", "-c", "run"]);
    // Another process appears that no event names: event-driven ticks do not list /proc.
    proc.spawn(50, &["demo", "serve", "/m/unseen"]);
    assert!(!scanner.apply_events(&[(11, Change::Forked)]));
    assert!(pids(&scanner.scan_after_events(true)).is_empty());
    proc.exec(11, &["demo", "serve", "/m/a", "--port", "8001"]);
    assert!(scanner.apply_events(&[(11, Change::Exec)]));
    let found = scanner.scan_after_events(true);
    assert_eq!(pids(&found), vec![11]);
    assert_eq!(find(&found, 11).facts.port, Some(8001));
    assert_eq!(scanner.stats().new, 0, "11 was known since its fork");
    // A listing scan (the safety net) finds what no event named.
    assert_eq!(pids(&scanner.scan()), vec![11, 50]);
}

#[test]
fn an_exit_event_forgets_the_process_and_says_an_engine_is_gone() {
    let proc = FakeProc::new();
    proc.spawn(20, &["demo", "serve", "/m/a"]);
    proc.spawn(21, &["sleep", "100"]);
    let mut scanner = event_scanner(&proc);
    let known = scanner.known_len();
    proc.kill(21);
    assert!(!scanner.apply_events(&[(21, Change::Exited)]));
    assert_eq!(scanner.known_len(), known - 1);
    proc.kill(20);
    assert!(scanner.apply_events(&[(20, Change::Exited)]));
    assert!(scanner.scan_after_events(true).is_empty());
    assert_eq!(scanner.stats().vanished, 2);
}

#[test]
fn an_exit_event_of_a_folded_worker_says_the_engine_changed() {
    let proc = FakeProc::new();
    proc.spawn(20, &["demo", "serve", "/m/a"]);
    proc.spawn_child(22, 20, &["demo::EngineCore"]);
    proc.set_children(20, 20, &[22]);
    proc.spawn(23, &["sleep", "100"]);
    let mut scanner = event_scanner(&proc);
    assert_eq!(
        find(&scanner.scan_after_events(true), 20).descendants,
        vec![22]
    );
    proc.kill(23);
    assert!(!scanner.apply_events(&[(23, Change::Exited)]));
    proc.kill(22);
    assert!(scanner.apply_events(&[(22, Change::Exited)]));
}

#[test]
fn events_keep_their_order_an_exit_then_a_reused_pid() {
    let proc = FakeProc::new();
    proc.spawn(30, &["demo", "serve", "/m/a"]);
    let mut scanner = event_scanner(&proc);
    let before = scanner.scan_after_events(true);
    proc.replace(
        30,
        &["demo", "serve", "/m/b"],
        Stat {
            start_ticks: 9_999,
            ..Stat::default()
        },
    );
    assert!(scanner.apply_events(&[(30, Change::Exited), (30, Change::Forked)]));
    let after = scanner.scan_after_events(true);
    assert_eq!(find(&after, 30).facts.model.as_deref(), Some(&b"/m/b"[..]));
    assert_ne!(find(&before, 30).revision, find(&after, 30).revision);
}

#[test]
fn a_comm_change_rereads_the_process_and_a_retitled_engine_changes() {
    let proc = FakeProc::new();
    proc.spawn(40, &["python3", "worker.py"]);
    let mut scanner = event_scanner(&proc);
    // setproctitle: the argv rewritten in place, the comm renamed, the stat left as it was
    proc.exec(40, &["solo-server", "-m", "/m/c.gguf"]);
    assert!(scanner.apply_events(&[(40, Change::Comm)]));
    assert_eq!(pids(&scanner.scan_after_events(true)), vec![40]);
}

#[test]
fn in_event_mode_wrappers_and_young_processes_are_not_watched() {
    let proc = FakeProc::new();
    let mut scanner = event_scanner(&proc);
    proc.spawn(60, &["sh", "-c", "sleep 1; demo serve /m/a"]);
    proc.spawn(61, &["sleep", "1"]);
    scanner.apply_events(&[(60, Change::Forked), (61, Change::Forked)]);
    scanner.scan_after_events(true);
    // The next tick reads neither (an exec would be reported).
    scanner.scan_after_events(true);
    assert_eq!(scanner.stats().reread, 0);
    assert_eq!(scanner.stats().new, 0);
}

#[test]
fn events_for_a_process_already_gone_cost_nothing_and_report_nothing() {
    let proc = FakeProc::new();
    let mut scanner = event_scanner(&proc);
    assert!(!scanner.apply_events(&[(70, Change::Forked), (70, Change::Exec)]));
    assert!(scanner.scan_after_events(true).is_empty());
    assert_eq!(scanner.known_len(), 0);
}

#[test]
fn back_to_polling_starts_cold_and_watches_wrappers_again() {
    let proc = FakeProc::new();
    proc.spawn(80, &["sh", "-c", "sleep 1; demo serve /m/a"]);
    let mut scanner = event_scanner(&proc);
    scanner.scan_after_events(true);
    assert_eq!(
        scanner.stats().reread,
        0,
        "not watched while events tell of execs"
    );
    scanner.set_polling();
    scanner.scan();
    assert_eq!(scanner.stats().new, 1, "a cold scan");
    // polling again: the wrapper is re-read on every scan until it execs
    proc.exec(80, &["demo", "serve", "/m/a"]);
    assert_eq!(pids(&scanner.scan()), vec![80]);
}

#[test]
fn an_early_wake_reports_the_engines_without_rechecking_them() {
    let proc = FakeProc::new();
    proc.spawn(90, &["demo", "serve", "/m/a"]);
    let mut scanner = event_scanner(&proc);
    // rewritten in place: only a recheck reads it
    proc.exec(90, &["demo", "serve", "/m/b"]);
    let early = scanner.scan_after_events(false);
    assert_eq!(find(&early, 90).facts.model.as_deref(), Some(&b"/m/a"[..]));
    let tick = scanner.scan_after_events(true);
    assert_eq!(find(&tick, 90).facts.model.as_deref(), Some(&b"/m/b"[..]));
}

#[test]
fn in_event_mode_a_new_engine_refreshes_only_the_trees_above_it() {
    let proc = FakeProc::new();
    proc.spawn(100, &["demo", "serve", "/m/a"]);
    proc.spawn(200, &["demo", "serve", "/m/b"]);
    let mut scanner = event_scanner(&proc);
    let before = scanner.scan_after_events(true);
    // 100 forks a worker that keeps its argv; 200 gets a child nothing reports yet
    proc.spawn_child(101, 100, &["demo", "serve", "/m/a"]);
    proc.set_children(100, 100, &[101]);
    proc.spawn_child(201, 200, &["sleep", "1"]);
    proc.set_children(200, 200, &[201]);
    assert!(scanner.apply_events(&[(101, Change::Forked), (201, Change::Forked)]));
    let after = scanner.scan_after_events(false);
    assert_eq!(find(&after, 100).descendants, vec![101], "folded at once");
    assert_eq!(
        find(&after, 200).revision,
        find(&before, 200).revision,
        "not re-read"
    );
    assert!(find(&after, 200).descendants.is_empty());
}

#[test]
fn near_cursor_is_cyclic_and_bounded() {
    use super::near_cursor;
    assert!(near_cursor(1000, 1000, 32768));
    assert!(near_cursor(32768 - 3000, 1000, 32768)); // behind, across the wrap
    assert!(near_cursor(1003, 1000, 32768)); // handed out during the listing
    assert!(near_cursor(32767, 2, 32768)); // just before the wrap
    assert!(!near_cursor(20000, 1000, 32768));
    assert!(!near_cursor(1000 + 5000, 1000, 32768));
}

#[test]
fn an_argv_beyond_the_cap_is_kept_only_to_it_and_marked_cut() {
    use crate::procfs::{ARGV_CUT, MAX_ARGV_ARGS};
    let proc = FakeProc::new();
    proc.spawn(1, &["/sbin/init"]);
    let huge = [
        &["demo", "serve", "/m/first"][..],
        &vec!["x"; 3000],
        &["--port", "8009"],
    ]
    .concat();
    proc.spawn(100, &huge);
    let mut scanner = scanner(&proc);
    let found = scanner.scan_at(Instant::now());
    let kept = &found[0].argv;
    assert_eq!(kept.len(), MAX_ARGV_ARGS + 1);
    assert_eq!(kept.last().map(Vec::as_slice), Some(ARGV_CUT));
    assert_eq!(kept[..MAX_ARGV_ARGS], bytes(&huge[..MAX_ARGV_ARGS])[..]);
    // The port sits beyond the cap: not examined, so not known.
    assert_eq!(found[0].facts.port, None);
}

#[test]
fn a_program_that_needs_a_checkout_is_looked_for_in_it_once_per_record() {
    let proc = FakeProc::new();
    let files = tempfile::TempDir::new().unwrap();
    std::fs::create_dir_all(files.path().join("co/lib")).unwrap();
    std::fs::write(files.path().join("co/marker.py"), "").unwrap();
    std::fs::write(files.path().join("co/lib/x.py"), "").unwrap();
    std::fs::create_dir(files.path().join("empty")).unwrap();
    proc.spawn(1, &["/sbin/init"]);
    let placed = [
        (100, &["demo", "serve", "/m/a"][..], "co"),
        (101, &["demo", "serve", "/m/b"], "empty"),
        (102, &["/co/demo", "serve", "/m/c"], "empty"),
        (103, &["../co/demo", "serve", "/m/d"], "co"),
        (104, &["python3", "-u", "demo", "serve", "/m/e"], "co"),
        (200, &["solo-server", "-m", "/m/f"], "empty"),
    ];
    // SAFETY: a plain query.
    let uid = unsafe { libc::geteuid() };
    for (pid, argv, cwd) in placed {
        proc.spawn(pid, argv);
        let ids = format!("{uid}\t{uid}\t{uid}\t{uid}");
        let status = format!("Name:\tdemo\nUid:\t{ids}\nGid:\t{ids}\nGroups:\t\n");
        std::fs::write(proc.path(&format!("{pid}/status")), status).unwrap();
        std::os::unix::fs::symlink(files.path(), proc.path(&format!("{pid}/root"))).unwrap();
        let cwd = files.path().join(cwd);
        std::os::unix::fs::symlink(cwd, proc.path(&format!("{pid}/cwd"))).unwrap();
    }
    let demo: FxHashMap<Vec<u8>, Vec<Vec<u8>>> =
        [(b"demo".to_vec(), bytes(&["marker.py", "lib/x.py"]))]
            .into_iter()
            .collect();
    let options = ScanOptions {
        read_set: ReadSet {
            checkouts: vec![demo, FxHashMap::default()],
            ..ReadSet::default()
        },
        ..proc.options()
    };
    let mut scanner = Scanner::new(&signatures(), options).unwrap();
    let start = Instant::now();
    let found = scanner.scan_at(start);
    let seen = |found: &[Arc<EngineProc>]| -> Vec<(i32, Option<bool>)> {
        found.iter().map(|p| (p.pid, p.in_checkout)).collect()
    };
    assert_eq!(
        seen(&found),
        vec![
            (100, Some(true)),
            (101, Some(false)),
            // an absolute program path is looked up inside the process's root
            (102, Some(true)),
            // a directory with `..` is never looked into
            (103, Some(false)),
            // the script an interpreter runs is the program
            (104, Some(true)),
            // a program that needs no checkout
            (200, None),
        ]
    );
    // Kept while the process lives, as everything the read set asks.
    std::fs::remove_file(files.path().join("co/marker.py")).unwrap();
    let again = scanner.scan_at(start + secs(1));
    assert_eq!(seen(&again), seen(&found));
}
