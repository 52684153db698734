"""What a start runs (a :class:`Plan`: from a recipe, or read for a process a scan found through
the root it was scanned under) and running it on this host: the argv (no shell) in a session and
process group of its own, with the start's marker in its environment, as the plan's owner, its
output on pipes."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

import enginespec.lifecycle.commands as commands
from enginespec._host.namedfiles import Refused
from enginespec._host.procfiles import Owner
from enginespec._host.root import HOST_ROOT, HostRoot
from enginespec.config import Config
from enginespec.definition.records import EngineDefinition
from enginespec.display import literal
from enginespec.errors import InvalidInputError, RestartRefused
from enginespec.lifecycle.handle import ProcessHandle
from enginespec.lifecycle.processtree import RUN_ID_VARIABLE
from enginespec.lifecycle.recipe import Recipe
from enginespec.untrusted.masking import is_secret_name


class Plan(BaseModel):
    """What a start runs: the real argv and environment (never shown), the working directory."""

    model_config = ConfigDict(frozen=True)

    argv: tuple[str, ...]
    env: Mapping[str, str]
    delta: Mapping[str, str]
    cwd: str | None
    secrets: tuple[str, ...] = ()
    #: the program to run when it is not ``argv[0]`` (an adopted process's ``/proc/PID/exe``).
    executable: str | None = None
    #: the uid, gid and groups to run as (an adopted process's owner); ``None``: ours.
    user: int | None = None
    group: int | None = None
    groups: tuple[int, ...] | None = None


def plan_for(spec: EngineDefinition, recipe: Recipe, config: Config) -> tuple[Plan, str | None]:
    """The plan of a recipe's start (in this process's working directory), and its API key."""
    command = commands.plan(spec, recipe, config)
    if command.launcher == "docker":
        raise InvalidInputError("runtime: launch runs native engines; run a docker recipe with `docker run`")
    masked = command.redacted_argv()
    secrets = {real for real, shown in zip(command.argv, masked, strict=True) if real != shown}
    secrets |= {value for name, value in command.env.items() if is_secret_name(name)}
    api_key = recipe.api_key.get_secret_value() if recipe.api_key is not None else None
    if api_key:
        secrets.add(api_key)
    plan = Plan(
        argv=command.argv,
        env={**os.environ, **command.env},
        delta=dict(command.env),
        cwd=os.getcwd(),
        secrets=tuple(sorted(secrets)),
    )
    return plan, api_key


def read_plan(pid: int, root: HostRoot = HOST_ROOT) -> Plan:
    """The command, environment, working directory, program and owner of a running process,
    from the kernel's files of the host under ``root`` (the one its record was scanned under);
    :class:`RestartRefused` says which could not be read and why."""
    raw: dict[str, bytes] = {}
    for what in ("cmdline", "environ"):
        try:
            raw[what] = root.read(pid, what, 4 << 20)
        except OSError as error:
            raise RestartRefused(f"pid {pid}: cannot read {root.path(pid, what)}: {error.strerror}") from None
    links: dict[str, str] = {}
    for what in ("cwd", "exe"):
        try:
            links[what] = root.link(pid, what)
        except OSError as error:
            raise RestartRefused(f"pid {pid}: cannot read {root.path(pid, what)}: {error.strerror}") from None
    argv = tuple(os.fsdecode(part) for part in raw["cmdline"].split(b"\0") if part)
    if not argv:
        raise RestartRefused(f"pid {pid}: its command line is empty (a zombie, or it hides it)")
    env: dict[str, str] = {}
    for entry in raw["environ"].split(b"\0"):
        name, eq, value = entry.partition(b"=")
        if eq and name:
            env[os.fsdecode(name)] = os.fsdecode(value)
    env.pop(RUN_ID_VARIABLE, None)
    for what, path in links.items():
        if path.endswith(" (deleted)"):
            raise RestartRefused(f"pid {pid}: its {what} {literal(path)} was deleted or replaced")
    uid, gid, groups = _owner(pid, root)
    # the same program, run as its owner: never with more privilege than it had
    as_owner = uid != os.geteuid()
    return Plan(
        argv=argv,
        env=env,
        delta={},
        cwd=links["cwd"],
        secrets=tuple(v for k, v in env.items() if is_secret_name(k)),
        executable=links["exe"],
        user=uid if as_owner else None,
        group=gid if as_owner else None,
        groups=groups if as_owner else None,
    )


def _owner(pid: int, root: HostRoot) -> tuple[int, int, tuple[int, ...]]:
    """The real uid, gid and supplementary groups of a process (``/proc/PID/status``)."""
    status = root.status(pid)
    if status is None or status.ruid is None or status.rgid is None:
        raise RestartRefused(f"pid {pid}: cannot read its owner from {root.path(pid, 'status')}")
    return status.ruid, status.rgid, status.groups or ()


def _owner_cwd(plan: Plan) -> int | None:
    """For a start as another user (an adopted engine's owner), an ``O_PATH`` fd of the
    working directory the engine named, opened with that user's credentials: the child
    enters it through ``/proc/self/fd/N``, the very directory the owner reached. Python's
    own ``cwd=`` changes into a path before its setuid, as root, and a path swapped for a
    link would lead where the owner may not go (a root-only 0700 directory)."""
    if plan.user is None or plan.cwd is None:
        return None
    who = Owner(plan.user, plan.group if plan.group is not None else -1, plan.groups or ())
    try:
        return HOST_ROOT.open_as(who, plan.cwd, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except Refused as why:
        raise RestartRefused(
            f"its owner (uid {plan.user}) cannot enter its working directory {literal(plan.cwd)}: {why}"
        ) from None


def spawn(plan: Plan, run_id: str, started: float) -> ProcessHandle:
    """Runs the plan in a new session and process group, with ``run_id`` as its marker
    (:data:`~enginespec.lifecycle.processtree.RUN_ID_VARIABLE`), stdout and stderr on pipes;
    ``started``: the time the start began."""
    held = _owner_cwd(plan)
    try:
        popen = subprocess.Popen(
            list(plan.argv),
            executable=plan.executable,
            env={**plan.env, RUN_ID_VARIABLE: run_id},
            cwd=plan.cwd if held is None else HOST_ROOT.held_path(held),
            user=plan.user,
            group=plan.group,
            extra_groups=plan.groups,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        if held is not None:
            os.close(held)
    # Our unreaped child: its pid cannot be handed out again before we wait for it.
    opener = getattr(os, "pidfd_open", None)
    pidfd = opener(popen.pid) if opener is not None else -1
    return ProcessHandle(
        popen.pid, HOST_ROOT.start_ticks(popen.pid) or 0, pidfd, start_time=started, popen=popen
    )
