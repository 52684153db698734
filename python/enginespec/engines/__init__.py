"""The engines enginespec knows, one module each."""

from __future__ import annotations

from enginespec.engines import llamacpp, mlx, sglang, vllm
from enginespec.signature import Signature

#: Built-in engine signatures, in matching order.
BUILTIN_SIGNATURES: tuple[Signature, ...] = (
    vllm.SIGNATURE,
    sglang.SIGNATURE,
    llamacpp.SIGNATURE,
    mlx.SIGNATURE,
)


def all_signatures() -> tuple[Signature, ...]:
    """Every registered engine's signature, in matching order."""
    return BUILTIN_SIGNATURES


__all__ = ["BUILTIN_SIGNATURES", "all_signatures"]
