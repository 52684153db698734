"""The API keys a server reads from a file of its own (``Serving.api_key_file``: TabbyAPI's
``api_tokens.yml`` in its working directory), read when they are needed: as the server's owner,
inside its root, size-capped, a FIFO or a device refused (:mod:`enginespec._host.namedfiles`),
parsed with limits (:func:`enginespec.untrusted.documents.parse_yaml`).

The keys are secrets: no field of :class:`FileKeys` shows them (``repr``), nothing here puts one
in a problem, and :meth:`FileKeys.scrub` takes them out of any text read from the server (a
server may echo a key back). Every failure is a problem (a phrase), never raised.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from enginespec._host.root import HostRoot
from enginespec.definition.recordbase import KeyRole
from enginespec.definition.records import KeyFile
from enginespec.display import literal
from enginespec.untrusted.documents import DocumentError, parse_yaml

#: The largest key file read (TabbyAPI writes two 32-character keys; a few hundred keys fit).
MAX_KEY_FILE_BYTES = 64 * 1024
#: What a key sent in a header may be: visible ASCII (RFC 9110 field-vchar), as a health check's.
_SENDABLE = re.compile(r"[\x21-\x7e]{1,4096}")
#: What a key is shown as, where a server's text held it.
HIDDEN = "***"


@dataclass(frozen=True)
class FileKeys:
    """The keys of a server's key file: ``api`` and ``admin`` (``None``: none usable),
    ``problem`` why the file gave none or not all (never holding a key)."""

    api: str | None = field(default=None, repr=False)
    admin: str | None = field(default=None, repr=False)
    problem: str | None = None

    def key(self, role: KeyRole) -> str | None:
        """The key for a request that needs ``role`` (an admin key also opens what the api key
        does, as TabbyAPI's verify_key takes it: common/auth.py at e632af41)."""
        return self.admin if role == "admin" else self.api or self.admin

    def scrub(self, text: str) -> str:
        """``text`` with every key of the file in it replaced by :data:`HIDDEN`."""
        for secret in (self.api, self.admin):
            if secret:
                text = text.replace(secret, HIDDEN)
        return text


def _first(value: object) -> str | None:
    # `api_key` may be one key or a list of them (TabbyAPI AuthKeys, common/auth.py at e632af41)
    if isinstance(value, list):
        value = next((item for item in value if isinstance(item, str)), None)
    return value if isinstance(value, str) else None


def read_keys(spec: KeyFile, pid: int, root: HostRoot) -> FileKeys:
    """The keys of the file ``spec`` names, as process ``pid`` (on the host under ``root``) sees
    it from its working directory."""
    where = f"key file '{literal(spec.path)}'"
    read = root.read_named(pid, spec.path, MAX_KEY_FILE_BYTES)
    if read.data is None:
        why = read.problem or "cannot be read: No such file or directory"
        return FileKeys(problem=f"{where} {why}")
    try:
        document = parse_yaml(read.data)
    except DocumentError:
        # the parser's own words may quote the file: not said
        return FileKeys(problem=f"{where} is not YAML enginespec reads; not read")
    if not isinstance(document, dict):
        return FileKeys(problem=f"{where} is not a mapping of keys; not read")
    found: dict[str, str | None] = {}
    problems = []
    for role, name in (("api", spec.api_key), ("admin", spec.admin_key)):
        if name is None:
            continue
        value = _first(document.get(name))
        if value is None:
            problems.append(f"{where} has no {name} (a string)")
        elif not _SENDABLE.fullmatch(value):
            problems.append(f"{where}: its {name} has characters a header cannot carry; not sent")
        else:
            found[role] = value
    return FileKeys(found.get("api"), found.get("admin"), "; ".join(problems) or None)
