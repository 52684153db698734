"""Which program runs an engine: its interpreter, console script or binary, resolved in one
documented order for building commands, reading the help and probing what is installed."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from enginespec.config import Config
from enginespec.definition.records import EngineDefinition
from enginespec.errors import CommandError

#: Basename of a Python interpreter (python, python3.11, Python, pythonw.exe).
PYTHON_NAME = re.compile(r"(?:python)[0-9.]*[a-z]?(?:\.exe)?", re.IGNORECASE | re.ASCII)

LauncherKind = Literal["console_script", "module", "binary"]


class Launcher(BaseModel):
    """How an engine is run here: the argv prefix (program and its fixed arguments), its kind, and
    the interpreter when one is known (``None`` for binaries and bare names)."""

    model_config = ConfigDict(frozen=True)

    prefix: tuple[str, ...]
    kind: LauncherKind
    python: Path | None = None

    @property
    def program(self) -> Path:
        return Path(self.prefix[0])


def path_problem(path: str, field: str, expected: str | None = None) -> str | None:
    """Why ``path`` cannot be used for ``field`` (a ``..`` segment, or a basename other than
    ``expected``; ``expected=None`` means a Python interpreter), or ``None`` when it can."""
    candidate = Path(path)
    if ".." in candidate.parts:
        return f"{field}: {path!r} contains a '..' segment"
    if expected is None:
        if not PYTHON_NAME.fullmatch(candidate.name):
            return f"{field}: {path!r} is not a Python interpreter (expected python, python3, ...)"
        return None
    name = candidate.name[:-4] if candidate.name.lower().endswith(".exe") else candidate.name
    if name != expected:
        return f"{field}: {path!r} is not {expected!r} (unexpected executable name)"
    return None


def _checked(path: str, field: str, expected: str | None = None) -> Path:
    problem = path_problem(path, field, expected)
    if problem:
        raise CommandError(problem)
    return Path(path)


def managed_bin_dir(definition: EngineDefinition, config: Config) -> Path:
    """``bin`` directory of the managed runtime (a venv for Python engines)."""
    return config.runtime_dir(definition.id) / ("bin" if definition.is_binary else "venv/bin")


def _binary(definition: EngineDefinition, binary: Path) -> Launcher:
    kind: LauncherKind = "binary" if definition.is_binary else "console_script"
    return Launcher(prefix=(str(binary), *definition.launch.args), kind=kind)


def _python(definition: EngineDefinition, python: Path) -> Launcher:
    if definition.is_binary:
        raise CommandError(f"python_path: {definition.id} is a binary, not a Python package; set binary_path")
    script = python.parent / definition.launch.executable
    needs = definition.launch.script_needs
    if (
        definition.launch.kind == "console_script"
        and script.is_file()
        and (needs is None or _has(python, needs))
    ):
        return Launcher(prefix=(str(script), *definition.launch.args), kind="console_script", python=python)
    return Launcher(prefix=(str(python), *definition.launch.module_args), kind="module", python=python)


def _has(python: Path, distribution: str) -> bool:
    """Whether the environment of ``python`` has ``distribution`` installed, from the dist-info
    directories (``NAME-VERSION.dist-info``, NAME without dashes) of its site-packages (nothing
    is run); a layout that cannot be read counts as
    yes, so the console script is kept."""
    normalized = re.sub(r"[-_.]+", "_", distribution).lower()
    site_packages = list(python.parent.parent.glob("lib/python3*/site-packages"))
    if not site_packages:
        return True
    return any(
        re.sub(r"[-_.]+", "_", entry.name.split("-", 1)[0]).lower() == normalized
        for directory in site_packages
        for entry in directory.glob("*.dist-info")
    )


def resolve_launcher(
    definition: EngineDefinition,
    config: Config,
    *,
    python_path: str | None = None,
    binary_path: str | None = None,
) -> Launcher:
    """The launcher, in the documented order: an explicit ``binary_path`` / ``python_path`` (a
    recipe's), ``ENGINESPEC_<ENGINE>_BIN`` / ``_PYTHON``, the managed runtime, ``PATH``; the bare
    command name when nothing is found. Paths with ``..`` or an unexpected basename are refused
    with a :class:`CommandError` naming the field."""
    executable = definition.launch.executable
    env = Config.variable_prefix(definition.id)
    if binary_path:
        return _binary(definition, _checked(binary_path, "binary_path", executable))
    if python_path:
        return _python(definition, _checked(python_path, "python_path"))
    configured_binary, configured_python = config.binary_for(definition.id), config.python_for(definition.id)
    if configured_binary is not None:
        return _binary(definition, _checked(str(configured_binary), f"{env}_BIN", executable))
    if configured_python is not None:
        return _python(definition, _checked(str(configured_python), f"{env}_PYTHON"))
    managed = managed_bin_dir(definition, config)
    if definition.is_binary and (managed / executable).is_file():
        return _binary(definition, managed / executable)
    if not definition.is_binary and (managed / "python").is_file():
        return _python(definition, managed / "python")
    found = shutil.which(executable)
    if found:
        sibling = Path(found).parent / "python"
        if definition.launch.kind == "module" and sibling.is_file():
            return _python(definition, sibling)
        return _binary(definition, Path(found))
    if definition.launch.kind == "module":
        return Launcher(prefix=("python3", *definition.launch.module_args), kind="module")
    return _binary(definition, Path(executable))
