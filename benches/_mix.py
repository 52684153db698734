"""Host-like processes for the benchmarks: argv mostly of ordinary processes, a few engines, run
by the test helper (an idle process whose cmdline is exactly the argv it was given)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "data" / "argv-public.jsonl"
DATA = ROOT / "target" / "bench-data"
HELPER_SOURCE = ROOT / "tests" / "helpers" / "idle.c"
#: The engines enginespec knew before the 2026 servers were added (issue 41): the matcher's cost
#: with every signature is measured against its cost with theirs alone, in the same run.
ENGINES_BEFORE_2026 = (
    *("vllm", "sglang", "llamacpp", "mlx", "tgi", "lmdeploy", "trtllm", "aphrodite", "mlx-vlm"),
    *("llamacpp-python", "ollama", "llamafile", "koboldcpp", "tabbyapi"),
)


def signatures_before_2026() -> str:
    """The signatures JSON of :data:`ENGINES_BEFORE_2026`, in the registry's matching order."""
    from enginespec.definition.registry import all_engines
    from enginespec.definition.signature import signatures_json

    return signatures_json(d.signature for d in all_engines() if d.id in ENGINES_BEFORE_2026)


_NOISE = [
    [],  # kernel threads have an empty cmdline
    ["/sbin/init", "splash"],
    ["/lib/systemd/systemd-journald"],
    ["/lib/systemd/systemd-udevd"],
    ["/usr/sbin/sshd", "-D"],
    ["sshd: root@pts/0"],
    ["-bash"],
    ["/bin/bash", "--login"],
    [
        "/usr/bin/containerd-shim-runc-v2",
        "-namespace",
        "moby",
        "-id",
        "{hex}",
        "-address",
        "/run/containerd.sock",
    ],
    ["/usr/bin/dockerd", "-H", "fd://", "--containerd=/run/containerd/containerd.sock"],
    ["nginx: worker process"],
    ["postgres: 15/main: checkpointer"],
    ["/usr/bin/python3", "/usr/bin/supervisord", "-n", "-c", "/etc/supervisor/supervisord.conf"],
    ["python3", "-m", "ipykernel_launcher", "-f", "/root/.local/share/jupyter/runtime/kernel-{hex}.json"],
    ["python", "train.py", "--model", "meta-llama/Llama-3.1-8B", "--lr", "3e-5", "--port", "{port}"],
    ["/opt/conda/bin/python", "-u", "-m", "torch.distributed.run", "--nproc-per-node", "8", "train.py"],
    ["node", "/srv/app/server.js", "--port", "{port}"],
    ["java", "-Xmx4g", "-jar", "/opt/app/app.jar"],
    ["/usr/lib/jvm/java-17/bin/java", "-cp", "/opt/kafka/libs/*", "kafka.Kafka", "config/server.properties"],
    ["redis-server", "*:6379"],
    ["/usr/bin/nvidia-persistenced", "--user", "nvidia-persistenced"],
    ["sleep", "{port}"],
    ["tail", "-f", "/var/log/llama-server.log"],
    ["grep", "--color=auto", "vllm"],
    ["less", "/opt/venv/bin/vllm"],
    ["/usr/bin/python3", "/usr/local/bin/gunicorn", "app:app", "-w", "4", "-b", "0.0.0.0:{port}"],
    ["/usr/local/bin/ray", "start", "--head", "--port", "{port}"],
    ["htop"],
    ["tmux", "new", "-s", "work"],
]


def host_mix(size: int, engine_share: float = 0.03, seed: int = 7) -> list[list[str]]:
    """`size` argv: `engine_share` of them engine servers from the corpus, the rest ordinary."""
    # Imported here: the soak's workers choose their backend (ENGINESPEC_BACKEND) after this module.
    from enginespec import parse_argv

    rng = random.Random(seed)
    records = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]
    engines = [r["argv"] for r in records if r["engine"] in {"vllm", "sglang", "llamacpp", "mlx"}]
    # Labelled null when the corpus was made; some are servers of engines added since (`ollama
    # serve`): only what is still no engine is a look-alike.
    look_alikes = [r["argv"] for r in records if r["engine"] is None and parse_argv(r["argv"]) is None]
    mix: list[list[str]] = []
    for _ in range(size):
        roll = rng.random()
        if roll < engine_share:
            mix.append(list(rng.choice(engines)))
        elif roll < engine_share + 0.05:
            mix.append(list(rng.choice(look_alikes)))
        else:
            template = rng.choice(_NOISE)
            hex_id = f"{rng.getrandbits(64):016x}"
            port = str(rng.randint(1024, 65535))
            mix.append([part.replace("{hex}", hex_id).replace("{port}", port) for part in template])
    return mix


def build_helper() -> Path:
    """tests/helpers/idle.c compiled into target/bench-data."""
    DATA.mkdir(parents=True, exist_ok=True)
    helper = DATA / "idle"
    subprocess.run(["gcc", "-O1", "-o", str(helper), str(HELPER_SOURCE)], check=True)
    return helper


def spawn(helper: Path, argv: list[str]) -> int:
    return os.posix_spawn(str(helper), [os.fsencode(a) for a in argv], {})


def reap(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


class Host:
    """Extra idle processes whose argv is a host-like mix."""

    def __init__(self, helper: Path) -> None:
        self.helper = helper
        self.pids: list[int] = []
        self.mix = host_mix(10_000, engine_share=0.002, seed=11)

    def grow_to(self, count: int) -> None:
        while len(self.pids) < count:
            argv = self.mix[len(self.pids) % len(self.mix)] or ["kworker/0:1"]
            self.pids.append(spawn(self.helper, argv))

    def stop(self) -> None:
        for pid in self.pids:
            reap(pid)
        self.pids.clear()
