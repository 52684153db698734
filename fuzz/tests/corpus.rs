//! Replays the committed inputs through the fuzz targets' bodies on stable, so `cargo test` keeps
//! every input that once found a bug (`regressions/TARGET/`) and the minimized seed corpus
//! (`seeds/TARGET/`) passing without libFuzzer:
//!
//!     cargo test --manifest-path fuzz/Cargo.toml --no-default-features

use std::fs;
use std::path::Path;

fn replay(target: &str, body: fn(&[u8])) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut count = 0;
    for folder in ["seeds", "regressions"] {
        let Ok(entries) = fs::read_dir(root.join(folder).join(target)) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("readable corpus folder").path();
            body(&fs::read(&path).expect("readable corpus file"));
            count += 1;
        }
    }
    assert!(count > 0, "no committed input for {target}");
}

#[test]
fn argv_real() {
    replay("argv_real", enginespec_fuzz::argv_real);
}

#[test]
fn argv_signatures() {
    replay("argv_signatures", enginespec_fuzz::argv_signatures);
}

#[test]
fn signatures_json() {
    replay("signatures_json", enginespec_fuzz::signatures_json);
}

#[test]
fn gguf() {
    replay("gguf", enginespec_fuzz::gguf);
}

#[test]
fn procfs() {
    replay("procfs", enginespec_fuzz::procfs);
}

#[test]
fn proc_events() {
    replay("proc_events", enginespec_fuzz::proc_events);
}

#[test]
fn scanner() {
    replay("scanner", enginespec_fuzz::scanner);
}

#[test]
fn committed_signatures_are_real_ones() {
    // fuzz/signatures.json is the package's (fuzz/refresh.py --check in .ci/run): a server is found.
    let matcher = enginespec::Matcher::from_json(enginespec_fuzz::REAL_SIGNATURES).expect("valid");
    let argv: [&[u8]; 4] = [b"vllm", b"serve", b"/models/a", b"--port=8001"];
    let parsed = matcher.parse(&argv).expect("a vLLM server");
    assert_eq!(parsed.model, Some(&b"/models/a"[..]));
    assert_eq!(parsed.port, Some(8001));
}
