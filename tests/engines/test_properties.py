"""Property tests (both backends): Recipe validation on arbitrary, hostile values either refuses
with a message that names the field and never the secret, or builds a command that parse_argv
reads back; secrets never reach a printable form and always reach the real argv."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from enginespec import Command, CommandError, Config, EngineSpec, Recipe, get_engine_spec, parse_argv
from enginespec.engines import BUILTIN_ENGINE_SPECS
from helpers.facts import STARTED_BY_CLIENT, names_a_model

CONFIG = Config(data_dir=Path("/nonexistent/enginespec-properties"))
ENGINES = [spec.id for spec in BUILTIN_ENGINE_SPECS]
# Text as an attacker writes it: control characters, dashes, markup, unicode, surrogate escapes.
hostile = st.text(
    alphabet=st.one_of(
        st.sampled_from([*"-=:/[]\\ \n\t\x1b\x07,.\"'$;", "\u202e", "\udcff", "é", "中"]),
        st.characters(codec="utf-8"),
    ),
    max_size=24,
)
SECRET = "sk-PROPERTY-secret"
OUTCOMES = {"refused": 0, "built": 0}


def _plan(spec: EngineSpec, recipe: Recipe) -> Command | CommandError:
    try:
        return spec.plan(recipe, CONFIG)
    except CommandError as err:
        return err


def _recipe(**fields: object) -> Recipe | ValidationError:
    try:
        return Recipe(**fields)  # type: ignore[arg-type]
    except ValidationError as err:
        return err


@settings(max_examples=int(os.environ.get("ENGINESPEC_PROPERTY_EXAMPLES", "400")), deadline=None)
@given(
    engine=st.sampled_from(ENGINES),
    model=hostile,
    served=st.one_of(st.none(), hostile),
    host=hostile,
    port=st.one_of(st.none(), st.integers(-5, 70000)),
    key=st.one_of(st.none(), hostile),
    extra=st.dictionaries(hostile, st.one_of(hostile, st.integers(), st.booleans()), max_size=2),
)
def test_hostile_recipes_refuse_or_round_trip(
    engine: str,
    model: str,
    served: str | None,
    host: str,
    port: int | None,
    key: str | None,
    extra: dict[str, object],
) -> None:
    api_key = None if key is None else SECRET + key
    fields = {"served_model_name": served, "port": port, "api_key": api_key, "extra_args": extra}
    recipe = _recipe(engine=engine, model_path=model, host=host or "127.0.0.1", **fields)
    if isinstance(recipe, ValidationError):
        assert SECRET not in str(recipe)
        assert all(problem["loc"] for problem in recipe.errors())  # each names its field
        OUTCOMES["refused"] += 1
        return
    OUTCOMES["built"] += 1
    spec = get_engine_spec(engine)
    command = _plan(spec, recipe)
    if isinstance(command, CommandError):  # an extra_args key that is an exit flag (-h, --version)
        assert "print and exit" in str(command)
        return
    for shown in (
        repr(recipe),
        recipe.model_dump_json(),
        repr(command),
        command.model_dump_json(),
        command.shell(),
    ):
        assert SECRET not in shown
    # a flag extra_args sets is the user's to override (and its value may be anything)
    signature = spec.signature
    overridden = {signature.canonical("--" + key.lstrip("-").replace("_", "-")) for key in extra}
    overridden |= {signature.canonical("-" + key.lstrip("-")) for key in extra}
    key_flag = spec.serving.api_key_flag
    if api_key is not None and key_flag and signature.canonical(key_flag) not in overridden:
        assert api_key in command.argv
    if "\x00" in "".join(command.argv):
        return  # not an OS argument: the launcher would refuse it, parse_argv refuses it too
    inv = parse_argv(list(command.argv))
    if engine in STARTED_BY_CLIENT:  # the client's argv (`lms server start`), no server's
        assert inv is None
        return
    assert inv is not None, command.argv
    assert inv.engine == engine
    if spec.signature.launch_forms[0].no_arguments:  # `ollama serve`: the address is in OLLAMA_HOST
        assert (inv.model, inv.host, inv.port) == (None, None, None)
        return
    if not overridden & {*signature.model_flags, *signature.host_flags, *signature.port_flags}:
        assert inv.model == (recipe.model_path if names_a_model(engine) else None)
        # MAX, llmman take their host in a variable, not in argv; exo is started on its default
        addressed = bool(signature.host_flags or signature.address_flags)
        assert inv.host == (recipe.host if addressed else None)
        if recipe.port is not None and (addressed or signature.port_flags):
            assert inv.port == recipe.port


def test_both_outcomes_were_exercised() -> None:
    # runs after the property test in file order: hostile input must not all be refused
    assert OUTCOMES["refused"] > 20
    assert OUTCOMES["built"] > 20
