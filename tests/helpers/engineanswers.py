"""Answers of the engines' own routes as their sources build them, for fake servers."""

from __future__ import annotations

import json

from helpers.fakeserver import Answer


def mlx_vlm_health(**groups: tuple[str | None, str | None]) -> Answer:
    """mlx-vlm's GET /health (mlx_vlm/server/app.py health_check and _server_runtime_snapshot,
    v0.6.15): each cache group's model and adapter (``null`` when none is loaded)."""
    text = groups.get("text_generation", (None, None))
    held = {
        group: {"model": model, "adapter": adapter, "model_kind": group}
        for group, (model, adapter) in groups.items()
    }
    return Answer(
        200,
        json.dumps(
            {
                "status": "healthy",
                "loaded_model": text[0],
                "loaded_adapter": text[1],
                "loaded_models": held,
                "loaded_context_size": 32768,
                "configured_context_limit": None,
                "effective_context_limit": 32768,
                "loaded_tool_parser": None,
                "continuous_batching_enabled": True,
                "apc_enabled": False,
            }
        ).encode(),
    )
