"""What a model is, read from its files and never from its weights: a GGUF file's header
(:mod:`enginespec.models.gguf`) or a Hugging Face folder (:mod:`enginespec.models.huggingface`);
and the bounded numbers an engine's memory rule takes from its argv.

The engines' own rules for sizing memory from their arguments are hooks of their definitions
(``engines/llamacpp.py``, ``engines/vllm.py``); these modules know only the file formats.
"""

from __future__ import annotations

import math

from enginespec.definition.modelrecords import Files, ModelFacts
from enginespec.models.files import HOST, ModelError
from enginespec.models.gguf import gguf_facts
from enginespec.models.huggingface import hf_facts


def model_facts(path: str, fs: Files = HOST) -> ModelFacts:
    """The facts of a model file or folder (a GGUF file, or a Hugging Face folder), read as
    ``fs`` sees them."""
    if fs.kind(path) == "directory":
        return hf_facts(path, fs)
    return gguf_facts(path, fs)


def argv_number(flag: str, text: str, low: float, high: float, *, integer: bool = False) -> float:
    """A number an engine's argv gives for ``flag``, finite and within ``low..high`` (``1e400``,
    ``nan``, a 400-digit integer are a ModelError naming the flag, never an OverflowError in
    an estimate); ``integer``: written in decimal digits, as the engine's own parser wants."""
    shown = text if len(text) <= 32 else text[:32] + "..."
    try:
        # a 400-digit integer is out of range, not converted (and never a 4,300-digit one)
        value: float = (
            (math.inf if len(text.strip().lstrip("+-")) > 20 else int(text, 10)) if integer else float(text)
        )
    except ValueError:
        raise ModelError(f"{flag} {shown!r}: not {'an integer' if integer else 'a number'}") from None
    if not (math.isfinite(value) and low <= value <= high):
        raise ModelError(f"{flag} {shown!r}: out of range ({low:g} to {high:g})")
    return value
