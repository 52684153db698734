//! The native scanner behind one type, whatever the process source: the incremental `/proc`
//! reader on Linux, the `sysinfo` crate elsewhere. The choice lives here, in plain Rust, so that
//! `cargo test` covers it and the PyO3 bindings only convert types.

use std::sync::Arc;

use crate::scan::{EngineProc, ScanOptions, ScanStats, Scanner};
use crate::scan_sysinfo::SysinfoScanner;
use crate::signature::Signature;

/// Where the processes are read from.
#[derive(Debug)]
enum Source {
    Procfs(Box<Scanner>),
    Sysinfo(Box<SysinfoScanner>),
}

/// An engine scanner over the source named at construction. Keep one per polling loop.
#[derive(Debug)]
pub struct ProcessScanner {
    source: Source,
}

/// The source used when none is named: procfs only exists (as the scanner reads it) on Linux.
pub const DEFAULT_SOURCE: &str = if cfg!(target_os = "linux") {
    "procfs"
} else {
    "sysinfo"
};

impl ProcessScanner {
    /// `source` is `"procfs"` or `"sysinfo"`, `None` for [`DEFAULT_SOURCE`]. The `sysinfo`
    /// source reads the live host and ignores `options` (it has no exec watching, pid cursor or
    /// socket reading to tune).
    pub fn new(
        signatures: &[Signature],
        options: ScanOptions,
        source: Option<&str>,
    ) -> Result<Self, String> {
        let source = match source.unwrap_or(DEFAULT_SOURCE) {
            "procfs" => Source::Procfs(Box::new(Scanner::new(signatures, options)?)),
            "sysinfo" => Source::Sysinfo(Box::new(SysinfoScanner::new(signatures)?)),
            other => return Err(format!("source: {other:?} is not 'procfs' or 'sysinfo'")),
        };
        Ok(ProcessScanner { source })
    }

    /// Every engine server now running, by pid. Never fails; see [`ProcessScanner::stats`]. An
    /// engine unchanged since the previous scan comes back as the same record (same revision).
    pub fn scan(&mut self) -> Vec<Arc<EngineProc>> {
        match &mut self.source {
            Source::Procfs(s) => s.scan(),
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

    /// Number of processes the scanner currently remembers.
    pub fn known_len(&self) -> usize {
        match &self.source {
            Source::Procfs(s) => s.known_len(),
            Source::Sysinfo(s) => s.known_len(),
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

    #[test]
    fn sysinfo_scans_the_live_host() {
        let mut scanner =
            ProcessScanner::new(&signatures(), ScanOptions::default(), Some("sysinfo")).unwrap();
        // The test signatures name no real program, so nothing is an engine, but this process
        // itself is listed.
        assert!(scanner.scan().is_empty());
        assert!(scanner.stats().scanned > 0);
        assert!(scanner.known_len() > 0);
    }

    #[test]
    fn the_default_source_scans_the_live_host() {
        let mut scanner = ProcessScanner::new(&signatures(), ScanOptions::default(), None).unwrap();
        assert!(scanner.scan().is_empty());
        assert!(scanner.stats().scanned > 0);
    }
}
