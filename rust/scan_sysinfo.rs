//! The scanner on top of the `sysinfo` crate: the native backend's process source on platforms
//! without procfs (macOS, Windows). It refreshes command lines only, classifies them with the same
//! matcher, and folds workers through the parent links sysinfo reports. Start times have one-second
//! resolution there; listening ports are not read (reported empty: unknown).

use std::ffi::OsString;

use rustc_hash::FxHashMap;
use sysinfo::{Pid, ProcessRefreshKind, ProcessStatus, ProcessesToUpdate, System, UpdateKind};

use crate::matcher::Matcher;
use crate::scan::{EngineProc, ScanStats};
use crate::signature::Signature;

fn bytes(value: &OsString) -> Vec<u8> {
    value.as_encoded_bytes().to_vec()
}

#[derive(Debug)]
pub struct SysinfoScanner {
    matcher: Matcher,
    fold: Vec<bool>,
    system: System,
    stats: ScanStats,
}

impl SysinfoScanner {
    pub fn new(signatures: &[Signature]) -> Result<Self, String> {
        Ok(SysinfoScanner {
            matcher: Matcher::new(signatures)?,
            fold: signatures.iter().map(|s| s.fold_workers).collect(),
            system: System::new(),
            stats: ScanStats::default(),
        })
    }

    pub fn stats(&self) -> ScanStats {
        self.stats
    }

    pub fn known_len(&self) -> usize {
        self.system.processes().len()
    }

    pub fn scan(&mut self) -> Vec<EngineProc> {
        let before = self.system.processes().len();
        // Command lines are re-read on every refresh so an `exec` is seen at once.
        let kind = ProcessRefreshKind::nothing()
            .with_cmd(UpdateKind::Always)
            .with_exe(UpdateKind::OnlyIfNotSet);
        let updated = self
            .system
            .refresh_processes_specifics(ProcessesToUpdate::All, true, kind);
        let processes = self.system.processes();
        self.stats = ScanStats {
            scanned: processes.len() as u64,
            new: 0,
            vanished: before.saturating_sub(updated) as u64,
            unreadable: 0,
            reread: updated as u64,
            full_recheck: false,
        };
        let mut children: FxHashMap<Pid, Vec<Pid>> = FxHashMap::default();
        for (pid, process) in processes {
            if let Some(parent) = process.parent() {
                children.entry(parent).or_default().push(*pid);
            }
        }
        let mut out = Vec::new();
        for (pid, process) in processes {
            if matches!(
                process.status(),
                ProcessStatus::Zombie | ProcessStatus::Dead
            ) {
                continue;
            }
            let argv: Vec<Vec<u8>> = process.cmd().iter().map(bytes).collect();
            let Some(parsed) = self.matcher.parse(&argv) else {
                continue;
            };
            let mut descendants = Vec::new();
            if self.fold.get(parsed.engine).copied().unwrap_or(false) {
                let mut queue = vec![*pid];
                while let Some(next) = queue.pop() {
                    for child in children.get(&next).into_iter().flatten() {
                        if !descendants.contains(&(child.as_u32() as i32)) {
                            descendants.push(child.as_u32() as i32);
                            queue.push(*child);
                        }
                    }
                }
                descendants.sort_unstable();
            }
            let ppid = process.parent();
            let parent_argv = ppid
                .and_then(|p| processes.get(&p))
                .map(|p| p.cmd().iter().map(bytes).collect())
                .unwrap_or_default();
            out.push(EngineProc {
                pid: pid.as_u32() as i32,
                start_time: process.start_time() as f64,
                ppid: ppid.map_or(0, |p| p.as_u32() as i32),
                facts: parsed.to_facts(),
                exe: process
                    .exe()
                    .map(|p| p.as_os_str().as_encoded_bytes().to_vec()),
                descendants,
                parent_argv,
                listen_ports: Vec::new(),
                argv: argv.clone(),
            });
        }
        out.sort_by_key(|p| p.pid);
        out
    }
}
