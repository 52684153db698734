"""parse_argv(spec.build_command(recipe)) recovers what the recipe said, for every engine."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from enginespec import Config, Recipe, get_engine_spec, parse_argv
from enginespec.engines import BUILTIN_ENGINE_SPECS
from helpers.facts import STARTED_BY_CLIENT, names_a_model

# `ollama serve` takes no arguments: its address goes in OLLAMA_HOST (test_engines_b.py); LM Studio
# is started by its client (test_command.py).
ENGINES = [
    spec.id
    for spec in BUILTIN_ENGINE_SPECS
    if not spec.signature.launch_forms[0].no_arguments and spec.id not in STARTED_BY_CLIENT
]
CONFIG = Config(data_dir=Path("/nonexistent/enginespec-roundtrip"))
# Names as people write them: org/repo ids, absolute and relative paths, spaces, unicode, dots.
_segment = st.text(alphabet="abcXYZ019._ -é中", min_size=1, max_size=12).filter(
    lambda s: s.strip() == s and s not in (".", "..") and not s.startswith("-")
)
model_paths = st.one_of(
    st.builds(lambda a, b: f"{a}/{b}", _segment, _segment),
    st.builds(lambda parts: "/" + "/".join(parts), st.lists(_segment, min_size=1, max_size=4)),
    _segment,
)
# no commas: llama-server splits --alias on them (tested in test_command.py)
served_names = st.text(alphabet="abcXYZ019._-/:é", min_size=1, max_size=16).filter(
    lambda s: not s.startswith("-")
)
hosts = st.sampled_from(["127.0.0.1", "0.0.0.0", "::1", "::", "localhost", "10.1.2.3", "/tmp/engine.sock"])


@st.composite
def recipes(draw: st.DrawFn) -> Recipe:
    engine = draw(st.sampled_from(ENGINES))
    optional = {
        "served_model_name": served_names,
        "port": st.integers(1, 65535),
        "tensor_parallel_size": st.integers(1, 8),
        "max_model_len": st.integers(1, 1 << 20),
        "gpu_memory_utilization": st.floats(0.05, 1.0),
        "gpu_layers": st.integers(-1, 200),
        "max_num_seqs": st.integers(1, 512),
        "trust_remote_code": st.booleans(),
        "tool_call_parser": st.sampled_from(["hermes", "qwen3_coder"]),
        "reasoning_parser": st.sampled_from(["qwen3", "deepseek_r1"]),
        # a leading dash is refused by Recipe (it would be read as a flag)
        "api_key": st.text(alphabet="abcdef0123-", min_size=1, max_size=10).filter(lambda s: s[0] != "-"),
    }
    fields = {name: draw(strategy) for name, strategy in optional.items() if draw(st.booleans())}
    extra = draw(
        st.dictionaries(
            st.sampled_from(["seed", "enforce_eager", "log-level", "threads", "no-mmap", "lora"]),
            st.one_of(st.booleans(), st.integers(0, 99), st.lists(st.sampled_from(["a", "b"]), max_size=2)),
            max_size=3,
        )
    )
    return Recipe(engine=engine, model_path=draw(model_paths), host=draw(hosts), extra_args=extra, **fields)


@settings(max_examples=600, deadline=None)
@given(recipes())
def test_round_trip(recipe: Recipe) -> None:
    spec = get_engine_spec(recipe.engine)
    argv = spec.build_command(recipe, CONFIG)
    inv = parse_argv(argv)
    signature = spec.signature
    bare = [f"--{key.replace('_', '-')}" for key, value in recipe.extra_args.items() if value is True]
    if signature.values_required and set(map(signature.canonical, bare)) - signature.no_value_flags:
        # clap engines (TGI) refuse an option they need a value for: `--seed` alone is no server
        assert inv is None, argv
        return
    assert inv is not None, argv
    assert inv.engine == recipe.engine
    # an engine that reads a scheme-less model as a registry's is given a path as a file:// URI
    # (Flags.model_uri, RamaLama), and argv says the URI
    absolute = Path(recipe.model_path).is_absolute()
    written = Path(recipe.model_path).as_uri() if spec.flags.model_uri and absolute else recipe.model_path
    assert inv.model == (written if names_a_model(recipe.engine) else None)
    if spec.signature.served_name_flags:
        assert inv.served_model_name == recipe.served_model_name
    elif spec.signature.model_is_served_name and names_a_model(recipe.engine):  # TabbyAPI
        assert inv.served_model_name == recipe.model_path
    else:
        assert inv.served_model_name is None
    variables = [name for name, kind in spec.settings.environment.items() if kind in ("host", "address")]
    if signature.host_flags or signature.address_flags:
        assert inv.host == recipe.host
    elif variables:  # MAX, llmman: the host goes in the command's environment (test_command.py)
        assert inv.host is None
        bracketed = f"[{recipe.host}]" if ":" in recipe.host else recipe.host
        assert spec.plan(recipe, CONFIG).env[variables[0]] in (recipe.host, bracketed) or spec.plan(
            recipe, CONFIG
        ).env[variables[0]].startswith(bracketed + ":")
    else:  # exo: started on its own default host
        assert inv.host is None
    if signature.port_flags or signature.address_flags:
        assert inv.effective_port == (recipe.port or spec.default_port)
    else:  # llmman: host and port in LLMMAN_HOST
        assert spec.plan(recipe, CONFIG).env[variables[0]].endswith(f":{recipe.port or spec.default_port}")
