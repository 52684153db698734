"""Writes the fuzzers' data from the installed enginespec and the test corpus:

- `fuzz/signatures.json`: the built-in engines' signatures, as `signatures_json` writes them (the
  real signatures the `argv_real` and `scanner` targets match against);
- `fuzz/argv.dict`: a libFuzzer dictionary of every string in them (flags, executables, modules);
- with `--seeds`: `fuzz/seeds/argv_real/` gets each argv of `tests/data/argv-public.jsonl` as
  cmdline bytes (NUL after each argument), named by content hash (the committed seeds are these and
  what fuzzing found, minimized with `cargo fuzz cmin`).

    python fuzz/refresh.py [--seeds]  # rewrite them
    python fuzz/refresh.py --check    # exit 1 if signatures.json or argv.dict is stale
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from enginespec.definition.signature import signatures_json
from enginespec.engines import all_signatures

FUZZ = Path(__file__).resolve().parent
CORPUS = FUZZ.parent / "tests" / "data" / "argv-public.jsonl"


def _strings(value: object) -> set[str]:
    if isinstance(value, str):
        return {value}
    if isinstance(value, list | tuple):
        return {s for item in value for s in _strings(item)}
    if isinstance(value, dict):
        return {s for item in value.values() for s in _strings(item)}
    return set()


def _words(signatures: list[dict[str, object]]) -> set[str]:
    """The argv words of the signatures: every string value, and the flags that `aliases` maps."""
    words: set[str] = set()
    for signature in signatures:
        words |= _strings(signature)
        aliases = signature.get("aliases")
        if isinstance(aliases, dict):
            words |= set(aliases)
    return words


def _dict_entry(word: str) -> str:
    escaped = "".join(
        chr(b) if 0x20 <= b < 0x7F and chr(b) not in '"\\' else f"\\x{b:02x}" for b in word.encode()
    )
    return f'"{escaped}"'


def generated() -> dict[str, str]:
    signatures = signatures_json(all_signatures())
    words = sorted(w for w in _words(json.loads(signatures)) if w)
    lines = ["# Every string of fuzz/signatures.json (written by fuzz/refresh.py).", '"\\x00"']
    lines += [_dict_entry(w) for w in words]
    return {"signatures.json": signatures + "\n", "argv.dict": "\n".join(lines) + "\n"}


def main() -> int:
    files = generated()
    if "--check" in sys.argv[1:]:
        stale = [name for name, text in files.items() if (FUZZ / name).read_text() != text]
        for name in stale:
            print(f"fuzz/{name} is stale: run python fuzz/refresh.py")
        return 1 if stale else 0
    for name, text in files.items():
        (FUZZ / name).write_text(text)
    if "--seeds" not in sys.argv[1:]:
        return 0
    seeds = FUZZ / "seeds" / "argv_real"
    seeds.mkdir(parents=True, exist_ok=True)
    for line in CORPUS.read_text().splitlines():
        data = b"".join(arg.encode("utf-8", "surrogateescape") + b"\0" for arg in json.loads(line)["argv"])
        (seeds / hashlib.sha1(data).hexdigest()).write_bytes(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
