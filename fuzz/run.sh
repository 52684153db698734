#!/usr/bin/env bash
# Runs one fuzz target (nightly toolchain + `cargo install cargo-fuzz`): new inputs go to
# fuzz/corpus/TARGET (not committed), starting from the committed seeds in fuzz/seeds/TARGET;
# a crash, panic, leak, timeout or out-of-memory input lands in fuzz/artifacts/TARGET.
#
#   bash fuzz/run.sh TARGET [SECONDS]     targets: argv_real argv_signatures signatures_json gguf procfs proc_events scanner
set -euo pipefail
cd "$(dirname "$0")/.."
target="$1" seconds="${2:-600}"
mkdir -p "fuzz/corpus/$target"
exec cargo +nightly fuzz run "$target" "fuzz/corpus/$target" "fuzz/seeds/$target" -- \
    -dict=fuzz/argv.dict -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -malloc_limit_mb=1024 -max_len=16384 -print_final_stats=1
