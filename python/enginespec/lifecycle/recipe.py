"""The common Recipe every engine builds its serve command from."""

from __future__ import annotations

import functools
import json
import os
import re
import stat
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
)

from enginespec._host.shapes import looks_like_flag
from enginespec.definition.accelerators import GpuAccelerator
from enginespec.definition.registry import engine_ids, engine_names
from enginespec.errors import RecipeFileError, RecipeValidationError
from enginespec.suggest import did_you_mean
from enginespec.untrusted.masking import REDACTED, is_secret_name, mask_mapping

if TYPE_CHECKING:
    from pydantic_core import InitErrorDetails

#: The largest recipe file read (a recipe is a few hundred bytes; this leaves room for comments).
MAX_RECIPE_BYTES = 1 << 20
#: A value of ``extra_args``: scalars, lists of scalars, or a JSON object.
ExtraScalar = str | int | float | bool | None
ExtraValue = ExtraScalar | list[ExtraScalar] | dict[str, Any]

# A letter first: no engine has a flag that starts with a digit, and `-0` reads as a negative
# number (a positional argument), which TGI's launcher refuses (clap, max_positionals 0).
_EXTRA_KEY = re.compile(r"-{0,2}[A-Za-z][A-Za-z0-9_.-]*", re.ASCII)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
#: string fields whose value becomes an argv element after a flag.
_FLAG_VALUE_FIELDS = (
    "model_path",
    "served_model_name",
    "host",
    "kv_cache_dtype",
    "dtype",
    "quantization",
    "tool_call_parser",
    "reasoning_parser",
    "chat_template",
    "api_key",
)


class NativeRuntime(BaseModel):
    """Run the engine as a local process."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["native"] = "native"


class DockerRuntime(BaseModel):
    """Run the engine in a container (``docker run``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["docker"] = "docker"
    image: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$")
    #: container name; ``None`` lets docker pick one.
    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    #: share the host's network namespace instead of publishing the port.
    host_network: StrictBool = False
    #: mount the Hugging Face cache of the user running the command.
    mount_hf_cache: StrictBool = True


#: How a recipe is launched (the one ``Runtime``; the container software a scan finds running a
#: process is a ``ContainerRuntime``).
Runtime = Annotated[NativeRuntime | DockerRuntime, Field(discriminator="kind")]


class Recipe(BaseModel):
    """What to serve and how, independent of the engine. Unset fields emit nothing, so the
    engine's own default applies; a field the engine has no flag for is dropped with a warning."""

    # Inputs are never echoed by pydantic's own messages (they may hold secrets); see
    # describe_validation_error for the one-line form that names field and value.
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    engine: str = Field(min_length=1)
    model_path: str = Field(min_length=1)
    served_model_name: str | None = Field(default=None, min_length=1)
    host: str = Field(default="127.0.0.1", min_length=1)
    #: ``None``: the engine's default port.
    port: int | None = Field(default=None, ge=1, le=65535)
    tensor_parallel_size: int | None = Field(default=None, ge=1)
    pipeline_parallel_size: int | None = Field(default=None, ge=1)
    data_parallel_size: int | None = Field(default=None, ge=1)
    max_model_len: int | None = Field(default=None, ge=1)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    #: llama.cpp offloads whole layers instead of a memory fraction.
    gpu_layers: int | None = Field(default=None, ge=-1)
    max_num_seqs: int | None = Field(default=None, ge=1)
    kv_cache_dtype: str | None = Field(default=None, min_length=1)
    dtype: str | None = Field(default=None, min_length=1)
    quantization: str | None = Field(default=None, min_length=1)
    #: strictly a boolean: "yes" or 1 in a recipe is refused, not taken for true.
    trust_remote_code: StrictBool | None = None
    tool_call_parser: str | None = Field(default=None, min_length=1)
    reasoning_parser: str | None = Field(default=None, min_length=1)
    chat_template: str | None = Field(default=None, min_length=1)
    #: secret: masked in every repr and dump; ``api_key.get_secret_value()`` is the real one.
    api_key: SecretStr | None = None
    #: GPU indices made visible to the engine (CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES).
    visible_devices: tuple[int, ...] | None = None
    accelerator: GpuAccelerator = "cuda"
    extra_args: Mapping[str, ExtraValue] = Field(default_factory=dict)
    env_vars: Mapping[str, str] = Field(default_factory=dict)
    python_path: str | None = Field(default=None, min_length=1)
    binary_path: str | None = Field(default=None, min_length=1)
    runtime: Runtime = Field(default_factory=NativeRuntime)

    if not TYPE_CHECKING:  # type checkers keep the fields' signature

        def __init__(self, /, **data: Any) -> None:
            try:
                super().__init__(**data)
            except ValidationError as err:
                raise _refused(err) from None

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> Recipe:
        try:
            return super().model_validate(obj, **kwargs)
        except ValidationError as err:
            raise _refused(err) from None

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray, **kwargs: Any) -> Recipe:
        try:
            return super().model_validate_json(json_data, **kwargs)
        except ValidationError as err:
            raise _refused(err) from None

    @field_validator(*_FLAG_VALUE_FIELDS)
    @classmethod
    def _not_flag_like(cls, value: str | SecretStr | None, info: ValidationInfo) -> str | SecretStr | None:
        # A leading dash would be read as a flag by every engine's argument parser
        # (`--host --help`, `--api-key -a` swallowing the next flag).
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if text is not None and text.startswith("-"):
            shown = REDACTED if isinstance(value, SecretStr) else repr(text)
            raise ValueError(f"{shown} starts with '-' and would be taken for a flag")
        if isinstance(value, SecretStr) and not text:
            raise ValueError("must not be empty")
        return value

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, value: str) -> str:
        if value not in engine_ids():
            ids = engine_ids()
            suggestion = did_you_mean(value, engine_names())
            raise ValueError(f"engine {value!r} is not one of {', '.join(ids)}{suggestion}")
        return value

    @field_validator("runtime", mode="before")
    @classmethod
    def _runtime_shorthand(cls, value: Any) -> Any:
        if value == "native":
            return {"kind": "native"}
        if value == "docker":
            raise ValueError("docker runtime needs an image: runtime = {kind = 'docker', image = '...'}")
        return value

    @field_validator("extra_args")
    @classmethod
    def _check_extra_args(cls, value: Mapping[str, ExtraValue]) -> Mapping[str, ExtraValue]:
        for key, item in value.items():
            if not _EXTRA_KEY.fullmatch(key):
                raise ValueError(
                    f"extra_args key {key!r} is not a flag name (a letter, then letters, digits, - _ .)"
                )
            # A value that looks like a flag would become one (`{"lora-modules": ["a=b",
            # "--trust-remote-code"]}`), past the key check and "a flag appears once".
            for element in item if isinstance(item, list) else [item]:
                if isinstance(element, str) and looks_like_flag(element):
                    shown = REDACTED if is_secret_name(key) else repr(element)
                    raise ValueError(
                        f"extra_args[{key!r}]: {shown} starts with '-' and would be taken for a flag"
                    )
        return dict(value)

    @field_validator("env_vars")
    @classmethod
    def _check_env_vars(cls, value: Mapping[str, str]) -> Mapping[str, str]:
        for name, item in value.items():
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"env_vars name {name!r} is not a valid environment variable name")
            if "\0" in item:
                raise ValueError(f"env_vars[{name!r}] contains a NUL byte")
        return dict(value)

    @field_validator("visible_devices")
    @classmethod
    def _check_devices(cls, value: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if value is not None and (not value or any(d < 0 for d in value) or len(set(value)) != len(value)):
            raise ValueError(f"visible_devices must be distinct GPU indices >= 0, got {list(value)}")
        return value

    @field_serializer("env_vars", "extra_args")
    def _masked(self, value: Mapping[str, Any]) -> dict[str, Any]:
        # Secrets in a dump are masked; the attributes keep the real values for launching.
        return mask_mapping(value)

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():
            yield name, mask_mapping(value) if name in ("env_vars", "extra_args") else value

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Recipe:
        """Loads a recipe from a ``.toml``, ``.yaml``/``.yml`` or ``.json`` file.

        Raises :class:`RecipeFileError` naming the file, the field and the offending value.
        """
        file = Path(path)
        try:
            text = _read_recipe(file).decode("utf-8")
        except UnicodeDecodeError as err:
            raise RecipeFileError(f"{file}: cannot read: {err}") from None
        if not text.strip():
            raise RecipeFileError(
                f"{file}: the file is empty (a recipe needs at least engine and model_path)"
            )
        data = _load_document(file, text)
        if not isinstance(data, dict):
            raise RecipeFileError(f"{file}: expected a table of recipe fields, got {type(data).__name__}")
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            raise RecipeFileError(f"{file}: {describe_validation_error(err)}") from None


def _read_recipe(file: Path) -> bytes:
    """The bytes of a recipe file: a regular file of at most :data:`MAX_RECIPE_BYTES`. Opened
    without blocking and checked on the opened fd before a byte is read, so a path to a FIFO, a
    terminal or ``/dev/zero`` (however it is reached) is refused instead of waiting or reading
    for ever."""
    from enginespec._host.namedfiles import file_kind  # its ctypes only when a file is read

    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as err:
        raise RecipeFileError(f"{file}: cannot read: {err.strerror}") from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            kind = file_kind(status.st_mode)
            raise RecipeFileError(f"{file}: not a regular file ({kind}); a recipe is read from a file")
        chunks, size = [], 0
        while size <= MAX_RECIPE_BYTES and (chunk := os.read(fd, MAX_RECIPE_BYTES + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as err:
        raise RecipeFileError(f"{file}: cannot read: {err.strerror}") from None
    finally:
        os.close(fd)
    if size > MAX_RECIPE_BYTES:
        raise RecipeFileError(f"{file}: larger than {MAX_RECIPE_BYTES} bytes; not read as a recipe")
    return b"".join(chunks)


def _load_document(file: Path, text: str) -> Any:
    suffix = file.suffix.lower()
    try:
        if suffix == ".toml":
            if sys.version_info >= (3, 11):
                import tomllib
            else:
                import tomli as tomllib
            return tomllib.loads(text)
        if suffix in (".yaml", ".yml"):
            loader = _strict_yaml_loader()(text)
            try:
                return loader.get_single_data()
            finally:
                loader.dispose()  # as yaml.load does: the loader's state is let go at once
        if suffix == ".json":
            return json.loads(text, object_pairs_hook=_unique_keys)
    except _RepeatedKey as err:
        # TOML refuses a repeated key itself; YAML and JSON parsers keep the last value.
        raise RecipeFileError(f"{file}: invalid {suffix[1:].upper()}{err.where}: {err}") from None
    except Exception as err:  # each parser has its own error type; all mean "not valid <format>"
        # Where, and the parser's reason ("Illegal trailing comma"), never the line itself: it
        # may hold a secret.
        raise RecipeFileError(f"{file}: invalid {suffix[1:].upper()}{_where(err)}: {_reason(err)}") from None
    raise RecipeFileError(f"{file}: unknown recipe format {suffix!r} (use .toml, .yaml, .yml or .json)")


class _RepeatedKey(ValueError):
    """A key given twice in one table of a recipe (the last value would silently win)."""

    def __init__(self, key: object, where: str = "") -> None:
        super().__init__(f"the key {str(key)[:80]!r} is given more than once")
        self.where = where


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for key, value in pairs:
        if key in table:
            raise _RepeatedKey(key)
        table[key] = value
    return table


@functools.cache
def _strict_yaml_loader() -> Any:
    """PyYAML's safe loader, refusing a key given twice in one mapping (merged ``<<`` keys may
    be overridden, as YAML intends)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            seen: set[object] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                if isinstance(key, (str, int, float, bool)) or key is None:
                    if key in seen:
                        mark = key_node.start_mark
                        raise _RepeatedKey(key, f" at line {mark.line + 1}, column {mark.column + 1}")
                    seen.add(key)
            return super().construct_mapping(node, deep)

    return StrictLoader


def _where(err: Exception) -> str:
    mark = getattr(err, "problem_mark", None)  # PyYAML
    if mark is not None:
        return f" at line {mark.line + 1}, column {mark.column + 1}"
    line, column = getattr(err, "lineno", None), getattr(err, "colno", None)  # json, tomllib (3.14)
    if isinstance(line, int) and isinstance(column, int):
        return f" at line {line}, column {column}"
    found = re.search(r"\(at line (\d+), column (\d+)\)", str(err))  # tomllib, tomli
    return f" at line {found.group(1)}, column {found.group(2)}" if found else ""


def _reason(err: Exception) -> str:
    """A parser's reason without its location (said apart) or any quoted text longer than one
    character (it could be a piece of the document)."""
    problem = getattr(err, "problem", None)  # PyYAML
    text = problem if isinstance(problem, str) else getattr(err, "msg", None) or str(err)
    first = str(text).strip().splitlines()[0] if str(text).strip() else ""
    first = re.sub(r"\s*\(at line \d+, column \d+\)|:?\s*line \d+ column \d+ \(char \d+\)", "", first)
    first = re.sub(r"'[^']{2,}'|\"[^\"]{2,}\"", "'...'", first)
    return first[:120] or "not valid"


def _refused(err: ValidationError) -> RecipeValidationError:
    details = cast("list[InitErrorDetails]", err.errors())  # the same keys, ctx kept
    return RecipeValidationError.from_exception_data(err.title, details, hide_input=True)


def describe_validation_error(err: ValidationError) -> str:
    """One line per problem: ``field: message (got value)``. Only a scalar value is shown, and
    never one of a secret field (``api_key``, a secret ``extra_args`` flag or ``env_vars`` name) or
    of an unknown field; a whole document or table is never echoed."""
    lines = []
    for problem in err.errors():
        parts = [str(part) for part in problem["loc"]]
        field = ".".join(parts) or "recipe"
        message = problem["msg"].removeprefix("Value error, ")
        # TOML, YAML and JSON have lists, not tuples
        message = message.replace("a valid tuple", "a valid list")
        if problem["type"] == "extra_forbidden" and len(parts) == 1:
            message += did_you_mean(parts[0], list(Recipe.model_fields))
        value = problem.get("input")
        secret = any(part == "api_key" or is_secret_name(part) for part in parts)
        if secret or problem["type"] == "extra_forbidden":
            got = f" (got {REDACTED})"
        elif isinstance(value, (str, int, float, bool)) and not isinstance(value, SecretStr):
            got = f" (got {value!r})"
        else:
            got = ""
        lines.append(f"{field}: {message}{got}")
    return "; ".join(lines)
