"""Parsing a config document another user wrote (YAML, JSON or TOML) with limits, so that no document
costs more than a few milliseconds and megabytes, or raises anything but :class:`DocumentError`.

YAML is composed here from the parser's events (libyaml's when PyYAML has it: the pure-Python
scanner is quadratic in nesting), one node at a time without recursion, counting every node
an alias repeats: an alias bomb (a few kilobytes that expand to gigabytes) is refused as soon as
its expansion passes :data:`MAX_VALUES` values or :data:`MAX_TEXT` characters, a nesting deeper
than :data:`MAX_DEPTH` as soon as it is entered. JSON is parsed by the standard library (no
recursion limit is reached before :data:`MAX_DEPTH` is checked, see :func:`parse_json`). Either
way an integer longer than :data:`MAX_INTEGER_DIGITS` digits is refused (Python's own limit
raises ``ValueError`` beyond 4,300), so is a number that is not finite (``1e400``, ``.inf``,
``NaN``: sums and ratios of them raise or print as no JSON), and so is a string with a lone
surrogate (``"\\ud800"``, which no UTF-8 output can carry), and parsing stops after
:data:`MAX_SECONDS` of CPU. JSON's integers are also held to 64 bits (:data:`MAX_INTEGER`), and
a refused number is named with its field (``data[0].size: inf is not a finite number``).
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import yaml

#: Most values (scalars and collections) a document may hold, aliases expanded.
MAX_VALUES = 10_000
#: Most characters of scalars a document may hold, aliases expanded.
MAX_TEXT = 1 << 20
#: Deepest nesting of collections.
MAX_DEPTH = 32
#: Longest integer, in digits.
MAX_INTEGER_DIGITS = 64
#: Largest integer (either sign) a JSON document may hold: 64 bits, what every format read uses.
MAX_INTEGER = (1 << 64) - 1
#: Most CPU time one document may take to parse.
MAX_SECONDS = 0.5


class DocumentError(ValueError):
    """Why a document was not taken: a phrase such as ``is not valid YAML`` (a ``ValueError``:
    a caller that refuses a malformed answer refuses a document beyond the limits alike)."""


def _surrogate_free(text: str) -> str:
    if any("\ud800" <= char <= "\udfff" for char in text):
        raise DocumentError("holds a string with a lone surrogate (not Unicode text)")
    return text


def _loader_class() -> type[yaml.SafeLoader]:
    import yaml

    base: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[misc]
        """The safe loader, whose integers are at most MAX_INTEGER_DIGITS digits long."""

        def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
            digits = sum(char.isdigit() for char in node.value)
            if digits > MAX_INTEGER_DIGITS:
                raise DocumentError(f"holds an integer of {digits} digits (at most {MAX_INTEGER_DIGITS})")
            return int(super().construct_yaml_int(node))

        def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
            value = float(super().construct_yaml_float(node))
            if not math.isfinite(value):  # .inf, .nan, 1e400: no reader may compute with them
                raise DocumentError(f"holds a number that is not finite ({node.value[:24]})")
            return value

    Loader.add_constructor("tag:yaml.org,2002:int", Loader.construct_yaml_int)
    Loader.add_constructor("tag:yaml.org,2002:float", Loader.construct_yaml_float)
    return Loader


_LOADER: type[yaml.SafeLoader] | None = None


def _compose(loader: Any) -> yaml.Node | None:
    """The single document of the loader's stream, as nodes, within the limits."""
    import yaml

    deadline = time.thread_time() + MAX_SECONDS
    #: per node (by id): its weight (values, characters) and height, aliases expanded.
    sizes: dict[int, tuple[int, int, int]] = {}
    anchors: dict[str, yaml.Node] = {}
    stack: list[tuple[yaml.Node, list[Any]]] = []
    values = text = 0
    root: yaml.Node | None = None
    loader.get_event()  # StreamStartEvent
    if loader.check_event(yaml.StreamEndEvent):
        return None
    loader.get_event()  # DocumentStartEvent
    events = 0
    while True:
        event: Any = loader.get_event()
        start: Any = event.start_mark  # a libyaml Mark, or PyYAML's
        events += 1
        if events % 256 == 0 and time.thread_time() > deadline:
            raise DocumentError(f"takes longer than {MAX_SECONDS:g} s to parse")
        node: yaml.Node
        if isinstance(event, yaml.DocumentEndEvent):
            break
        if isinstance(event, yaml.AliasEvent):
            target = anchors.get(event.anchor or "")
            if target is None or id(target) not in sizes:
                raise DocumentError("holds an alias to an anchor that is not defined (or to itself)")
            node = target
            weight, chars, height = sizes[id(target)]
            if len(stack) + height > MAX_DEPTH:
                raise DocumentError(f"is nested deeper than {MAX_DEPTH} levels (aliases expanded)")
            values, text = values + weight, text + chars
        elif isinstance(event, yaml.ScalarEvent):
            tag = event.tag
            if tag is None or tag == "!":
                tag = loader.resolve(yaml.ScalarNode, event.value, event.implicit)
            value = _surrogate_free(event.value)
            node = yaml.ScalarNode(tag, value, start, start, event.style)
            sizes[id(node)] = (1, len(value), 0)
            if event.anchor is not None:
                anchors[event.anchor] = node
            values, text = values + 1, text + len(value)
        elif isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            if len(stack) >= MAX_DEPTH:
                raise DocumentError(f"is nested deeper than {MAX_DEPTH} levels")
            kind = yaml.SequenceNode if isinstance(event, yaml.SequenceStartEvent) else yaml.MappingNode
            tag = event.tag
            if tag is None or tag == "!":
                tag = loader.resolve(kind, None, event.implicit)
            node = kind(tag, [], start, None, flow_style=event.flow_style)
            if event.anchor is not None:
                anchors[event.anchor] = node
            stack.append((node, []))
            values += 1
            continue
        else:  # SequenceEndEvent, MappingEndEvent: its members were counted as they came
            node, children = stack.pop()
            members = [sizes[id(child)] for child in children]
            height = 1 + max((member[2] for member in members), default=0)
            sizes[id(node)] = (1 + sum(m[0] for m in members), sum(m[1] for m in members), height)
            mapping = isinstance(node, yaml.MappingNode)
            node.value = list(zip(children[::2], children[1::2], strict=True)) if mapping else children
        if values > MAX_VALUES:
            raise DocumentError(f"holds more than {MAX_VALUES} values (aliases expanded)")
        if text > MAX_TEXT:
            raise DocumentError(f"holds more than {MAX_TEXT} characters of text (aliases expanded)")
        if not stack:
            root = node
        else:
            stack[-1][1].append(node)
    if not loader.check_event(yaml.StreamEndEvent):
        raise DocumentError("holds more than one YAML document")
    return root


def parse_yaml(data: bytes) -> object:
    """The value of a YAML document (as PyYAML's ``safe_load`` gives it), within the limits."""
    import yaml

    global _LOADER
    if _LOADER is None:
        _LOADER = _loader_class()
    loader = _LOADER(data)
    try:
        node = _compose(loader)
        return None if node is None else loader.construct_document(node)
    except yaml.YAMLError:
        raise DocumentError("is not valid YAML") from None
    except RecursionError:  # a merge key chain (`<<`) the constructor follows recursively
        raise DocumentError(f"is nested deeper than {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()


class _Unfit:
    """A number the document holds that no reader may take: its problem is raised, with the
    field it sits in, when the value is walked (the parser's hooks do not know the field)."""

    __slots__ = ("problem",)

    def __init__(self, problem: str) -> None:
        self.problem = problem


def _json_int(text: str) -> int | _Unfit:
    """An integer of the parse again (see :func:`_loads`): its length checked before it is
    converted (a conversion of a long one costs time in the square of its digits)."""
    digits = len(text.lstrip("-"))
    return _Unfit(_too_long(digits)) if digits > MAX_INTEGER_DIGITS else int(text)


def _too_long(digits: int) -> str:
    return f"holds an integer of {digits} digits (at most {MAX_INTEGER_DIGITS})"


def _json_constant(text: str) -> _Unfit:
    return _Unfit(f"{float(text)!r} is not a finite number")  # NaN, Infinity, -Infinity


def _loads(data: bytes) -> object:
    """The document's value, its numbers parsed by the C parser and checked in the walk after
    (a Python hook per number took 0.3 s of CPU for the 400,000 of an 800 KB answer, in a
    health check's event loop); an integer too long for the parser (past Python's 4,300
    digits) is parsed again with the hook that names its length."""
    try:
        try:
            return json.loads(data, parse_constant=_json_constant)
        except ValueError:
            # JSONDecodeError, UnicodeDecodeError (no retry can help) or an integer too long
            return json.loads(data, parse_int=_json_int, parse_constant=_json_constant)
    except RecursionError:
        raise DocumentError(f"is nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, TypeError):  # JSONDecodeError, UnicodeDecodeError; bytes of no encoding
        raise DocumentError("is not valid JSON") from None


def _unfit_number(value: int | float) -> str | None:
    """Why a parsed number is refused (1e400 parses as inf: no reader may sum, divide or print
    it; an integer must fit in 64 bits, what every format read uses), or ``None``; ``True`` and
    ``False`` are no numbers."""
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{value!r} is not a finite number"
    if isinstance(value, bool) or -MAX_INTEGER <= value <= MAX_INTEGER:
        return None
    digits = len(str(abs(value)))
    if digits > MAX_INTEGER_DIGITS:
        return _too_long(digits)
    return f"holds an integer of {digits} digits, out of range (64 bits)"


def _field(path: tuple[str | int, ...], where: str) -> str:
    """Where a value sits, as ``data[0].id`` (keys shortened and made printable), below ``where``
    (``engines``: ``engines[3].start_time``)."""
    shown = where
    for part in path:
        if isinstance(part, int):
            shown += f"[{part}]"
        else:
            key = part if len(part) <= 40 else part[:40] + "..."
            key = key if key.isprintable() else ascii(key)
            shown += f".{key}" if shown else key
    return shown or "the document"


def parse_json(
    data: bytes,
    *,
    max_bytes: int | None = None,
    max_values: int = MAX_VALUES,
    where: str = "",
    surrogates: bool = False,
) -> object:
    """The value of a JSON document, within the limits: at most ``max_bytes`` bytes (when
    given), :data:`MAX_DEPTH` levels, ``max_values`` values, integers of 64 bits and finite
    numbers only (``1e400``, ``NaN``, ``Infinity`` are refused, naming the field below ``where``,
    as ``engines[3].start_time: inf is not a finite number``). ``surrogates``: lone surrogates
    are taken, for enginespec's own documents (an agent's engines, events), where argv bytes
    that are not UTF-8 are ``\\udcXX`` escapes by design. The one door
    for every JSON an engine, an agent, a subprocess or a model file gives: it never raises
    anything but :class:`DocumentError`."""
    if max_bytes is not None and len(data) > max_bytes:
        raise DocumentError(f"is larger than {max_bytes} bytes: not read")
    started = time.thread_time()
    value = _loads(data)
    _walk(value, max_values, where, surrogates)
    # JSON's cost is linear in its size (no aliases): larger documents (an agent's engines, a
    # safetensors index) get time in proportion, well above what the stdlib parser needs.
    allowed = MAX_SECONDS * max(1.0, len(data) / (1 << 20))
    if time.thread_time() - started > allowed:
        raise DocumentError(f"takes longer than {allowed:g} s to parse")
    return value


def parse_toml(data: bytes) -> object:
    """The value of a TOML document (as the standard library's ``tomllib`` gives it), within the
    limits of :func:`parse_json` (its values walked the same way); never raises anything but
    :class:`DocumentError`."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib

    started = time.thread_time()
    try:
        value = tomllib.loads(data.decode("utf-8"))
    except RecursionError:  # arrays or inline tables nested past the parser's recursion
        raise DocumentError(f"is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError:  # TOMLDecodeError, UnicodeDecodeError, an integer past Python's digits
        raise DocumentError("is not valid TOML") from None
    _walk(value, MAX_VALUES, "", False)
    if time.thread_time() - started > MAX_SECONDS:
        raise DocumentError(f"takes longer than {MAX_SECONDS:g} s to parse")
    return value


def _walk(value: object, max_values: int, where: str, surrogates: bool) -> None:
    """Raises :class:`DocumentError` where a parsed document passes the limits (see
    :func:`parse_json`)."""
    pending: list[tuple[object, tuple[str | int, ...]]] = [(value, ())]
    count = 0
    while pending:
        item, path = pending.pop()
        count += 1
        if count > max_values:
            raise DocumentError(f"holds more than {max_values} values")
        if isinstance(item, _Unfit):
            raise DocumentError(f"{_field(path, where)}: {item.problem}")
        if isinstance(item, str) and not surrogates:
            _surrogate_free(item)
        elif isinstance(item, int | float) and (unfit := _unfit_number(item)) is not None:
            raise DocumentError(f"{_field(path, where)}: {unfit}")
        elif isinstance(item, (dict, list)):
            if len(path) >= MAX_DEPTH:
                raise DocumentError(f"is nested deeper than {MAX_DEPTH} levels")
            if count + len(pending) + len(item) > max_values:  # each is counted when walked
                raise DocumentError(f"holds more than {max_values} values")
            if isinstance(item, dict):
                for key, member in item.items():
                    if not surrogates:
                        _surrogate_free(key)
                    pending.append((member, (*path, key)))
            else:
                pending.extend((member, (*path, index)) for index, member in enumerate(item))


def json_object(data: bytes, *, max_bytes: int | None = None) -> dict[str, Any] | None:
    """The document when it is a JSON object within the limits, else ``None`` (for an answer
    whose only use is a member or two: a refused one is the same as one of another shape)."""
    try:
        value = parse_json(data, max_bytes=max_bytes)
    except DocumentError:
        return None
    return value if isinstance(value, dict) else None


def _finite(value: object, where: str, problems: list[object] | None) -> object:
    """``value`` with every float that is not finite replaced by ``None``, each noted in the
    nearest enclosing ``problems`` list (a document's own), naming the field."""
    if isinstance(value, float) and not math.isfinite(value):
        if problems is not None:
            problems.append(f"{where}: not a finite number ({value}), shown as null")
        return None
    if isinstance(value, dict):
        own = value.get("problems")
        inner = list(own) if isinstance(own, (list, tuple)) else problems
        result = {k: _finite(v, f"{where}.{k}" if where else str(k), inner) for k, v in value.items()}
        if isinstance(own, (list, tuple)) and inner is not None and len(inner) != len(own):
            result["problems"] = inner
        return result
    if isinstance(value, (list, tuple)):
        return [_finite(v, f"{where}[{i}]", problems) for i, v in enumerate(value)]
    return value


def dumps(document: object, **options: Any) -> str:
    """The JSON text of ``document``, strict: never ``NaN`` or ``Infinity`` (which no JSON
    parser but Python's takes). Values are made finite where they are read; one that is not
    anyway is ``null`` here, said in the enclosing document's ``problems``. The one writer of
    every JSON enginespec prints or serves."""
    try:
        return json.dumps(document, allow_nan=False, **options)
    except ValueError:
        return json.dumps(_finite(document, "", None), allow_nan=False, **options)
