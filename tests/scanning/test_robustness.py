"""Hostile and huge argv never crash either backend."""

from __future__ import annotations

import os

import pytest

from enginespec import parse_argv


def test_invalid_utf8_round_trips_losslessly() -> None:
    model = os.fsdecode(b"/models/caf\xe9-\xff\xfe")
    name = os.fsdecode(b"n\x80me")
    inv = parse_argv(["vllm", "serve", model, "--served-model-name", name])
    assert inv is not None
    assert inv.model == model
    assert os.fsencode(inv.model) == b"/models/caf\xe9-\xff\xfe"
    assert inv.served_model_names == (name,)


def test_invalid_utf8_in_launch_tokens_is_not_an_engine() -> None:
    assert parse_argv([os.fsdecode(b"vllm\xff"), "serve", "m"]) is None
    assert parse_argv([os.fsdecode(b"\xff"), os.fsdecode(b"\xfe")]) is None
    assert parse_argv(["python", os.fsdecode(b"-\xff"), "-m", "vllm.entrypoints.openai.api_server"]) is None


def test_empty_and_blank() -> None:
    assert parse_argv([]) is None
    assert parse_argv(["", "", ""]) is None
    inv = parse_argv(["llama-server", "", "-m", ""])
    assert inv is not None
    assert inv.model is None


def test_hundred_thousand_elements() -> None:
    argv = ["vllm", "serve", *(["--enforce-eager"] * 50_000), *(["x"] * 49_998), "--port", "8123"]
    assert len(argv) == 100_002
    inv = parse_argv(argv)
    assert inv is not None
    assert inv.model == "x"
    assert inv.port == 8123
    noise = ["bash", *(["-c"] * 100_000)]
    assert parse_argv(noise) is None


def test_two_mebibyte_argv() -> None:
    huge = "/m/" + "a" * (2 * 1024 * 1024)
    inv = parse_argv(["llama-server", "-m", huge, "-a", ",".join(["n"] * 1000)])
    assert inv is not None
    assert inv.model == huge
    assert inv.served_model_names == ("n",) * 1000
    assert parse_argv([huge]) is None
    assert parse_argv(["python", "-m", huge]) is None


def test_strings_the_os_cannot_carry_are_refused_with_the_index() -> None:
    with pytest.raises(ValueError, match=r"argv\[2\]"):
        parse_argv(["vllm", "serve", "\ud800"])
    with pytest.raises(TypeError, match=r"argv\[1\] must be str, not int"):
        parse_argv(["vllm", 5])  # type: ignore[list-item]


def test_surrogate_spellings_are_canonicalised() -> None:
    # "\udcc2\udc80" is the escaped spelling of bytes that decode to "\x80": same OS argument.
    inv = parse_argv(["vllm", "serve", "\udcc2\udc80"])
    assert inv is not None
    assert inv.model == "\x80"
