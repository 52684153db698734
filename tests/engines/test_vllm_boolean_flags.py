"""scripts/vllm_boolean_flags.py, which writes vLLM's no-value flags from its own parser: what it
reads off a parser, how it merges a release into the file, and that the committed file is the
script's own writing and the flags the vLLM and Aphrodite signatures use."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from packaging.version import Version

import enginespec.engines.aphrodite as aphrodite
import enginespec.engines.vllm as vllm
from enginespec.engines._libraries import listed_flags

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "vllm_boolean_flags.py"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vllm_boolean_flags", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


class _EnableDisable(argparse.Action):
    """Like vLLM's EnableDisableAction: `--enable-x` and `--disable-x`, no value."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, option_string is not None and option_string.startswith("--enable-"))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_tag")
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction)
    parser.add_argument("--enable-expert-parallel", "-ep", action="store_true")
    parser.add_argument("--enable-sleep-mode", "--disable-sleep-mode", action=_EnableDisable)
    parser.add_argument("--port", type=int)
    parser.add_argument("--served-model-name", "-smn", nargs="+")
    parser.add_argument("--quiet", action="store_const", const=True)
    return parser


def test_the_flags_of_a_parser_that_take_no_value(script: ModuleType) -> None:
    no_value, takes_value = script.flags_of(_parser())
    assert no_value == {
        "--trust-remote-code",
        "--enable-prefix-caching",  # its --no- twin is the signature's prefix rule
        "--enable-expert-parallel",
        "-ep",
        "--enable-sleep-mode",
        "--disable-sleep-mode",
        "--quiet",
    }
    assert takes_value == {"--port", "--served-model-name", "-smn"}


def test_a_newer_release_marks_what_it_dropped_and_drops_what_now_takes_a_value(script: ModuleType) -> None:
    flags = script.parse("# releases read: 0.30.0\n--a\n--b\n--old  # last in 0.9.2\n")
    flags.merge(Version("0.31.0"), {"--a", "--new"}, {"--b"})
    assert flags.text().splitlines()[3:] == [
        "# releases read: 0.30.0, 0.31.0",
        "--a",
        "--new",
        "--old  # last in 0.9.2",
    ]


def test_an_older_release_adds_its_own_flags_as_last_in_it_and_removes_none(script: ModuleType) -> None:
    flags = script.parse("# releases read: 0.33.0\n--a\n--b\n")
    flags.merge(Version("0.32.0"), {"--a", "--gone-by-0.33"}, {"--b"})
    assert flags.text().splitlines()[3:] == [
        "# releases read: 0.32.0, 0.33.0",
        "--a",
        "--b",
        "--gone-by-0.33  # last in 0.32.0",
    ]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("--a\n", "no '# releases read:' line"),
        ("# releases read: 0.1.0\nport\n", "line 2: 'port' is not a flag"),
        ("# releases read: 0.1.0\n--a b\n", "line 2: '--a b' is not a flag"),
    ],
)
def test_a_malformed_file_is_refused_naming_its_line(script: ModuleType, text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        script.parse(text)


def test_the_committed_file_is_as_the_script_writes_it(script: ModuleType) -> None:
    text = script.FLAGS_FILE.read_text()
    assert script.parse(text).text() == text
    assert set(script.parse(text).last_seen) == listed_flags("vllm_boolean_flags.txt")


def test_vllm_and_aphrodite_take_their_no_value_flags_from_the_file() -> None:
    listed = listed_flags("vllm_boolean_flags.txt")
    assert {"--trust-remote-code", "--disable-auto-tool-choice", "--worker-use-ray", "-ep"} <= listed
    assert vllm.SIGNATURE.no_value_flags == listed | {"-O0", "-O1", "-O2", "-O3"}
    assert aphrodite.SIGNATURE.no_value_flags == vllm.SIGNATURE.no_value_flags | {
        "--enable-mm-processor-stats",
        "--launch-kobold-api",
    }


def test_check_names_a_missing_flag_and_one_that_now_takes_a_value(script: ModuleType) -> None:
    listed = script.parse("# releases read: 0.32.0\n--a\n--b\n")
    assert script.problems(listed, Version("0.33.0"), {"--a", "--c"}, {"--b"}) == [
        "vLLM 0.33.0: --c takes no value and is not listed",
        "vLLM 0.33.0: --b takes a value and is listed",
    ]
    # an older release giving --b a value says nothing of the newest release's --b
    assert script.problems(listed, Version("0.31.0"), {"--a"}, {"--b"}) == []
