"""The Rust matcher and the pure-Python twin agree on random and mutated argv."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from enginespec._host.fallback import cgroup as _pycontainers
from enginespec._host.fallback import matcher as _pymatcher
from enginespec._host.fallback import proxy as _pyproxy
from enginespec.definition.signature import Evidence, LaunchForm, Signature, signatures_json
from enginespec.engines import all_signatures, get_engine_spec

# Compares the Rust matcher with the Python twin: nothing to compare where the extension is absent.
_native = pytest.importorskip("enginespec._native", reason="the Rust extension is not installed")

SIGNATURES = signatures_json(all_signatures())
NATIVE = _native.Matcher(SIGNATURES)
PYTHON = _pymatcher.Matcher(SIGNATURES)
CORPUS = [
    json.loads(line)["argv"]
    for name in ("argv-public.jsonl", "argv-new-public.jsonl", "argv-issue27-public.jsonl")
    for line in (Path(__file__).parents[1] / "data" / name).read_text().splitlines()
]
# What the launch-form data of the engines means in argv: renamed builds and their look-alikes,
# model names with and without an evidence suffix, ranks.
_PROGRAM_SUFFIXES = ("b5678", "cuda.EXE", "1.2", "x.sh", "x.", "", ".exe", "-", "a b")
_VALUES = ("0", "00", "1", "01", "-1", "+1", "$RANK", "m.gguf", "M.GGUF", "m.bin", "gguf")


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
            signature.address_flags,
            tuple(signature.mode_flags),
            signature.modeless_exit_flags,
            signature.no_value_flags,
            signature.multi_value_flags,
            signature.exit_flags,
            signature.follower_flags,
            signature.follower_rank_flags,
            tuple(signature.exit_values),
            *signature.exit_values.values(),
        ):
            words.update(group)
        for form in signature.launch_forms:
            words.update(form.executables)
            words.update(form.modules)
            words.update(form.subcommand)
            words.update(form.other_subcommands)
            words.update(form.exit_subcommands)
            words.update(form.loaders)
            words.update(form.host_flags)
            words.update(form.port_flags)
            words.update(form.leading_flags)
            words.update(form.leading_switches)
            words.update(flag + "=x" for flag in (*form.leading_flags, *form.leading_switches))
            words.update(prefix + "1.10" for prefix in form.loader_prefixes)
            words.update(stem + suffix for suffix in form.executable_suffixes for stem in ("m", "", "/a/m"))
            words.update(f"/x/{d}/{e}" for d in form.directories for e in form.executables)
            words.update(
                prefix + suffix for prefix in form.executable_prefixes for suffix in _PROGRAM_SUFFIXES
            )
            if form.evidence is not None:
                words.update(form.evidence.any_flags)
                words.update("m" + suffix for suffix in form.evidence.model_suffixes)
    variants = set()
    for word in words:
        variants.update({word, word.replace("-", "_"), word + "=v", word + "=", word + "=1", word.upper()})
    extra = {"python", "python3.11", "/v/bin/python3", "Python", "/v/bin/vllm", "8080", "x.exe", *_VALUES}
    extra |= {" ", "./model", "/usr/bin/ape", "-c", "/bin/sh"}
    extra |= {"h:1", "[::1]:2", ":3", "a:b:c", "[x]", "C:\\lib\\ollama\\llama-server.exe"}
    return sorted(variants | extra)


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
    assert sum(PYTHON.parse(argv) is not None for argv in CORPUS) > 90


# Made-up signatures that use every field the matcher reads, to check that the two backends
# interpret the data alike, not only the four engines' data.
_FLAGS = ("--a", "--b-c", "--d_e", "-x", "-y", "--no-z", "--r", "--s-t", "--hd", "--m")
_ALIASES = ("-p", "-q", "--old")
_NAMES = ("srv", "srv-gpu", "tool", "a.b")
_PREFIXES = ("srv-", "tool-", "s")
_SUFFIXES = (".lf", ".x")
_LOADERS = ("ld", "ld.elf")
_LOADER_PREFIXES = (".ld-",)
_DIRECTORIES = ("lib/srv", "opt")
_MODULES = ("pkg.server", "pkg")
_BUCKETS = ("model", "served", "host", "port", "address", "rank", "follower", "action", "other")


@st.composite
def _evidence(draw: st.DrawFn) -> Evidence | None:
    suffixes = draw(st.lists(st.sampled_from((".bin", ".GGUF", "x")), max_size=2, unique=True))
    flags = draw(st.lists(st.sampled_from(_FLAGS + _ALIASES), max_size=3, unique=True))
    positionals = draw(st.lists(st.sampled_from(("app:create", "m.bin", "serve")), max_size=2, unique=True))
    if not suffixes and not flags and not positionals:
        return None
    return Evidence(model_suffixes=tuple(suffixes), any_flags=tuple(flags), positionals=tuple(positionals))


@st.composite
def _form(draw: st.DrawFn) -> LaunchForm:
    executables = draw(st.lists(st.sampled_from(_NAMES), max_size=2, unique=True))
    prefixes = draw(st.lists(st.sampled_from(_PREFIXES), max_size=1))
    suffixes = draw(st.lists(st.sampled_from(_SUFFIXES), max_size=1))
    modules = draw(st.lists(st.sampled_from(_MODULES), max_size=1))
    loaders = tuple(draw(st.lists(st.sampled_from(_LOADERS), max_size=2, unique=True)))
    loader_prefixes = tuple(draw(st.lists(st.sampled_from(_LOADER_PREFIXES), max_size=1)))
    evidence = draw(st.none() | _evidence())
    any_program = draw(st.booleans()) and bool(loaders or loader_prefixes) and evidence is not None
    facts = draw(st.booleans())
    # a program's own address flags, only where it shares no flag of the signature
    own = st.lists(st.sampled_from(_FLAGS + _ALIASES), max_size=2, unique=True)
    host_flags, port_flags = (draw(own), draw(own)) if not facts else ([], [])
    assume(executables or prefixes or suffixes or modules or any_program)
    subcommand = tuple(draw(st.lists(st.sampled_from(("serve", "run")), max_size=1)))
    # global options before the subcommand (`ramalama --runtime=mlx serve`), only with one
    leading = st.lists(st.sampled_from(_FLAGS + _ALIASES), max_size=2, unique=True)
    leading_flags, leading_switches = (draw(leading), draw(leading)) if subcommand else ([], [])
    return LaunchForm(
        executables=tuple(executables),
        executable_prefixes=tuple(prefixes),
        executable_suffixes=tuple(suffixes),
        modules=tuple(modules),
        loaders=loaders,
        loader_prefixes=loader_prefixes,
        directories=tuple(draw(st.lists(st.sampled_from(_DIRECTORIES), max_size=1))),
        subcommand=subcommand,
        other_subcommands=tuple(draw(st.lists(st.sampled_from(("serve", "run", "m.bin")), max_size=2))),
        positional_model=draw(st.booleans()),
        positional_port=draw(st.booleans()),
        program_model=draw(st.booleans()),
        exit_subcommands=tuple(draw(st.lists(st.just("download"), max_size=1))),
        no_arguments=draw(st.booleans()),
        max_positionals=draw(st.none() | st.integers(0, 2)),
        any_program=any_program,
        facts=facts,
        host_flags=tuple(host_flags),
        port_flags=tuple(port_flags),
        evidence=evidence,
        leading_flags=tuple(leading_flags),
        leading_switches=tuple(leading_switches),
        role=draw(st.sampled_from(("server", "runner", "follower"))),
    )


@st.composite
def _signature(draw: st.DrawFn, engine: str) -> Signature:
    buckets: dict[str, list[str]] = {bucket: [] for bucket in _BUCKETS}
    for flag in _FLAGS:
        buckets[draw(st.sampled_from(_BUCKETS))].append(flag)
    subset = st.lists(st.sampled_from(_FLAGS), max_size=3, unique=True)
    fields: dict[str, Any] = {
        "engine": engine,
        "launch_forms": tuple(draw(st.lists(_form(), min_size=1, max_size=3))),
        "underscore_is_dash": draw(st.booleans()),
        "aliases": {
            alias: draw(st.sampled_from(_FLAGS)) for alias in draw(st.lists(st.sampled_from(_ALIASES)))
        },
        "model_flags": tuple(buckets["model"]),
        "served_name_flags": tuple(buckets["served"]),
        "served_name_separator": draw(st.sampled_from((None, ","))),
        "host_flags": tuple(buckets["host"]),
        "port_flags": tuple(buckets["port"]),
        "address_flags": tuple(buckets["address"]),
        "mode_flags": {flag: draw(st.booleans()) for flag in draw(subset)},
        "modeless_exit_flags": frozenset(draw(subset)),
        "follower_rank_flags": tuple(buckets["rank"]),
        "follower_flags": frozenset(buckets["follower"]),
        "no_value_flags": frozenset(draw(subset)),
        "no_value_prefixes": tuple(draw(st.lists(st.just("--no-"), max_size=1))),
        "multi_value_flags": frozenset(draw(subset)),
        "exit_flags": frozenset(draw(subset)),
        "exit_values": {
            flag: tuple(draw(st.lists(st.sampled_from(("stop", "0", "m.bin")), min_size=1, max_size=2)))
            for flag in buckets["action"]
        },
        "worker_titles": tuple(draw(st.lists(st.sampled_from(_TITLES), max_size=2, unique=True))),
        "values_required": draw(st.booleans()),
        "fold_workers": draw(st.booleans()),
        "default_host": "127.0.0.1",
        "default_port": 7000,
    }
    try:
        return Signature(**fields)
    except ValueError:
        assume(False)
        raise


_MODEL_VALUES = ("m.bin", "M.BIN", "a.Bin", "M.GGUF", "m.gguf", "mx", "mX", "x")
_SIGNATURE_WORDS = sorted(
    {
        *_FLAGS,
        *_ALIASES,
        *(flag.replace("-", "_") for flag in _FLAGS),
        *(flag + "=1" for flag in _FLAGS + _ALIASES),
        *_NAMES,
        *(name + ".exe" for name in _NAMES),
        *(prefix + suffix for prefix in _PREFIXES for suffix in _PROGRAM_SUFFIXES),
        *_MODULES,
        *_VALUES,
        "serve",
        "run",
        "python",
        "-m",
        "--",
        *_MODEL_VALUES,
        "a,b",
        "download",
        "stop",
        " ",
        "h:1",
        "[::1]:2",
        ":3",
        "a:b:c",
        "",
    }
)


_TITLES = ("W::", "srv", "e0::")
_PROGRAMS = sorted(
    {
        # process titles: a title, a bare prefix, a path ending in one
        "W::Core",
        "W::",
        "srv-x",
        "/a/W::x",
        "e0::Worker_TP0",
        *_NAMES,
        *(name + ".exe" for name in _NAMES),
        *(prefix + suffix for prefix in _PREFIXES for suffix in _PROGRAM_SUFFIXES),
        *_MODULES,
        *(stem + suffix for stem in ("m", "", "/a/m", "m.exe") for suffix in _SUFFIXES),
        *(f"/x/{d}/{n}" for d in _DIRECTORIES for n in _NAMES),
        "/v/bin/srv",
        "C:\\lib\\srv\\srv.exe",
        "other",
    }
)
_LOADER_WORDS = (*_LOADERS, *(prefix + "1.9" for prefix in _LOADER_PREFIXES), "/u/.ld-", "ld.sh")
_PIECE = st.one_of(
    st.sampled_from(_SIGNATURE_WORDS).map(lambda word: [word]),
    st.text(alphabet="-_=.,a01", max_size=4).map(lambda word: [word]),
    # a flag and a value: ranks, models with or without an evidence suffix
    st.tuples(st.sampled_from(_FLAGS + _ALIASES), st.sampled_from(_VALUES + _MODEL_VALUES)).map(list),
)
_ARGV = st.tuples(
    st.lists(st.sampled_from(_LOADER_WORDS), max_size=1).flatmap(
        lambda loader: st.sampled_from(_PROGRAMS).map(lambda program: " ".join([*loader, program]))
    ),
    st.lists(st.sampled_from(("serve", "run")), max_size=1),
    st.lists(_PIECE, max_size=6),
    # a loader and its program: two arguments, joined above only to be drawn together
).map(lambda parts: [*parts[0].split(" ", 1), *parts[1], *(word for piece in parts[2] for word in piece)])


def _crafted(signatures: tuple[Signature, ...]) -> list[list[str]]:
    """argv that launch each form of the signatures, with each rank and model value and the forms'
    evidence flags: the paths random argv reach too rarely."""
    crafted = []
    for sig in signatures:
        for form in sig.launch_forms:
            programs = [
                *form.executables,
                *(prefix + "b1" for prefix in form.executable_prefixes),
                *("m" + suffix for suffix in form.executable_suffixes),
                *(["./any", "-x"] if form.any_program else []),
            ]
            programs = [f"/x/{form.directories[0]}/{p}" for p in programs] if form.directories else programs
            loaders = [
                [],
                *([loader] for loader in form.loaders[:1]),
                *([prefix + "1.10"] for prefix in form.loader_prefixes[:1]),
            ]
            for program, loader in (
                (p, ld) for p in programs or ["python", "-m", *form.modules[:1]] for ld in loaders
            ):
                head = [*loader, program, *form.subcommand]
                evidence = list(form.evidence.any_flags[:1]) if form.evidence else []
                for flag in sig.follower_rank_flags[:1]:
                    crafted += [[*head, flag, value] for value in _VALUES]
                for flag in sig.model_flags[:1]:
                    crafted += [[*head, flag, value, *evidence] for value in _MODEL_VALUES]
                for flag in sig.address_flags[:1]:
                    crafted += [[*head, flag, value] for value in ("h:1", "[::1]:2", ":3", "a:b:c", "[x]")]
                crafted += [[*head, "m", "5001"], [*head, "download", "m"], [*head, *sorted(sig.mode_flags)]]
                crafted += [[*head, value, *evidence, *sorted(sig.exit_flags)[:1]] for value in _MODEL_VALUES]
                for flag in sig.exit_values:
                    crafted += [[*head, flag, value, *evidence] for value in ("stop", "0", "x", "--")]
                for flag in (*form.host_flags, *form.port_flags):
                    crafted += [[*head, flag, value] for value in ("h", "8080", "", "--help")]
                    crafted += [[*head, flag], [*head, "-x", flag, "1", flag]]
                # positionals for a strict parser: a lone " ", extras, after `--`
                crafted += [
                    [*head, *evidence, *words] for words in (["a"], ["a", "b"], [" "], ["--", "a", "b"])
                ]
    return crafted


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(("e0", "e1", "e2")), min_size=1, max_size=3, unique=True).flatmap(
        lambda names: st.tuples(*(_signature(name) for name in names))
    ),
    st.lists(_ARGV, min_size=1, max_size=8),
)
def test_made_up_signatures(signatures: tuple[Signature, ...], argvs: list[list[str]]) -> None:
    data = signatures_json(signatures)
    native, python = _native.Matcher(data), _pymatcher.Matcher(data)
    for argv in [*argvs, *_crafted(signatures)]:
        for program in (argv, ["python", *argv], ["python", "-m", *argv]):
            assert native.parse(program) == python.parse(program), (program, data)


# --- the cgroup parser (rust/cgroup.rs and _host/fallback/cgroup.py) -------------------------------

_HEX = "0123456789abcdef"
_ID = "9" * 8 + "ab" * 28
_UUID = "1f2e3d4c-5b6a-4798-8a7b-6c5d4e3f2a1b"
_CGROUP_WORDS = (
    "docker", "system.slice", "machine.slice", "kubepods", "kubepods.slice", "burstable", "besteffort",
    "container", "user@1000.service", "containerd.service", "kubelet.slice", "init.scope", "",
    _ID, _ID.upper(), _ID[:63], _ID + "0", f"pod{_UUID}", f"pod{_UUID.replace('-', '_')}", f"pod{_HEX * 2}",
    f"pod{_UUID[:-1]}", f"docker-{_ID}.scope", f"docker-{_ID}", f"libpod-{_ID}.scope",
    f"libpod-conmon-{_ID}.scope",
    f"cri-containerd-{_ID}.scope", f"crio-{_ID}.scope", f"crio-{_ID}.scope.scope", f"containerd-{_ID}.scope",
    f"kubepods-burstable-pod{_UUID.replace('-', '_')}.slice", f"kubepods-pod{_HEX * 2}.slice",
    f"kubelet-kubepods-besteffort-pod{_UUID.replace('-', '_')}.slice", f"kubepods-Burst-pod{_HEX * 2}.slice",
    f"x-kubepods-pod{_UUID}.slice",
    f"kubepods-burstable-pod{_UUID.replace('-', '_')}.slice:cri-containerd:{_ID}",
    f"a:crio:{_ID}", f"a:b:crio:{_ID}", f":docker:{_ID}", f"docker-{_ID}.mount", "kubepods-pod.slice", "é",
    "run-user-0.mount", ".mount",
)  # fmt: skip
_SLICE_UUID = _UUID.replace("-", "_")
#: The path shapes the scanner must read (tests/scanning/test_containers.py), to be edited.
_CGROUP_SHAPES = (
    f"docker/{_ID}", f"system.slice/docker-{_ID}.scope", f"machine.slice/libpod-{_ID}.scope/container",
    f"kubepods/burstable/pod{_UUID}/{_ID}",
    f"kubepods.slice/kubepods-burstable-pod{_SLICE_UUID}.slice/cri-containerd-{_ID}.scope",
    f"system.slice/containerd.service/kubepods-burstable-pod{_SLICE_UUID}.slice:cri-containerd:{_ID}",
)  # fmt: skip


@st.composite
def _edited_shape(draw: st.DrawFn) -> str:
    parts = draw(st.sampled_from(_CGROUP_SHAPES)).split("/")
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(parts)))
        edit = draw(st.sampled_from(["insert", "delete", "replace"]))
        word = draw(st.sampled_from(_CGROUP_WORDS))
        if edit == "insert":
            parts.insert(at, word)
        elif parts and at < len(parts):
            parts[at : at + 1] = [] if edit == "delete" else [word]
    return draw(st.sampled_from(["0::/", "4:cpu,cpuacct:/", "1:name=systemd:/x/"])) + "/".join(parts)


_cgroup_line = st.tuples(
    st.sampled_from(["0", "1", "12", "00", "x", ""]),
    st.sampled_from(["", "cpu", "cpu,cpuacct", "name=systemd", "memory"]),
    st.lists(st.sampled_from(_CGROUP_WORDS), max_size=8),
).map(lambda line: f"{line[0]}:{line[1]}:/" + "/".join(line[2]))


@settings(max_examples=1500, deadline=None)
@given(st.lists(_cgroup_line, max_size=6), st.sampled_from(["\n", "\r\n", "\x85", ""]))
def test_cgroup_parsers_agree(lines: list[str], end: str) -> None:
    data = (end or "\n").join(lines).encode("utf-8") + end.encode("utf-8")
    assert _native.parse_cgroup(data) == _pycontainers.parse_cgroup(data)


@settings(max_examples=3000, deadline=None)
@given(st.lists(_edited_shape(), min_size=1, max_size=3))
def test_cgroup_parsers_agree_on_edited_shapes(lines: list[str]) -> None:
    data = "\n".join(lines).encode("utf-8")
    assert _native.parse_cgroup(data) == _pycontainers.parse_cgroup(data)


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=300), st.sampled_from(_CGROUP_WORDS))
def test_cgroup_parsers_agree_on_bytes(noise: bytes, word: str) -> None:
    for data in (noise, b"0::/" + noise + word.encode(), b"0::/" + word.encode() + noise):
        assert _native.parse_cgroup(data) == _pycontainers.parse_cgroup(data)


# --- the docker-proxy argv parser (rust/proxy.rs and _host/fallback/proxy.py) -----------------

_PROXY_ARGV_WORDS = (
    "docker-proxy", "/usr/bin/docker-proxy", "docker-proxyx", "-proto", "--proto=tcp", "tcp", "udp",
    "-host-ip", "--host-ip", "-host-ip=::", "---host-ip", "-host-port", "-host-port=", "-container-ip",
    "-container-ip=172.17.0.2", "-container-port", "--container-port=8000", "0.0.0.0", "::", "8000",
    "65535", "65536", "00080", "0", "+1", "-", "--", "=", "-=", "", "é", "٨٠",
)  # fmt: skip


@settings(max_examples=3000, deadline=None)
@given(
    st.sampled_from(["docker-proxy", "/usr/bin/docker-proxy", "docker-proxyx", "", "é/docker-proxy"]),
    st.lists(st.one_of(st.sampled_from(_PROXY_ARGV_WORDS), st.text(max_size=6)), max_size=14),
)
def test_proxy_argv_parsers_agree(program: str, args: list[str]) -> None:
    argv = [program, *args]
    assert _native.proxy_flags(argv) == _pyproxy.proxy_flags(argv)
    # dockerd's own argv, with the edits: both find the forward in it, or neither does
    full = [program, "-proto", "tcp", "-host-ip", "0.0.0.0", "-host-port", "8001", *args]
    full += ["-container-ip", "172.17.0.2", "-container-port", "8000"]
    assert _native.proxy_flags(full) == _pyproxy.proxy_flags(full)


def test_every_field_of_a_signature_is_drawn() -> None:
    """The made-up signatures set every field the models have, so a field one matcher reads and
    the other ignores cannot hide from the comparison."""
    drawn: dict[type, set[str]] = {Signature: set(), LaunchForm: set(), Evidence: set()}

    @given(_signature("e"))
    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    def collect(signature: Signature) -> None:
        drawn[Signature] |= signature.model_fields_set
        for form in signature.launch_forms:
            drawn[LaunchForm] |= form.model_fields_set
            if form.evidence is not None:
                drawn[Evidence] |= form.evidence.model_fields_set

    collect()
    facade_only = {
        "abbreviations",
        "secret_flags",
        "model_is_served_name",
        "checkout_files",
        "listen_default",
    }
    for model, fields in drawn.items():
        assert set(model.model_fields) - facade_only <= fields, model


def _evidence_of(document: dict[str, Any]) -> dict[str, Any]:
    form = document["launch_forms"][0]
    form["evidence"] = form["evidence"] or {"any_flags": ["--x"]}
    return form["evidence"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("where", [lambda s: s, lambda s: s["launch_forms"][0], _evidence_of])
def test_a_field_neither_matcher_knows_is_refused_by_both(where: Any) -> None:
    document = json.loads(signatures_json([get_engine_spec("vllm").signature]))
    where(document[0])["made_up_field"] = 1
    data = json.dumps(document)
    for matcher in (_native.Matcher, _pymatcher.Matcher):
        with pytest.raises(ValueError, match="made_up_field"):
            matcher(data)


def test_a_leading_flag_declared_both_ways_takes_its_value_on_both_backends() -> None:
    # found by test_made_up_signatures: `--a` is a leading option with a value and a leading exit
    # switch of e0, whose form wants a subcommand; e1 takes the same program prefix
    e0 = Signature(
        engine="e0",
        launch_forms=(
            LaunchForm(
                executable_prefixes=("srv-",),
                subcommand=("serve",),
                leading_flags=("--a",),
                leading_switches=("--a",),
            ),
        ),
        model_flags=("--a",),
        exit_flags=frozenset({"--a"}),
        default_host="127.0.0.1",
        default_port=7000,
    )
    e1 = Signature(
        engine="e1",
        launch_forms=(LaunchForm(executable_prefixes=("srv-",)),),
        model_flags=("--a",),
        default_host="127.0.0.1",
        default_port=7000,
    )
    data = signatures_json((e0, e1))
    native, python = _native.Matcher(data), _pymatcher.Matcher(data)
    argv = ["srv-b1", "--a", "m.bin"]
    assert native.parse(argv) == python.parse(argv)
    parsed = python.parse(argv)
    assert parsed is not None
    assert (parsed.engine_index, parsed.model) == (1, "m.bin")
