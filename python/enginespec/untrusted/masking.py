"""Secrets: which names say a value is secret, and the one mask shown instead of it.

A secret (a recipe's API key, values of secret flags, environment variables whose names say token,
key, secret or password, keys read from a process) is never shown: every repr, log, error, table
and JSON dump carries :data:`REDACTED`. The real value is only in what is handed to the OS to
launch an engine (``Command.argv`` / ``Command.env``, ``build_command``, ``build_environment``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

REDACTED = "***"

# `--api-key`, `--hf-token`, `--admin-api-key`, `HF_TOKEN`, `OPENAI_API_KEY`, `DB_PASSWORD`,
# `--secret`: the last word of the name. Not `--ssl-keyfile` (a path) nor `--max-tokens` (a count).
_SECRET_NAME = re.compile(r"(?:^|[-_.])(?:token|key|secret|password|passwd|apikey)$", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """Whether a flag or variable name says its value is secret (``--hf-token``, ``HF_TOKEN``)."""
    return bool(_SECRET_NAME.search(name.lstrip("-")))


def mask_mapping(values: Mapping[str, object]) -> dict[str, object]:
    """The mapping with the values of secret names replaced by the mask."""
    return {name: REDACTED if is_secret_name(name) else value for name, value in values.items()}


# A URL's password (`user:PASSWORD@`) and the values of its query parameters whose names say
# secret, a signature or a credential (`?token=`, `X-Amz-Signature=`, `sig=`, `X-Goog-Credential=`).
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)[^/\s@]+(?=@)")
_SECRET_QUERY = re.compile(
    r"(?P<head>[?&](?:[A-Za-z0-9_.-]*?(?:token|key|secret|password|passwd|signature|sig|credential)))"
    r"=[^&#\s]*",
    re.IGNORECASE,
)


def mask_text(text: str) -> str:
    """``text`` (a name an engine gave, which may be a URL) with the secrets a URL carries masked:
    its password and the values of its secret-looking query parameters."""
    text = _URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED, text)
    return _SECRET_QUERY.sub(lambda m: m.group("head") + "=" + REDACTED, text)
