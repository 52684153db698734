"""Argv classification throughput: Rust (criterion, no Python objects) vs the pure-Python fallback.

Run from the repository root with the package installed: `python benches/bench_argv.py`.
Prints argv/second for each and their ratio, measured in the same run over the same mix.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from _mix import ENGINES_BEFORE_2026, host_mix, signatures_before_2026
from enginespec import _native
from enginespec._host.fallback import matcher as _pymatcher
from enginespec.definition.signature import signatures_json
from enginespec.engines import all_signatures

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "target" / "bench-data"
MIX_SIZE = 20_000


def _rate(parse: object, mix: list[list[str]], seconds: float = 2.0) -> float:
    fn = parse  # bound method
    rounds, start = 0, time.perf_counter()
    while True:
        for argv in mix:
            fn(argv)  # type: ignore[operator]
        rounds += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return rounds * len(mix) / elapsed


def main() -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    signatures = signatures_json(all_signatures())
    mix = host_mix(MIX_SIZE)
    (DATA / "signatures.json").write_text(signatures)
    (DATA / "argv_mix.json").write_text(json.dumps(mix))
    engines = sum(_pymatcher.Matcher(signatures).parse(argv) is not None for argv in mix)
    print(f"mix: {len(mix)} argv, {engines} engine servers ({100 * engines / len(mix):.1f}%)")

    env = {**os.environ, "ENGINESPEC_BENCH_DATA": str(DATA)}
    subprocess.run(
        [
            "cargo",
            "bench",
            "--bench",
            "argv_match",
            "--",
            "--noplot",
            "--warm-up-time",
            "1",
            "--measurement-time",
            "4",
        ],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    estimates = json.loads((ROOT / "target/criterion/argv/classify_mix/new/estimates.json").read_text())
    rust_rate = len(mix) / (estimates["mean"]["point_estimate"] * 1e-9)
    native_py = _rate(_native.Matcher(signatures).parse, mix)
    python_rate = _rate(_pymatcher.Matcher(signatures).parse, mix)
    # the same mix with only the engines known before the 2026 servers, alternated with all of
    # them (three rounds each) so that both see the same machine
    before = _native.Matcher(signatures_before_2026()).parse
    native_all = _native.Matcher(signatures).parse
    before_rates, all_rates = [], []
    for _ in range(3):
        before_rates.append(_rate(before, mix, 1.0))
        all_rates.append(_rate(native_all, mix, 1.0))
    native_before = sorted(before_rates)[1]
    native_now = sorted(all_rates)[1]

    rows = [
        ("Rust matcher (criterion, one core)", rust_rate),
        ("native via Python binding", native_py),
        ("pure-Python fallback", python_rate),
    ]
    print(f"{'argv classification':<40}{'argv/s':>16}{'vs fallback':>14}")
    for name, rate in rows:
        print(f"{name:<40}{rate:>16,.0f}{rate / python_rate:>13.1f}x")
    print(f"goal: Rust >= 5,000,000 argv/s -> {'met' if rust_rate >= 5e6 else 'NOT met'}")
    count = len(all_signatures())
    print(
        f"native via Python binding, {len(ENGINES_BEFORE_2026)} engines' signatures (before 2026) "
        f"{native_before:,.0f} argv/s, all {count}: {native_now:,.0f} argv/s (median of 3 alternated): "
        f"{native_before / native_now:.2f}x the time per argv"
    )


if __name__ == "__main__":
    main()
