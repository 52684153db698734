"""The one "did you mean" of every name a person types: engines (their ids and aliases),
commands, ``--filter`` keys, recipe fields. A name that begins what was typed, or that what was
typed begins, wins over one a few letters away (``llama`` means ``llamacpp``, ``llamacpp-python``
or ``llamafile``, never ``ollama``); otherwise the closest by edit distance."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence

#: At most this many names are offered.
MAX_OFFERED = 4


def did_you_mean(word: str, choices: Sequence[str] | Mapping[str, str]) -> str:
    """``; did you mean 'vllm'?`` (or ``'a', 'b' or 'c'``), else empty. ``choices`` maps each name
    one may type to what it names (an alias to its engine's id), or lists names that are their own."""
    names = dict(choices) if isinstance(choices, Mapping) else {name: name for name in choices}
    typed = word.lower()
    offered: list[str] = []
    if len(typed) >= 2:
        starts = [name for name in names if name.startswith(typed) or typed.startswith(name)]
        for name in sorted(starts, key=lambda name: (abs(len(name) - len(typed)), name)):
            if names[name] not in offered:
                offered.append(names[name])
    if not offered:
        offered = [names[name] for name in difflib.get_close_matches(typed, list(names), n=1, cutoff=0.6)]
    if not offered:
        return ""
    quoted = [repr(name) for name in offered[:MAX_OFFERED]]
    listed = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    return f"; did you mean {listed}?"
