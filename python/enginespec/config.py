"""Process-wide settings, from ``ENGINESPEC_*`` environment variables."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

_OVERRIDE_ENV = re.compile(r"ENGINESPEC_([A-Z0-9_]+)_(PYTHON|BIN)")


def _default_data_dir() -> Path:
    # Imported here: only a Config without an explicit data_dir needs it (import stays light).
    import platformdirs

    return Path(platformdirs.user_data_dir("enginespec", appauthor=False))


class Config(BaseModel):
    """Process-wide settings, from ``ENGINESPEC_*`` environment variables.

    ``ENGINESPEC_DATA_DIR`` sets the data directory (managed runtimes live under it);
    ``ENGINESPEC_<ENGINE>_PYTHON`` and ``ENGINESPEC_<ENGINE>_BIN`` (e.g. ``ENGINESPEC_VLLM_PYTHON``,
    ``ENGINESPEC_LLAMACPP_BIN``; a ``-`` of the id is ``_`` there: ``ENGINESPEC_MLX_VLM_PYTHON``)
    override the interpreter or binary used for an engine.
    ``ENGINESPEC_DOCKER_SOCKET`` and ``ENGINESPEC_PODMAN_SOCKET`` are where the container
    runtimes' APIs are asked for a container's name.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    data_dir: Path = Field(default_factory=_default_data_dir)
    #: engine id -> interpreter; filled from ENGINESPEC_<ENGINE>_PYTHON when not given.
    pythons: dict[str, Path] = Field(default_factory=dict)
    #: engine id -> binary or console script; filled from ENGINESPEC_<ENGINE>_BIN when not given.
    binaries: dict[str, Path] = Field(default_factory=dict)
    docker_socket: Path = Path("/var/run/docker.sock")
    #: podman's Docker-compatible API (rootful; `podman system service`).
    podman_socket: Path = Path("/run/podman/podman.sock")
    #: seconds a runtime's API gets to answer (once per container).
    container_api_timeout: float = Field(default=0.5, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _from_environment(cls, data: Any) -> Any:
        # A field not given is read from ENGINESPEC_<FIELD> (an empty value counts as unset).
        # Read here rather than with pydantic-settings, whose import (asyncio, dotenv, its CLI
        # parser) cost every command about 50 ms before the first line of output.
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for field in _SCALAR_FIELDS:
            value = os.environ.get("ENGINESPEC_" + field.upper())
            if field not in data and value:
                data[field] = value
        pythons = dict(data.get("pythons") or {})
        binaries = dict(data.get("binaries") or {})
        for name, value in os.environ.items():
            match = _OVERRIDE_ENV.fullmatch(name)
            if match and value:
                engine = match.group(1).lower()
                target = pythons if match.group(2) == "PYTHON" else binaries
                target.setdefault(engine, value)
        data["pythons"], data["binaries"] = pythons, binaries
        return data

    @staticmethod
    def variable_prefix(engine: str) -> str:
        """``ENGINESPEC_<ENGINE>`` for an engine id, a ``-`` written ``_`` (``llamacpp-python``:
        ``ENGINESPEC_LLAMACPP_PYTHON``)."""
        return "ENGINESPEC_" + engine.upper().replace("-", "_")

    def python_for(self, engine: str) -> Path | None:
        """The interpreter set for an engine (``pythons``, or ``ENGINESPEC_<ENGINE>_PYTHON``)."""
        return self.pythons.get(engine) or self.pythons.get(engine.replace("-", "_"))

    def binary_for(self, engine: str) -> Path | None:
        """The binary set for an engine (``binaries``, or ``ENGINESPEC_<ENGINE>_BIN``)."""
        return self.binaries.get(engine) or self.binaries.get(engine.replace("-", "_"))

    def runtime_dir(self, engine: str) -> Path:
        """Where the managed runtime of an engine lives."""
        return self.data_dir / "runtimes" / engine

    def help_cache_dir(self) -> Path:
        """Where engines' ``--help`` texts are cached."""
        return self.data_dir / "cache" / "help"

    def lock_dir(self) -> Path:
        """Where install locks live."""
        return self.data_dir / "locks"


#: the fields read from ``ENGINESPEC_<FIELD>`` when not given (``pythons``/``binaries`` come from
#: the per-engine variables).
_SCALAR_FIELDS = ("data_dir", "docker_socket", "podman_socket", "container_api_timeout")
