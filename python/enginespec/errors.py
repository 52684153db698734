"""The one family of exceptions enginespec raises on purpose, and the one warning it gives: a name
it renamed, kept under its old name for one release (:func:`warn_renamed`).

Every class derives from :class:`EngineSpecError` and from the builtin it resembles, so callers can
catch the family as a whole or keep catching ``ValueError`` / ``RuntimeError`` / ``TimeoutError``.
Messages name the field and the problem; they never echo whole input documents or secrets.
Expected outcomes stay data: a scan never raises because of a process, and a health check returns
a state.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from pydantic import ValidationError

from enginespec.display import literal
from enginespec.failures import Failure
from enginespec.healthrecord import Health


def warn_renamed(old: str, new: str, why: str = "") -> None:
    """A ``DeprecationWarning`` that ``old`` was renamed ``new``, for the code that read ``old``
    (called from the old name's property, two frames up). Every message starts ``enginespec
    renamed``: the suite turns these into errors, so it uses the new names only."""
    because = f" ({why})" if why else ""
    warnings.warn(
        f"enginespec renamed {old} to {new}{because}; the old name goes in the next release",
        DeprecationWarning,
        stacklevel=3,
    )


class EngineSpecError(Exception):
    """Base of every exception enginespec raises on purpose."""


class InvalidInputError(EngineSpecError, ValueError):
    """Input enginespec refuses; the message names the field and the value."""


class UnknownEngineError(InvalidInputError):
    """An engine id that no built-in engine or plugin has."""


class CommandError(InvalidInputError):
    """A recipe this engine cannot turn into a command."""


class RecipeFileError(InvalidInputError):
    """A recipe file that cannot be read, parsed or validated."""


class RecipeValidationError(ValidationError, InvalidInputError):
    """A :class:`~enginespec.Recipe` built from values it refuses: pydantic's ``ValidationError``
    (same ``errors()``, inputs hidden) that is also an :class:`InvalidInputError`."""


class InstallOptionsError(InvalidInputError):
    """Install options enginespec refuses before anything runs (a version that is not PEP 440, a
    target that is not an interpreter, an engine with nothing to install)."""


class InstallError(EngineSpecError, RuntimeError):
    """An install that failed; carries the exact command and the installer's last lines."""

    def __init__(self, message: str, command: Sequence[str] = (), output_tail: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.command = tuple(command)
        self.output_tail = tuple(output_tail)


class InstallCancelled(InstallError):
    """The install was cancelled through ``InstallOptions.cancel``."""


class InstallTimeout(InstallError, TimeoutError):
    """The install ran past ``InstallOptions.timeout``."""


class HelpError(EngineSpecError, RuntimeError):
    """The engine's own ``--help`` could not be read (not installed, timed out, failed)."""


class EngineExited(EngineSpecError, RuntimeError):
    """The engine's process ended while waiting for it to become ready."""

    def __init__(self, message: str, returncode: int | None, last: Health | None) -> None:
        super().__init__(message)
        self.returncode = returncode
        #: the last health check seen, if any.
        self.last = last


class NotReady(EngineSpecError, TimeoutError):
    """The engine did not become ready in time (or stopped making progress)."""

    def __init__(self, message: str, last: Health | None) -> None:
        super().__init__(message)
        #: the last health check seen, if any.
        self.last = last


class ExporterError(EngineSpecError, OSError):
    """The exporter cannot serve or write: the message names the address or file and the flag."""


class FileWriteError(EngineSpecError, OSError):
    """A file enginespec was asked to write (a feed, a textfile, a log) that cannot be written, or
    not safely (see :mod:`enginespec.untrusted.safewrite`): the message names the flag, the file and why."""


class LaunchFailed(EngineSpecError, RuntimeError):
    """An engine that could not start: its port is held, or it exited before becoming ready.
    ``failure`` says why (the class, the cause lines, a hint)."""

    def __init__(self, failure: Failure) -> None:
        lines = "".join(f"\n  {literal(line)}" for line in failure.cause_lines)
        hint = f"\n  hint: {failure.hint}" if failure.hint else ""
        super().__init__(f"{failure.engine}: {failure.summary()}{lines}{hint}")
        self.failure = failure


class RestartRefused(EngineSpecError, RuntimeError):
    """An adopted engine that cannot be restarted: its command line, environment or working
    directory could not be read (the message says which and why)."""


class ControlError(EngineSpecError, RuntimeError):
    """A model could not be loaded or unloaded, or a server put to sleep or woken, through the
    engine's own API (``load_model``, ``unload_model``, ``sleep``, ``wake``); the message says
    which engine, what and why. ``last`` is what the server said it served last, when read."""

    def __init__(self, message: str, last: object | None = None) -> None:
        super().__init__(message)
        self.last = last


class ControlUnsupported(ControlError):
    """The engine has no API for it, or the server was started without what turns it on (the
    message names the flag or variable)."""


class ControlRefused(ControlError, PermissionError):
    """Not sent: the engine is another user's (the caller is neither root nor its owner), or its
    port is not its own tree's."""


class ControlFailed(ControlError):
    """Sent, and the engine refused it or did not reach the state asked for in time."""


class FitRefused(EngineSpecError, RuntimeError):
    """Not launched: by the engine's own memory rule, the host's GPUs cannot hold it now (the
    message says where it fell short). ``result`` is the ``FitResult``."""

    def __init__(self, message: str, result: object) -> None:
        super().__init__(message)
        self.result = result
