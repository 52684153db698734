"""What every command family of ``enginespec`` shares: how a command says things (lines on stdout,
one literal line on stderr, a model as JSON), the names engines are typed by, and the running
engine a typed target names. Only ``sys`` and :mod:`enginespec.display` at import: the parser
imports every family, and each family imports this."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from enginespec.display import literal

if TYPE_CHECKING:
    from pydantic import BaseModel

    from enginespec.process.record import EngineProcess

#: what a table shows for a model argv does not name.
MODEL_UNKNOWN = "<unknown>"
#: Stands for the list of engine ids in a help text, filled in only when help is printed (see
#: :mod:`enginespec.cli.helptext`): the list needs every engine record (and plugin) loaded, which
#: most commands never need.
ENGINE_LIST = "\x00engines\x00"


def fail(command: str, message: object) -> None:
    """One line on stderr, shown literally (messages may quote argv, paths or a server's words)."""
    print(f"enginespec {command}: {literal(str(message))}", file=sys.stderr)


def out(lines: Sequence[str]) -> None:
    """Lines on stdout, as plain text: a reader that goes away (``| head``) ends the command
    quietly (see :func:`enginespec.cli.app.main`)."""
    sys.stdout.write("".join(line + "\n" for line in lines))
    sys.stdout.flush()


def json_text(model: BaseModel) -> str:
    """A model as indented ASCII JSON: argv bytes that are not UTF-8 (surrogate escapes from
    /proc) become ``\\udcXX`` escapes, where pydantic's own JSON would fail."""
    from enginespec.untrusted.documents import dumps

    return dumps(model.model_dump(mode="json"), indent=2)


def engine_ids() -> tuple[str, ...]:
    from enginespec.definition.registry import engine_ids

    return engine_ids()


def engine_names() -> dict[str, str]:
    """Every name an engine is typed by (id or alias) -> its id."""
    from enginespec.definition.registry import engine_names

    return engine_names()


def find(command: str, target: str, *, listen_ports: bool = True) -> EngineProcess | None:
    """The running engine a target names (see :mod:`enginespec.cli.targets`); None (said on stderr)
    when there is none or several."""
    from enginespec.cli.targets import find
    from enginespec.errors import InvalidInputError

    try:
        return find(target, listen_ports=listen_ports)
    except InvalidInputError as err:
        fail(command, err)
        return None
