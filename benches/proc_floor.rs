//! Reference programs for the scan benchmark (run by `benches/bench_scan.py`), each timed alone:
//!
//! - `cmdline`: the raw floor of a cold scan: list `/proc` and read every `cmdline`, nothing else;
//! - `list`: the floor of an incremental scan: list `/proc` only;
//! - `sysinfo-cold` / `sysinfo-warm`: the `sysinfo` crate refreshing processes with their command
//!   lines only, from a new `System` / an already filled one;
//! - `native-cold` / `native-warm`: enginespec's scanner from Rust (no Python), first / later scan;
//! - `cold-pair`: `native-cold` and `cmdline` alternated in one process, so both see the same
//!   machine state (prints three lists: the scanner's, of which its construction from the
//!   signatures' JSON, and the floor's).
//!
//! Usage: `cargo bench --bench proc_floor -- MODE REPS`; prints one JSON line of seconds per run.

use std::time::Instant;

use enginespec::procread::ProcRoot;
use enginespec::scan::{ScanOptions, Scanner};
use enginespec::signature::signatures_from_json;
use sysinfo::{ProcessRefreshKind, ProcessesToUpdate, System, UpdateKind};

/// The fastest listing we know (raw getdents64, no allocation per entry), shared with the scanner.
fn list_pids() -> Vec<(i32, u64)> {
    let mut pids = Vec::new();
    ProcRoot::new("/proc".into()).list(&mut pids);
    pids
}

/// Every `cmdline` read as the scanner reads it (`open`, `read` until it returns 0, `close`):
/// std's `read_to_end` would add a `statx` and an `lseek` per file asking for a size procfs does
/// not give, and so make the floor about 6% slower than the scan's own reads.
fn read_all_cmdlines() -> usize {
    let proc = ProcRoot::new("/proc".into());
    let mut buf = Vec::with_capacity(4096);
    let mut total = 0;
    for (pid, _) in list_pids() {
        if proc.read_into(pid, "cmdline", &mut buf).is_ok() {
            total += buf.len();
        }
    }
    total
}

fn cmd_only() -> ProcessRefreshKind {
    ProcessRefreshKind::nothing().with_cmd(UpdateKind::Always)
}

fn native_scanner() -> Scanner {
    let path =
        std::env::var("ENGINESPEC_BENCH_DATA").unwrap_or_else(|_| "target/bench-data".into());
    let json = std::fs::read_to_string(format!("{path}/signatures.json"))
        .expect("signatures.json: generate it with `python benches/bench_scan.py`");
    let signatures = signatures_from_json(&json).expect("valid signatures");
    let options = ScanOptions {
        wrappers: ["sh", "bash", "env", "nohup"]
            .iter()
            .map(|w| w.as_bytes().to_vec())
            .collect(),
        listen_ports: std::env::var_os("BENCH_NO_PORTS").is_none(),
        ..ScanOptions::default()
    };
    Scanner::new(&signatures, options).expect("scanner")
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let mode = args.first().map(String::as_str).unwrap_or("cmdline");
    let reps: usize = args.get(1).and_then(|r| r.parse().ok()).unwrap_or(5);
    let mut seconds = Vec::with_capacity(reps);
    let mut system = System::new();
    let mut warm = native_scanner_if(mode);
    if mode == "sysinfo-warm" {
        system.refresh_processes_specifics(ProcessesToUpdate::All, true, cmd_only());
    }
    if let Some(scanner) = warm.as_mut() {
        scanner.scan();
    }
    if mode == "cold-pair" {
        let (mut ours, mut built, mut floor) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..reps {
            let start = Instant::now();
            let mut scanner = native_scanner();
            built.push(start.elapsed().as_secs_f64());
            std::hint::black_box(scanner.scan().len());
            ours.push(start.elapsed().as_secs_f64());
            let start = Instant::now();
            std::hint::black_box(read_all_cmdlines());
            floor.push(start.elapsed().as_secs_f64());
        }
        let show = |v: &[f64]| {
            v.iter()
                .map(|s| format!("{s:.9}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!(
            "{{\"mode\": \"cold-pair\", \"seconds\": [{}], \"construct\": [{}], \"floor\": [{}]}}",
            show(&ours),
            show(&built),
            show(&floor)
        );
        return;
    }
    for _ in 0..reps {
        let start = Instant::now();
        let count = match mode {
            "cmdline" => read_all_cmdlines(),
            "list" => list_pids().len(),
            "sysinfo-cold" => {
                let mut fresh = System::new();
                fresh.refresh_processes_specifics(ProcessesToUpdate::All, true, cmd_only());
                fresh.processes().len()
            }
            "sysinfo-warm" => {
                system.refresh_processes_specifics(ProcessesToUpdate::All, true, cmd_only())
            }
            "native-cold" => native_scanner().scan().len(),
            "native-warm" => warm.as_mut().map_or(0, |s| s.scan().len()),
            other => panic!("unknown mode {other}"),
        };
        seconds.push(start.elapsed().as_secs_f64());
        std::hint::black_box(count);
    }
    let list: Vec<String> = seconds.iter().map(|s| format!("{s:.9}")).collect();
    println!(
        "{{\"mode\": \"{mode}\", \"seconds\": [{}]}}",
        list.join(", ")
    );
}

fn native_scanner_if(mode: &str) -> Option<Scanner> {
    (mode == "native-warm").then(native_scanner)
}
