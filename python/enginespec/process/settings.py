"""Facts a running engine takes from outside its argv: its environment (``/proc/PID/environ``,
readable by root or the same user) and a config file it was pointed at (read as the process's
owner, inside its root, size-capped: :mod:`enginespec._host.namedfiles`; parsed with limits:
:mod:`enginespec.untrusted.documents`). Which variable or key carries which fact is data in the engine's
spec. Every failure is data, never raised."""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from enginespec._host.namedfiles import Identity
from enginespec._host.root import HOST_ROOT, HostRoot
from enginespec._host.shapes import MAX_ENVIRON_BYTES, Environ, parse_port
from enginespec.definition.records import EngineDefinition, Fact
from enginespec.definition.signature import Signature
from enginespec.display import literal
from enginespec.process.argv import flag_value
from enginespec.untrusted.documents import DocumentError, parse_json, parse_toml, parse_yaml

#: Largest config file read (an engine's own config is a few kilobytes).
MAX_CONFIG_BYTES = 1 << 18
#: Largest home pointer file read (one directory path).
MAX_POINTER_BYTES = 4096


@dataclass(frozen=True)
class Outside:
    """Facts found outside argv: values as the engine reads them, and what could not be read."""

    environment: Mapping[Fact, str] = field(default_factory=dict)
    config: Mapping[Fact, tuple[str, ...]] = field(default_factory=dict)
    #: the config file, as the process names it, and the identity of what was read (to notice
    #: edits; ``None``: not there, or not a file that is read).
    config_file: str | None = None
    config_identity: Identity | None = None
    problems: tuple[str, ...] = ()
    #: the API key its environment gives (``Serving.api_key_env``), never shown
    api_key: str | None = field(default=None, repr=False)


def split_address(value: str) -> tuple[str | None, str | None]:
    """``[scheme://]host[:port][/path]`` -> (host, port text), ``None`` for a part not given; a URL
    without a port has its scheme's (http 80, https 443), as Ollama's envconfig Host() reads
    OLLAMA_HOST. ``[v6]:port`` and a bare IPv6 address are understood; anything else gives
    nothing."""
    scheme, sep, rest = value.strip().partition("://")
    if not sep:
        scheme, rest = "", value.strip()
    hostport = rest.split("/", 1)[0]
    port: str | None
    if hostport.startswith("["):
        close = hostport.find("]")
        tail = hostport[close + 1 :]
        if close < 0 or (tail and not tail.startswith(":")):
            return None, None
        host, port = hostport[1:close], tail[1:] if tail else None
    elif hostport.count(":") == 1:
        host, port = hostport.split(":")
    else:  # a host name, or an IPv6 address without brackets
        host, port = hostport, None
    if port is None and scheme in ("http", "https"):
        port = "80" if scheme == "http" else "443"
    return host or None, port or None


def environment_names(definition: EngineDefinition) -> list[str]:
    """The variables of a process's environment the engine's settings read (its scan's read set,
    ``_host.shapes.ReadSet``): facts, API keys, what makes a follower a server, and the marks
    of a supervisor that started it."""
    names = dict.fromkeys(
        [
            *definition.settings.environment,
            *definition.serving.api_key_env,
            *definition.settings.server_environment,
            *definition.serving.supervisor_markers,
            *filter(None, [definition.settings.config_environment]),
            *(["HOME"] if definition.settings.home_config or definition.settings.config_files else []),
            *filter(None, [definition.settings.home_directory_environment]),
            *(match.group(1) for match in map(_PLACE.match, definition.settings.config_files) if match),
        ]
    )
    return list(names)


#: ``${NAME-DEFAULT}/rest`` of ``Settings.config_files``.
_PLACE = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)-([^{}$]*)\}/(.*)")


def _variable_of(environ: Environ | None, name: str) -> str | None:
    """The first value of ``name`` in the environment as its scan read it (``None``: unset)."""
    return next((value for key, value in environ.vars if key == name), None) if environ else None


def _under_home(path: str, home: str | None) -> str | None:
    """``path`` with a leading ``~`` (alone or before ``/``) made the home, as Python's
    ``expanduser`` does; ``None`` when it needs a home not known, or another user's (``~name``)."""
    if not path.startswith("~"):
        return path
    head, sep, rest = path.partition("/")
    if head != "~" or home is None:
        return None
    return os.path.join(home, rest) if sep else home


def config_file_places(
    definition: EngineDefinition, pid: int, environ: Environ | None, root: HostRoot
) -> list[str]:
    """Where the engine's ``config_files`` are for process ``pid``, in order (a relative path is
    from its working directory; a place whose home is not known is left out)."""
    home = _home(pid, environ, root) if definition.settings.config_files else None
    places: list[str] = []
    for place in definition.settings.config_files:
        match = _PLACE.fullmatch(place)
        if match is not None:
            named = _variable_of(environ, match.group(1))
            base = named if named is not None else match.group(2)
            place = os.path.join(base, match.group(3))
        found = _under_home(place, home)
        if found is not None:
            places.append(found)
    return places


def _home(pid: int, environ: Environ | None, root: HostRoot) -> str | None:
    """The home directory of process ``pid``, as Node's ``os.homedir()`` finds it (libuv
    ``uv_os_homedir``): ``HOME`` (the first, non-empty) from its environment, else its owner's
    account on this host (``None``: neither gives an absolute path)."""
    found = next((value for name, value in environ.vars if name == "HOME"), None) if environ else None
    if found is None:
        who = root.owner(pid)
        try:
            found = pwd.getpwuid(who.uid).pw_dir if who is not None else None
        except KeyError:
            found = None
    return found if found and found.startswith("/") and "\x00" not in found else None


def home_config_path(
    definition: EngineDefinition,
    pid: int,
    environ: Environ | None,
    root: HostRoot,
    argv: Sequence[str] = (),
) -> tuple[str | None, str | None]:
    """Where the engine's ``home_config`` is for process ``pid`` (read on the host under
    ``root``), and what kept it from being known (``(None, None)``: the engine has none, or the
    home is not known)."""
    settings = definition.settings
    if settings.home_config is None:
        return None, None
    home = _home(pid, environ, root)
    replaced = settings.home_pointer[1] if settings.home_pointer else settings.home_config.split("/")[0]
    flag = settings.home_directory_flag
    named = flag_value(argv, definition.signature, flag) if flag else None
    if named is None and settings.home_directory_environment:
        named = _variable_of(environ, settings.home_directory_environment) or None
    if named is not None:  # the directory the process was given, over its pointer and default
        directory = _under_home(named, home)
        if directory is None:
            return None, f"directory '{literal(named)}' is under a home not known; its config is not read"
        return os.path.join(directory, os.path.relpath(settings.home_config, replaced)), None
    if home is None:
        return None, None
    path = os.path.join(home, settings.home_config)
    if settings.home_pointer is None:
        return path, None
    pointer = settings.home_pointer[0]
    where = f"home pointer '{literal(os.path.join(home, pointer))}'"
    read = root.read_named(pid, os.path.join(home, pointer), MAX_POINTER_BYTES)
    if read.missing:
        return path, None
    if read.data is None:
        return None, f"{where} {read.problem or 'cannot be read'}; its config file is not read"
    try:
        pointed = read.data.decode("utf-8").strip()
    except UnicodeDecodeError:
        pointed = ""
    if not pointed.startswith("/") or any(c in pointed for c in "\x00\n\r"):
        return None, f"{where} does not hold an absolute directory; its config file is not read"
    return os.path.join(pointed, os.path.relpath(settings.home_config, replaced)), None


def serves_by_environment(definition: EngineDefinition, environ: Environ | None) -> bool:
    """Whether a process's environment (as its scan read it) sets one of the engine's
    ``server_environment`` variables to its value (a follower's argv that is its deployment's
    HTTP server)."""
    wanted = definition.settings.server_environment
    return environ is not None and any(wanted.get(name) == value for name, value in environ.vars)


def _environment(
    definition: EngineDefinition, environ: Environ | None
) -> tuple[dict[Fact, str], tuple[str, ...], str | None]:
    """The facts the environment gives, the problems reading it, and the API key it holds."""
    wanted = definition.settings.environment
    keys = definition.serving.api_key_env
    if environ is None or not (wanted or keys):  # not read (another user's process), or not asked
        return {}, (), None
    found: dict[Fact, str] = {}
    secrets: dict[str, str] = {}
    for name, value in environ.vars:
        if value and name in keys:
            secrets.setdefault(name, value)
        if not (name in wanted and value):
            continue
        kind = wanted[name]
        if kind == "address":
            host, port = split_address(value)
            if host is not None:
                found["host"] = host
            if port is not None:
                found["port"] = port
        else:
            found[kind] = value
    api_key = next((secrets[name] for name in keys if name in secrets), None)
    if environ.cut:
        return (
            found,
            (f"environment is larger than {MAX_ENVIRON_BYTES} bytes; only that much is read",),
            api_key,
        )
    return found, (), api_key


def _fact_of_key(signature: Signature, key: str) -> Fact | None:
    flag = signature.canonical("--" + key.lstrip("-"))
    for fact, flags in (
        ("model", signature.model_flags),
        ("served_model_name", signature.served_name_flags),
        ("host", signature.host_flags),
        ("port", signature.port_flags),
    ):
        if flag in flags:
            return fact  # type: ignore[return-value]
    return None


def _document(definition: EngineDefinition, path: str, data: bytes) -> object:
    """The config document, in the engine's syntax (a file named ``*.yaml``/``*.yml`` is YAML)."""
    if definition.settings.config_format == "toml":
        return parse_toml(data)
    if definition.settings.config_format == "json" and not path.endswith((".yaml", ".yml")):
        return parse_json(data)
    return parse_yaml(data)


def _config(
    definition: EngineDefinition, path: str, data: bytes
) -> tuple[dict[Fact, tuple[str, ...]], str | None]:
    try:
        document = _document(definition, path, data)
    except DocumentError as why:
        return {}, f"config file '{literal(path)}' {why}; not read"
    if not isinstance(document, dict):
        return {}, f"config file '{literal(path)}' is not a mapping of flag names"
    found = _facts_of_mapping(definition, document, definition.settings.config_keys)
    entries = (
        document.get(definition.settings.config_models_key) if definition.settings.config_models_key else None
    )
    if isinstance(entries, list):
        # Several models: the first entry's model, every entry's served names, in order.
        per_entry = [_facts_of_mapping(definition, e, {}) for e in entries if isinstance(e, dict)]
        for fact in ("model", "served_model_name"):
            values = tuple(value for facts in per_entry for value in facts.get(fact, ())[:1])
            if values and fact not in found:
                found[fact] = values
    return found, None


def _facts_of_mapping(
    definition: EngineDefinition, document: Mapping[object, object], keys: Mapping[str, Fact]
) -> dict[Fact, tuple[str, ...]]:
    """The facts of a config document: at dotted ``keys`` paths of a nested one (TabbyAPI
    ``network.port``), else its top-level keys as flag names."""
    pairs = (
        ((fact, _lookup(document, path)) for path, fact in keys.items())
        if keys
        else ((_fact_of_key(definition.signature, str(key)), value) for key, value in document.items())
    )
    found: dict[Fact, tuple[str, ...]] = {}
    for fact, value in pairs:
        if fact is None or value is None or isinstance(value, (dict, bool)):
            continue
        values = value if isinstance(value, list) else [value]
        found[fact] = tuple(str(item) for item in values if not isinstance(item, (dict, list)))
    return found


def _lookup(document: Mapping[object, object], path: str) -> object:
    """The value at a dotted path of nested mappings, or ``None``."""
    value: object = document
    for key in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def read_outside(
    definition: EngineDefinition,
    pid: int,
    argv: Sequence[str],
    *,
    environ: Environ | None,
    runner: bool = False,
    root: HostRoot = HOST_ROOT,
) -> Outside:
    """What ``pid``'s environment (``environ``: the variables its scan read, see
    :func:`environment_names`) and config file (read on the host under ``root``) say, for the engine's
    declared settings (a runner's environment only where the engine's runners read it)."""
    environment, problems, api_key = (
        _environment(definition, environ)
        if definition.settings.runner_environment or not runner
        else ({}, (), None)
    )
    if definition.settings.config_files and not runner:
        found = Outside(environment, {}, None, None, problems, api_key)
        return _read_layers(definition, pid, argv, environ, root, found)
    named = config_named(definition, argv, environ.vars if environ is not None else ())
    default = named is None and definition.settings.config_file is not None
    path = named if named is not None else definition.settings.config_file
    if path is None and not runner:
        path, trouble = home_config_path(definition, pid, environ, root, argv)
        problems = (*problems, trouble) if trouble else problems
        default = path is not None
    if path is None:
        return Outside(environment=environment, problems=problems, api_key=api_key)
    read = root.read_named(pid, path, MAX_CONFIG_BYTES)
    if read.missing and default:  # the engine goes on without its usual file, and so does the scan
        return Outside(environment=environment, problems=problems, api_key=api_key)
    if read.data is None:
        problem = (
            f"config file '{literal(path)}' {read.problem or 'cannot be read: No such file or directory'}"
        )
        return Outside(environment, {}, path, read.identity, (*problems, problem), api_key)
    config, trouble = _config(definition, path, read.data)
    problems = (*problems, trouble) if trouble else problems
    return Outside(environment, config, path, read.identity, problems, api_key)


#: Most config files (``config_files`` and their drop-ins) read for one process.
MAX_CONFIG_LAYERS = 32


def _layer_places(
    definition: EngineDefinition, pid: int, environ: Environ | None, root: HostRoot
) -> list[str]:
    """The engine's ``config_files`` for ``pid``, each followed by its drop-ins, in order."""
    suffix = definition.settings.config_dropins
    places: list[str] = []
    for place in config_file_places(definition, pid, environ, root):
        places.append(place)
        if suffix is not None:
            names = root.list_named(pid, place + ".d", 4096) or ()
            places.extend(f"{place}.d/{name}" for name in sorted(names) if name.endswith(suffix))
    return places[:MAX_CONFIG_LAYERS]


def _read_layers(
    definition: EngineDefinition,
    pid: int,
    argv: Sequence[str],
    environ: Environ | None,
    root: HostRoot,
    found: Outside,
) -> Outside:
    """``found`` (the environment's facts) with those of the engine's ``config_files``, each
    file's over those before, or of the one file its ``config_environment`` names where that
    exists; the last file read is the one watched for edits."""
    named = config_named(definition, argv, environ.vars if environ is not None else ())
    places = [named] if named is not None else []
    if named is None or root.read_named(pid, named, MAX_CONFIG_BYTES).missing:
        places = _layer_places(definition, pid, environ, root)
    config: dict[Fact, tuple[str, ...]] = {}
    problems = list(found.problems)
    last: tuple[str | None, Identity | None] = (None, None)
    for path in places:
        read = root.read_named(pid, path, MAX_CONFIG_BYTES)
        if read.missing:
            continue
        last = (path, read.identity)
        if read.data is None:
            problems.append(f"config file '{literal(path)}' {read.problem or 'cannot be read'}")
            continue
        facts, trouble = _config(definition, path, read.data)
        config.update(facts)
        problems.extend([trouble] if trouble else [])
    return Outside(found.environment, config, last[0], last[1], tuple(problems), found.api_key)


def config_named(
    definition: EngineDefinition, argv: Sequence[str], variables: Iterable[tuple[str, str]]
) -> str | None:
    """The config file the process was pointed at: by its environment variable (where the engine
    reads one over its flag), else by its flag; ``None`` when neither names one."""
    wanted = definition.settings.config_environment
    for name, value in variables:
        if name == wanted:
            # the first of a repeated name (CPython's os.environ keeps it, as getenv does); set
            # but empty, it names no file and the flag is not read either
            return value or None
    flag = definition.settings.config_flag
    return flag_value(argv, definition.signature, flag) if flag else None


@dataclass(frozen=True)
class ConfigModel:
    """One model entry of an engine's config file (``Settings.config_models_key``): the name it
    is served as, and its model as written (``None``: the entry names none by the engine's model
    flag)."""

    served_name: str
    model: str | None


def config_models(
    definition: EngineDefinition, pid: int, argv: Sequence[str], root: HostRoot
) -> tuple[list[ConfigModel], str | None]:
    """The model entries of the config file process ``pid`` was pointed at, in order, each under
    the name it is served as: its served name, else its model (llama-cpp-python's LlamaProxy
    aliases an entry by its ``model``, llama_cpp/server/model.py v0.3.35); and what could not be
    read (``None``: nothing). Read now, as the process names the file, with the limits of a scan."""
    key = definition.settings.config_models_key
    read = root.environ(pid, MAX_ENVIRON_BYTES)
    variables = [_variable(item) for item in (read[0] if read else ())]
    path = config_named(definition, argv, variables)
    if key is None or path is None:
        return [], "it was started without a config file"
    named = root.read_named(pid, path, MAX_CONFIG_BYTES)
    if named.data is None:
        return (
            [],
            f"config file '{literal(path)}' {named.problem or 'cannot be read: No such file or directory'}",
        )
    try:
        document = _document(definition, path, named.data)
    except DocumentError as why:
        return [], f"config file '{literal(path)}' {why}; not read"
    entries = document.get(key) if isinstance(document, dict) else None
    if not isinstance(entries, list):
        return [], f"config file '{literal(path)}' has no list {key!r}"
    found = [entry for entry in map(_config_model(definition), entries) if entry is not None]
    return found, None


def _variable(item: bytes) -> tuple[str, str]:
    name, _, value = item.partition(b"=")
    return name.decode("utf-8", "replace"), value.decode("utf-8", "surrogateescape")


def _config_model(definition: EngineDefinition) -> Callable[[object], ConfigModel | None]:
    signature = definition.signature

    def read(entry: object) -> ConfigModel | None:
        if not isinstance(entry, dict):
            return None
        model: str | None = None
        served: str | None = None
        for key, value in entry.items():
            if not isinstance(value, str) or not value:
                continue
            flag = signature.canonical("--" + str(key).lstrip("-"))
            if flag == definition.flags.model:
                model = value
            elif flag in signature.served_name_flags:
                served = value
        name = served or model
        return ConfigModel(name, model) if name else None

    return read


#: Where a fact came from; ``server``: an orphan's, from the server it worked for while this
#: scanner saw it; ``container label``: a runner's, from its supervisor's label on its container.
Source = Literal["argv", "config", "environment", "default", "server", "container label"]


@dataclass(frozen=True)
class Merged:
    """A server's facts with argv first, then its config file, then its environment."""

    model: str | None
    served_model_names: tuple[str, ...]
    host: str | None
    port: int | None
    #: the port as its source wrote it (``None``: no source gives one).
    port_text: str | None
    sources: dict[Fact, Source]
    problems: tuple[str, ...]


def _environment_value(
    definition: EngineDefinition, outside: Outside, fact: Fact
) -> tuple[tuple[str, ...], Source] | None:
    value = outside.environment.get(fact)
    if value is None:
        return None
    separator = definition.signature.served_name_separator
    if fact == "served_model_name" and separator:
        return tuple(name for name in value.split(separator) if name), "environment"
    return (value,), "environment"


def _outside_value(
    definition: EngineDefinition, outside: Outside, fact: Fact
) -> tuple[tuple[str, ...], Source] | None:
    if definition.settings.environment_over_config and fact in outside.environment:
        return _environment_value(definition, outside, fact)
    if fact in outside.config:
        return outside.config[fact], "config"
    return _environment_value(definition, outside, fact)


def merge(
    definition: EngineDefinition,
    outside: Outside,
    model: str | None,
    served: Sequence[str],
    host: str | None,
    port: int | None,
    port_text: str | None,
) -> Merged:
    """Fills in what argv does not say from ``outside`` (argv wins, as the engines do, except for
    the engine's ``environment_first`` facts and, given a config file, ``config_replaces_argv``)."""
    sources: dict[Fact, Source] = {}
    settings = definition.settings

    def fill(fact: Fact, in_argv: bool) -> tuple[str, ...]:
        """The values from outside argv for a fact argv does not give, noting the source; an
        empty tuple with the source ``argv`` keeps argv's value."""
        found = _environment_value(definition, outside, fact) if fact in settings.environment_first else None
        if found is None and outside.config_file is not None and fact in settings.config_replaces_argv:
            in_argv = False
        if found is None and not in_argv:
            found = _outside_value(definition, outside, fact)
        sources[fact] = found[1] if found else ("argv" if in_argv else "default")
        return found[0] if found else ()

    models = fill("model", model is not None)
    names = fill("served_model_name", bool(served))
    hosts = fill("host", host is not None)
    ports = fill("port", port_text is not None)
    if ports:
        port_text = ports[0]
        port = parse_port(port_text) or None  # ASCII digits only ("²".isdigit() is true); not 0
    elif sources["port"] == "default":
        port, port_text = None, None
    return Merged(
        model=next(iter(models), None) if sources["model"] != "argv" else model,
        served_model_names=names if sources["served_model_name"] != "argv" else tuple(served),
        host=next(iter(hosts), None) if sources["host"] != "argv" else host,
        port=port,
        port_text=port_text,
        sources=sources,
        problems=outside.problems,
    )


def first_key(value: str | None, separator: str | None) -> str | None:
    """The key to send of an API key value: the first non-empty of a list given as one value
    (``Serving.api_key_separator``), else the value itself."""
    if value is None or separator is None:
        return value
    return next((key.strip() for key in value.split(separator) if key.strip()), None)
