//! The native scanner behind one type, whatever the process source: the incremental `/proc`
//! reader on Linux, the `sysinfo` crate elsewhere. The choice lives here, in plain Rust, so that
//! `cargo test` covers it and the PyO3 bindings only convert types.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::matcher::CompiledSignatures;
use crate::proc_events::Unavailable;
#[cfg(target_os = "linux")]
use crate::proc_events::{Hints, Listener};
use crate::scan::{EngineProc, ScanOptions, ScanStats, Scanner};
use crate::scan_sysinfo::SysinfoScanner;
use crate::signature::Signature;

/// Where the processes are read from.
#[derive(Debug)]
enum Source {
    Procfs(Box<Scanner>),
    Sysinfo(Box<SysinfoScanner>),
}

/// The kernel's process events, driving a procfs scanner (see [`ProcessScanner::wait`]).
#[cfg(target_os = "linux")]
#[derive(Debug)]
struct Events {
    listener: Listener,
    hints: Hints,
    /// How often `/proc` is listed whatever the events say: the safety net.
    full_every: Duration,
    last_full: Instant,
    /// When the engines are next re-checked: kept across early wake-ups, so a host where engines
    /// start all the time still gets its re-checks.
    tick_due: Option<Instant>,
}

/// An engine scanner over the source named at construction. Keep one per polling loop.
#[derive(Debug)]
pub struct ProcessScanner {
    source: Source,
    /// When the scanner was made: the origin of [`ProcessScanner::scan_at`]'s clock.
    origin: Instant,
    #[cfg(target_os = "linux")]
    events: Option<Events>,
}

/// What [`ProcessScanner::wait`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woke {
    /// Slept, then scanned (no events).
    Polled,
    /// Events changed an engine (one started or exited) before the timeout.
    Events,
    /// The timeout passed: the engines were re-checked.
    Tick,
    /// Events were lost: `/proc` was listed (also the periodic safety net).
    Rescan,
    /// The subscription failed: `/proc` was listed, and from now on the scanner polls.
    Fallback,
}

/// The source used when none is named: procfs only exists (as the scanner reads it) on Linux.
pub const DEFAULT_SOURCE: &str = if cfg!(target_os = "linux") {
    "procfs"
} else {
    "sysinfo"
};

impl ProcessScanner {
    /// `source` is `"procfs"` or `"sysinfo"`, `None` for [`DEFAULT_SOURCE`]. The `sysinfo`
    /// source reads the live host and ignores `options` but its read set's checkouts (it has no
    /// exec watching, pid cursor or socket reading to tune).
    pub fn new(
        signatures: &[Signature],
        options: ScanOptions,
        source: Option<&str>,
    ) -> Result<Self, String> {
        Self::compiled(CompiledSignatures::new(signatures)?, options, source)
    }

    /// The same, of signatures already compiled.
    pub fn compiled(
        compiled: Arc<CompiledSignatures>,
        options: ScanOptions,
        source: Option<&str>,
    ) -> Result<Self, String> {
        let source = match source.unwrap_or(DEFAULT_SOURCE) {
            "procfs" => Source::Procfs(Box::new(Scanner::compiled(compiled, options))),
            "sysinfo" => Source::Sysinfo(Box::new(SysinfoScanner::compiled(
                compiled,
                options.read_set,
            ))),
            other => return Err(format!("source: {other:?} is not 'procfs' or 'sysinfo'")),
        };
        Ok(ProcessScanner {
            source,
            origin: Instant::now(),
            #[cfg(target_os = "linux")]
            events: None,
        })
    }

    /// Subscribes to the kernel's process events, waiting up to `ack_timeout` for the reply;
    /// from then on [`ProcessScanner::wait`] reads `/proc` only where events point, and lists it
    /// at least every `full_every`. Scan once after subscribing (processes that existed before
    /// it are known from that listing). Only the procfs source, on Linux, can.
    pub fn subscribe_events(
        &mut self,
        ack_timeout: Duration,
        full_every: Duration,
    ) -> Result<(), Unavailable> {
        #[cfg(target_os = "linux")]
        if let Source::Procfs(scanner) = &mut self.source {
            let listener = Listener::subscribe(ack_timeout)?;
            scanner.set_event_driven();
            self.events = Some(Events {
                listener,
                hints: Hints::default(),
                full_every,
                // the caller scans once after subscribing: what existed before it
                last_full: Instant::now(),
                tick_due: None,
            });
            return Ok(());
        }
        let _ = (ack_timeout, full_every);
        Err(Unavailable::Unsupported)
    }

    /// Whether process events drive the scans.
    pub fn event_driven(&self) -> bool {
        #[cfg(target_os = "linux")]
        return self.events.is_some();
        #[cfg(not(target_os = "linux"))]
        false
    }

    /// The engines after waiting up to `timeout`. Polling: sleeps, then scans. Event-driven:
    /// returns as soon as an event changed an engine (an engine's exec is seen within
    /// milliseconds), else at the timeout, after re-checking the engines.
    pub fn wait(&mut self, timeout: Duration) -> (Vec<Arc<EngineProc>>, Woke) {
        #[cfg(target_os = "linux")]
        if let (Some(events), Source::Procfs(scanner)) = (&mut self.events, &mut self.source) {
            return match drive(events, scanner, timeout) {
                Ok(Woke::Rescan) => (scanner.scan(), Woke::Rescan),
                Ok(woke) => (scanner.scan_after_events(woke == Woke::Tick), woke),
                Err(_) => {
                    // The socket failed: poll from now on, starting cold so that execs are
                    // watched again.
                    self.events = None;
                    scanner.set_polling();
                    (scanner.scan(), Woke::Fallback)
                }
            };
        }
        std::thread::sleep(timeout);
        (self.scan(), Woke::Polled)
    }

    /// Every engine server now running, by pid. Never fails; see [`ProcessScanner::stats`]. An
    /// engine unchanged since the previous scan comes back as the same record (same revision).
    pub fn scan(&mut self) -> Vec<Arc<EngineProc>> {
        match &mut self.source {
            Source::Procfs(s) => s.scan(),
            Source::Sysinfo(s) => s.scan(),
        }
    }

    /// `scan` as if `elapsed` had passed since the scanner was made (`scan` is `scan_at` of the
    /// time since then): the clock the young and refresh windows are measured on, for a fixture
    /// host, whose files cannot say what time it is. The sysinfo source has no such windows.
    pub fn scan_at(&mut self, elapsed: Duration) -> Vec<Arc<EngineProc>> {
        match &mut self.source {
            Source::Procfs(s) => s.scan_at(self.origin + elapsed),
            Source::Sysinfo(s) => s.scan(),
        }
    }

    /// Counts of the last scan.
    pub fn stats(&self) -> ScanStats {
        match &self.source {
            Source::Procfs(s) => s.stats(),
            Source::Sysinfo(s) => s.stats(),
        }
    }

    /// The boot time the start times are computed from (see `Scanner::boot_time`); `None` for
    /// the sysinfo source, whose start times are whole epoch seconds with no ticks behind them.
    pub fn boot_time(&self) -> Option<f64> {
        match &self.source {
            Source::Procfs(s) => Some(s.boot_time()),
            Source::Sysinfo(_) => None,
        }
    }

    /// The procfs scanner, to be given process events by the caller rather than the kernel (a
    /// fixture host's, which no file can hold); `None` for the sysinfo source, which has no
    /// event mode.
    pub fn procfs(&mut self) -> Option<&mut Scanner> {
        match &mut self.source {
            Source::Procfs(s) => Some(s),
            Source::Sysinfo(_) => None,
        }
    }

    /// Number of processes the scanner currently remembers.
    pub fn known_len(&self) -> usize {
        match &self.source {
            Source::Procfs(s) => s.known_len(),
            Source::Sysinfo(s) => s.known_len(),
        }
    }
}

/// Reads events until one changes an engine, events are lost, or the engines' re-check comes
/// due (within `timeout`); the events are applied to `scanner` as they come. `Err`: the socket
/// failed (an errno).
#[cfg(target_os = "linux")]
fn drive(events: &mut Events, scanner: &mut Scanner, timeout: Duration) -> Result<Woke, i32> {
    let start = Instant::now();
    let deadline = (*events.tick_due.get_or_insert(start + timeout)).min(start + timeout);
    loop {
        let now = Instant::now();
        if now.duration_since(events.last_full) >= events.full_every {
            events.last_full = now;
            events.hints.clear();
            events.tick_due = None;
            return Ok(Woke::Rescan);
        }
        let left = deadline.saturating_duration_since(now);
        if left.is_zero() {
            events.tick_due = None;
            return Ok(Woke::Tick);
        }
        events.listener.read(left, &mut events.hints)?;
        if events.hints.lost {
            // Never run on after losing events: only a listing can tell what happened.
            events.hints.clear();
            events.last_full = Instant::now();
            events.tick_due = None;
            return Ok(Woke::Rescan);
        }
        let engines_changed = scanner.apply_events(&events.hints.changed);
        events.hints.clear();
        if engines_changed {
            return Ok(Woke::Events);
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use crate::scan::fixture::{signatures, FakeProc};

    #[test]
    fn an_unknown_source_is_an_error_naming_it() {
        let err = ProcessScanner::new(&signatures(), ScanOptions::default(), Some("kvm"))
            .expect_err("kvm is no source");
        assert!(
            err.contains("\"kvm\"") && err.starts_with("source:"),
            "{err}"
        );
    }

    #[test]
    fn bad_signatures_are_an_error_for_every_source() {
        let mut bad = signatures();
        bad[0].model_flags = (0..20).map(|i| format!("--m{i}")).collect();
        for source in ["procfs", "sysinfo"] {
            let err = ProcessScanner::new(&bad, ScanOptions::default(), Some(source))
                .expect_err("too many model flags");
            assert!(err.contains("model_flags"), "{source}: {err}");
        }
    }

    #[test]
    fn procfs_reads_the_given_root() {
        let proc = FakeProc::new();
        proc.spawn(300, &["demo", "serve", "/m/a"]);
        let options = proc.options();
        let mut scanner = ProcessScanner::new(&signatures(), options, Some("procfs")).unwrap();
        let found = scanner.scan();
        assert_eq!(found.iter().map(|p| p.pid).collect::<Vec<_>>(), vec![300]);
        assert_eq!(scanner.stats().scanned, 1);
        assert_eq!(scanner.known_len(), 1);
    }

    /// The test signatures name no real program: only the test engines other tests of this
    /// binary run meanwhile (`solo-server`) may be found on the live host, never this process.
    fn assert_only_test_engines(found: &[Arc<EngineProc>]) {
        let own = std::process::id() as i32;
        for process in found {
            assert_ne!(process.pid, own);
            assert_eq!(
                process.argv.first().map(Vec::as_slice),
                Some(&b"solo-server"[..])
            );
        }
    }

    #[test]
    fn sysinfo_scans_the_live_host() {
        let mut scanner =
            ProcessScanner::new(&signatures(), ScanOptions::default(), Some("sysinfo")).unwrap();
        assert_only_test_engines(&scanner.scan());
        assert!(scanner.stats().scanned > 0);
        assert!(scanner.known_len() > 0);
    }

    /// Through the kernel's process events on the live host: a process that execs into a (test)
    /// engine wakes the wait early, and its exit too. Where the kernel refuses the subscription,
    /// the reason must be one the caller falls back on.
    #[cfg(target_os = "linux")]
    #[test]
    fn process_events_wake_the_wait_for_an_engine_exec_and_exit() {
        let mut scanner = ProcessScanner::new(&signatures(), ScanOptions::default(), None).unwrap();
        match scanner.subscribe_events(Duration::from_secs(1), Duration::from_secs(3600)) {
            Ok(()) => {}
            Err(Unavailable::NoAck) => return,
            Err(Unavailable::Errno(errno)) => {
                assert!(
                    [libc::EPERM, libc::EPROTONOSUPPORT].contains(&errno),
                    "{errno}"
                );
                return;
            }
            Err(Unavailable::Unsupported) => panic!("procfs on Linux takes events"),
        }
        assert!(scanner.event_driven());
        scanner.scan();
        // `solo-server` is a test engine (no subcommand needed); bash's exec -a names argv[0].
        let mut child = std::process::Command::new("bash")
            .args(["-c", "exec -a solo-server sleep 30"])
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let found = (0..50).find_map(|_| {
            let (found, woke) = scanner.wait(Duration::from_secs(5));
            found.iter().any(|p| p.pid == pid).then_some(woke)
        });
        assert_eq!(found, Some(Woke::Events));
        child.kill().unwrap();
        child.wait().unwrap();
        let gone = (0..50).find_map(|_| {
            let (found, woke) = scanner.wait(Duration::from_secs(5));
            (!found.iter().any(|p| p.pid == pid)).then_some(woke)
        });
        assert_eq!(gone, Some(Woke::Events));
    }

    #[test]
    fn without_events_wait_polls() {
        let proc = FakeProc::new();
        proc.spawn(300, &["demo", "serve", "/m/a"]);
        let mut scanner =
            ProcessScanner::new(&signatures(), proc.options(), Some("procfs")).unwrap();
        assert!(!scanner.event_driven());
        let (found, woke) = scanner.wait(Duration::from_millis(1));
        assert_eq!((found.len(), woke), (1, Woke::Polled));
        let mut sysinfo =
            ProcessScanner::new(&signatures(), ScanOptions::default(), Some("sysinfo")).unwrap();
        assert_eq!(
            sysinfo.subscribe_events(Duration::from_secs(1), Duration::from_secs(1)),
            Err(Unavailable::Unsupported)
        );
    }

    #[test]
    fn the_default_source_scans_the_live_host() {
        let mut scanner = ProcessScanner::new(&signatures(), ScanOptions::default(), None).unwrap();
        assert_only_test_engines(&scanner.scan());
        assert!(scanner.stats().scanned > 0);
    }
}
