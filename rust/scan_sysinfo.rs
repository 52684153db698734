//! The scanner on top of the `sysinfo` crate: the native backend's process source on platforms
//! without procfs (macOS, Windows). It refreshes command lines only, classifies them with the same
//! matcher, and folds workers through the parent links sysinfo reports. Start times have one-second
//! resolution there; listening ports are not read (reported empty: unknown). sysinfo does not say
//! why a command line or an executable is missing, so `unreadable` stays 0 and an engine without
//! an executable counts as `restricted`.

use std::ffi::OsString;
use std::sync::Arc;

use rustc_hash::FxHashMap;
use sysinfo::{Pid, ProcessRefreshKind, ProcessStatus, ProcessesToUpdate, System, UpdateKind};

use crate::matcher::CompiledSignatures;
use crate::procfs::{cap_args, ARGV_CUT};
use crate::scan::{EngineProc, ReadSet, Revisions, ScanStats};
use crate::signature::Signature;

fn bytes(value: &OsString) -> Vec<u8> {
    value.as_encoded_bytes().to_vec()
}

#[derive(Debug)]
pub struct SysinfoScanner {
    compiled: Arc<CompiledSignatures>,
    system: System,
    stats: ScanStats,
    /// The records of the previous scan, by pid: one that comes out the same keeps its revision.
    previous: FxHashMap<i32, Arc<EngineProc>>,
    revisions: Revisions,
    /// Only its checkouts are used: which programs need one (and never find it here).
    read_set: ReadSet,
}

impl SysinfoScanner {
    pub fn new(signatures: &[Signature]) -> Result<Self, String> {
        Ok(Self::compiled(
            CompiledSignatures::new(signatures)?,
            ReadSet::default(),
        ))
    }

    /// A scanner of signatures already compiled.
    pub fn compiled(compiled: Arc<CompiledSignatures>, read_set: ReadSet) -> Self {
        SysinfoScanner {
            compiled,
            system: System::new(),
            stats: ScanStats::default(),
            previous: FxHashMap::default(),
            revisions: Revisions::default(),
            read_set,
        }
    }

    pub fn stats(&self) -> ScanStats {
        self.stats
    }

    pub fn known_len(&self) -> usize {
        self.system.processes().len()
    }

    pub fn scan(&mut self) -> Vec<Arc<EngineProc>> {
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
            restricted: 0,
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
        let mut previous = std::mem::take(&mut self.previous);
        for (pid, process) in processes {
            if matches!(
                process.status(),
                ProcessStatus::Zombie | ProcessStatus::Dead
            ) {
                continue;
            }
            let all: Vec<Vec<u8>> = process.cmd().iter().map(bytes).collect();
            let (kept, cut) = cap_args(all.iter().map(Vec::as_slice));
            let Some(facts) = self
                .compiled
                .matcher
                .parse(&kept)
                .map(|parsed| parsed.to_facts())
            else {
                continue;
            };
            let mut argv: Vec<Vec<u8>> = kept.into_iter().map(<[u8]>::to_vec).collect();
            if cut {
                argv.push(ARGV_CUT.to_vec());
            }
            let mut descendants = Vec::new();
            if self
                .compiled
                .fold
                .get(facts.engine)
                .copied()
                .unwrap_or(false)
            {
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
                .map(|p| {
                    let all: Vec<Vec<u8>> = p.cmd().iter().map(bytes).collect();
                    let kept = cap_args(all.iter().map(Vec::as_slice)).0;
                    kept.into_iter().map(<[u8]>::to_vec).collect()
                })
                .unwrap_or_default();
            let pid = pid.as_u32() as i32;
            let engine = facts.engine;
            let mut record = EngineProc {
                pid,
                revision: 0,
                start_time: process.start_time() as f64,
                ppid: ppid.map_or(0, |p| p.as_u32() as i32),
                facts,
                exe: process
                    .exe()
                    .map(|p| p.as_os_str().as_encoded_bytes().to_vec()),
                descendants,
                parent_argv,
                listen_ports: Vec::new(),
                // The read set is procfs's: sysinfo reads no environment or cgroup of its own.
                environ: None,
                cgroup: None,
                netns: None,
                // Nothing is looked at as another user here: a checkout is never found.
                in_checkout: self.read_set.checkout_paths(engine, &argv).map(|_| false),
                // No fds are listed here: what the tree holds is not known.
                devices: None,
                argv,
            };
            if record.exe.is_none() {
                self.stats.restricted += 1;
            }
            let kept = previous.remove(&pid).filter(|old| {
                record.revision = old.revision;
                **old == record
            });
            let record = kept.unwrap_or_else(|| {
                record.revision = self.revisions.next();
                Arc::new(record)
            });
            self.previous.insert(pid, Arc::clone(&record));
            out.push(record);
        }
        out.sort_by_key(|p| p.pid);
        out
    }
}
