//! Criterion benchmark: argv classification inside Rust over a host-like mix (no Python objects).
//!
//! The mix and the signatures are written by `benches/bench_argv.py`, which runs this bench and
//! prints its figure next to the pure-Python fallback's. Run that script rather than this file.

use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use enginespec::Matcher;

fn data_dir() -> PathBuf {
    std::env::var_os("ENGINESPEC_BENCH_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/bench-data"))
}

fn load() -> (Matcher, Vec<Vec<Vec<u8>>>) {
    let dir = data_dir();
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name)).unwrap_or_else(|err| {
            panic!(
                "{}: {err}; generate it with `python benches/bench_argv.py`",
                dir.join(name).display()
            )
        })
    };
    let matcher = Matcher::from_json(&read("signatures.json")).expect("valid signatures");
    let mix: Vec<Vec<String>> = serde_json::from_str(&read("argv_mix.json")).expect("argv mix");
    let mix = mix
        .into_iter()
        .map(|argv| argv.into_iter().map(String::into_bytes).collect())
        .collect();
    (matcher, mix)
}

fn bench(c: &mut Criterion) {
    let (matcher, mix) = load();
    let mut group = c.benchmark_group("argv");
    group.throughput(Throughput::Elements(mix.len() as u64));
    group.bench_function("classify_mix", |b| {
        b.iter(|| {
            mix.iter()
                .filter(|argv| std::hint::black_box(matcher.parse(argv)).is_some())
                .count()
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
