"""What the active backend reads off an argv, as one tuple the tests compare against a label."""

from __future__ import annotations

from typing import Any

from enginespec import parse_argv

#: Engines started by a client that has the engine's own program serve (LM Studio's `lms server
#: start`): their serve command is the client's argv, never a server's, so it does not parse back.
STARTED_BY_CLIENT = frozenset({"lmstudio"})


def names_a_model(engine: str) -> bool:
    """Whether the engine's serve command names its model (no: servers that load their models at
    run time, Lemonade's, Xinference's, oMLX's, exo's, are started without one)."""
    from enginespec.engines import get_engine_spec

    spec = get_engine_spec(engine)
    return spec.model_flag is not None or spec.signature.launch_forms[0].positional_model


def argv_facts(argv: list[str], *, first_name: bool = False, role: bool = True) -> tuple[Any, ...] | None:
    """(engine, model, served names, host, port, role) of the invocation ``argv`` parses to, or None
    when it is no engine's server; ``first_name`` gives the first served name alone, ``role=False``
    leaves the role out."""
    inv = parse_argv(argv)
    if inv is None:
        return None
    names = inv.served_model_name if first_name else inv.served_model_names
    facts = (inv.engine, inv.model, names, inv.host, inv.port, inv.role)
    return facts if role else facts[:5]
