"""Parsing a config document another user wrote (YAML or JSON) with limits, so that no document
costs more than a few milliseconds and megabytes, or raises anything but :class:`DocumentError`.

YAML is composed here from the parser's events (libyaml's when PyYAML has it: the pure-Python
scanner is quadratic in nesting), one node at a time without recursion, counting every node
an alias repeats: an alias bomb (a few kilobytes that expand to gigabytes) is refused as soon as
its expansion passes :data:`MAX_VALUES` values or :data:`MAX_TEXT` characters, a nesting deeper
than :data:`MAX_DEPTH` as soon as it is entered. JSON is parsed by the standard library (no
recursion limit is reached before :data:`MAX_DEPTH` is checked, see :func:`parse_json`). Either
way an integer longer than :data:`MAX_INTEGER_DIGITS` digits is refused (Python's own limit
raises ``ValueError`` beyond 4,300) and so is a string with a lone surrogate (``"\\ud800"``,
which no UTF-8 output can carry), and parsing stops after :data:`MAX_SECONDS` of CPU.
"""

from __future__ import annotations

import json
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
#: Most CPU time one document may take to parse.
MAX_SECONDS = 0.5


class DocumentError(Exception):
    """Why a document was not taken: a phrase such as ``is not valid YAML``."""


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

    Loader.add_constructor("tag:yaml.org,2002:int", Loader.construct_yaml_int)
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


def _json_int(text: str) -> int:
    if len(text) > MAX_INTEGER_DIGITS:
        digits = len(text.lstrip("-"))
        raise DocumentError(f"holds an integer of {digits} digits (at most {MAX_INTEGER_DIGITS})")
    return int(text)


def parse_json(data: bytes) -> object:
    """The value of a JSON document, within the limits (checked on the value: JSON has no
    aliases, so it is no larger than the text, capped before it gets here)."""
    started = time.thread_time()
    try:
        value = json.loads(data, parse_int=_json_int)
    except RecursionError:
        raise DocumentError(f"is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        raise DocumentError("is not valid JSON") from None
    pending: list[tuple[object, int]] = [(value, 0)]
    count = 0
    while pending:
        item, depth = pending.pop()
        count += 1
        if count > MAX_VALUES:
            raise DocumentError(f"holds more than {MAX_VALUES} values")
        if isinstance(item, str):
            _surrogate_free(item)
        elif isinstance(item, (dict, list)):
            if depth >= MAX_DEPTH:
                raise DocumentError(f"is nested deeper than {MAX_DEPTH} levels")
            members = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            pending.extend((member, depth + 1) for member in members)
    if time.thread_time() - started > MAX_SECONDS:
        raise DocumentError(f"takes longer than {MAX_SECONDS:g} s to parse")
    return value
