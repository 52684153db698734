"""llama-server's mean time per output token (`--metrics` counters), read through check_load over
the window of a few streamed completions, against the time per token those requests measured at
the client."""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path
from urllib.parse import urlsplit

from lifecycle import launched, scanned, tiny_recipe, walk
from models import gguf_model

from enginespec import Config, InstallOptions, get_engine_spec
from enginespec.health.load import check_load

REQUESTS = 3
#: long enough that a late first chunk at a busy client (tens of ms) is a small part of it
PREDICT = 1000


def _streamed(url: str) -> tuple[float, float, int]:
    """One streamed completion: the arrival of its first token and of its end
    (``time.monotonic()``), and the tokens the server says it predicted."""
    address = urlsplit(url)
    body = json.dumps({"prompt": "hello", "n_predict": PREDICT, "ignore_eos": True, "stream": True})
    connection = http.client.HTTPConnection(str(address.hostname), address.port, timeout=300)
    try:
        connection.request("POST", "/completion", body, {"Content-Type": "application/json"})
        answer = connection.getresponse()
        assert answer.status == 200, answer.read()
        first: float | None = None
        while True:
            line = answer.readline()
            assert line, "the stream ended without its last chunk"
            if not line.startswith(b"data: "):
                continue
            now = time.monotonic()
            chunk = json.loads(line[6:])
            if first is None:
                first = now
            if chunk.get("stop"):
                return first, now, int(chunk["tokens_predicted"])
    finally:
        connection.close()


def test_llama_server_mean_time_per_token_agrees_with_the_client(
    config: Config, sdist: Path, models_dir: Path, tmp_path: Path
) -> None:
    spec = get_engine_spec("llamacpp")
    spec.install(InstallOptions(source=str(sdist), timeout=5400), config)
    # wide enough that a token takes milliseconds: the client keeps up with the stream
    model = gguf_model(models_dir / "tiny-latency.gguf", hidden=512, layers=8, context=2048)
    recipe = tiny_recipe(
        "llamacpp",
        model,
        max_model_len=2048,
        extra_args={"--metrics": True, "--parallel": "1", "--threads": "1"},
    )
    with launched(recipe, config, tmp_path / "llama-latency.log") as running:
        process = scanned(running.popen.pid)
        assert walk(process, running.popen, timeout=300).states[-1] == "ready", running.output()
        before = check_load(process, timeout=10)
        assert before.available, before
        assert before.latency is None  # one reading
        streams = [_streamed(running.url) for _ in range(REQUESTS)]
        after = check_load(process, previous=before, timeout=10)
    assert after.latency is not None, after
    figure = after.latency.time_per_output_token
    tokens = sum(n for _, _, n in streams)
    assert tokens == REQUESTS * PREDICT
    # the counters moved by exactly the tokens the answers say were predicted
    assert figure.count == tokens, figure
    assert figure.mean is not None, figure
    assert (figure.p50, figure.p95, figure.p99) == (None, None, None)
    # the client's: the time between each request's first token and its end, over its steps;
    # the server's counts the first token too (its time is the prompt's), a 1/1000 difference
    client = sum(end - start for start, end, _ in streams) / sum(n - 1 for _, _, n in streams)
    print(f"llama-server: {figure.mean * 1000:.3f} ms per token, the client measured {client * 1000:.3f} ms")
    assert abs(figure.mean - client) <= 0.10 * client, (figure, client)
