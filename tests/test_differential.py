"""The Rust matcher and the pure-Python twin agree on random and mutated argv."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from enginespec import _pymatcher
from enginespec.engines import all_signatures
from enginespec.signature import signatures_json

# Compares the Rust matcher with the Python twin: nothing to compare where the extension is absent.
_native = pytest.importorskip("enginespec._native", reason="the Rust extension is not installed")

SIGNATURES = signatures_json(all_signatures())
NATIVE = _native.Matcher(SIGNATURES)
PYTHON = _pymatcher.Matcher(SIGNATURES)
CORPUS = [
    json.loads(line)["argv"]
    for line in (Path(__file__).parent / "data" / "argv-public.jsonl").read_text().splitlines()
]


def _vocabulary() -> list[str]:
    words = {"--", "-", "-m", "-u", "-um", "-X", "dev", "-c", "=", "--x=", "-1", "-.5", "1.2.3", ""}
    for signature in all_signatures():
        words.update(signature.aliases)
        words.update(signature.aliases.values())
        for group in (
            signature.model_flags,
            signature.served_name_flags,
            signature.host_flags,
            signature.port_flags,
            signature.no_value_flags,
            signature.multi_value_flags,
            signature.exit_flags,
        ):
            words.update(group)
        for form in signature.launch_forms:
            words.update(form.executables)
            words.update(form.modules)
            words.update(form.subcommand)
    variants = set()
    for word in words:
        variants.update({word, word.replace("-", "_"), word + "=v", word + "=", word.upper()})
    return sorted(variants | {"python", "python3.11", "/v/bin/python3", "Python", "/v/bin/vllm", "8080"})


WORDS = _vocabulary()
token = st.one_of(
    st.sampled_from(WORDS),
    st.binary(max_size=8).map(os.fsdecode),
    st.text(alphabet="-_=,./aemvx0189", max_size=6),
)


def _agree(argv: list[str]) -> None:
    # Matchers take argv as os.fsdecode gives it; parse_argv canonicalises other spellings first.
    argv = [os.fsdecode(os.fsencode(arg)) for arg in argv]
    assert NATIVE.parse(argv) == PYTHON.parse(argv), argv


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(token, max_size=14))
def test_random_argv(argv: list[str]) -> None:
    _agree(argv)


@settings(max_examples=3000, deadline=None)
@given(
    st.sampled_from(CORPUS),
    st.lists(st.tuples(st.sampled_from(["insert", "delete", "replace", "glue"]), st.integers(0, 40), token)),
)
def test_mutated_corpus_argv(argv: list[str], edits: list[tuple[str, int, str]]) -> None:
    mutated = list(argv)
    for kind, position, word in edits:
        at = position % (len(mutated) + 1)
        if kind == "insert":
            mutated.insert(at, word)
        elif mutated and at < len(mutated):
            if kind == "delete":
                del mutated[at]
            elif kind == "replace":
                mutated[at] = word
            else:
                mutated[at] += word
    _agree(mutated)


def test_corpus_agrees_exactly() -> None:
    for argv in CORPUS:
        _agree(argv)
    assert sum(PYTHON.parse(argv) is not None for argv in CORPUS) > 80
