"""llama-server's own load figures (`--metrics`), read through check_load, against its `/slots` and
the completions this test keeps in flight: more requests than slots, so some wait."""

from __future__ import annotations

import http.client
import json
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from lifecycle import launched, scanned, tiny_recipe, walk
from models import gguf_model

from enginespec import Config, InstallOptions, get_engine_spec
from enginespec.health.load import EngineLoad, check_load

SLOTS = 2
REQUESTS = 4
#: long generations (EOS ignored), so that the requests are still running while they are read
PREDICT = 6000


def _slots(url: str) -> list[dict[str, object]]:
    answer = httpx.get(f"{url}/slots", timeout=30)
    assert answer.status_code == 200, answer.text
    slots: list[dict[str, object]] = answer.json()
    return slots


def _processing(url: str) -> int:
    return sum(1 for slot in _slots(url) if slot.get("is_processing"))


def test_llama_server_load_agrees_with_its_slots_and_the_requests_in_flight(
    config: Config, sdist: Path, models_dir: Path, tmp_path: Path
) -> None:
    spec = get_engine_spec("llamacpp")
    spec.install(InstallOptions(source=str(sdist), timeout=5400), config)
    model = gguf_model(models_dir / "tiny-load.gguf", hidden=128, layers=4, context=2 * PREDICT * SLOTS)
    recipe = tiny_recipe(
        "llamacpp",
        model,
        max_model_len=2 * PREDICT * SLOTS,
        extra_args={"--metrics": True, "--parallel": str(SLOTS), "--threads": "1"},
    )
    with launched(recipe, config, tmp_path / "llama-load.log") as running:
        process = scanned(running.popen.pid)
        assert walk(process, running.popen, timeout=300).states[-1] == "ready", running.output()
        idle = check_load(process, timeout=10)
        assert idle.available, idle
        assert (idle.source, idle.requests_running, idle.requests_waiting) == (f"{running.url}/metrics", 0, 0)
        answers: list[dict[str, object]] = []
        errors: list[BaseException] = []

        sent = threading.Semaphore(0)
        address = urlsplit(running.url)
        request = {"prompt": "hello", "n_predict": PREDICT, "ignore_eos": True, "cache_prompt": False}
        body = json.dumps(request)

        def complete() -> None:
            # http.client, not httpx: its request() returns once the whole request is written, so the
            # test knows when every request has reached the server (on a busy host, a thread that
            # had not yet sent its request once made CI read one waiting request of two)
            connection = http.client.HTTPConnection(str(address.hostname), address.port, timeout=600)
            try:
                try:
                    connection.request("POST", "/completion", body, {"Content-Type": "application/json"})
                finally:
                    sent.release()
                answer = connection.getresponse()
                text = answer.read()
                assert answer.status == 200, text
                answers.append(json.loads(text))
            except BaseException as error:  # reported by the test's own thread below
                errors.append(error)
            finally:
                connection.close()

        workers = [threading.Thread(target=complete, daemon=True) for _ in range(REQUESTS)]
        for worker in workers:
            worker.start()
        for _ in workers:
            assert sent.acquire(timeout=120), "a request was not sent in 120 s"
        assert not errors, errors
        # the server reads a request and queues its task in one of its HTTP threads: let them run
        time.sleep(1.0)
        deadline = time.monotonic() + 120
        readings: list[tuple[int, EngineLoad, int]] = []
        previous: EngineLoad | None = None
        # every slot busy and the rest deferred; read between two /slots answers that agree
        while len(readings) < 3:
            assert time.monotonic() < deadline, (readings, running.output())
            assert not answers, ("a request ended before the readings", readings, answers)
            before = _processing(running.url)
            load = check_load(process, previous=previous, timeout=10)
            after = _processing(running.url)
            if before == after == SLOTS and not answers:
                readings.append((before, load, after))
                previous = load
            time.sleep(0.2)
        for slots, load, _ in readings:
            assert load.available, load
            assert (load.requests_running, load.requests_waiting) == (slots, REQUESTS - SLOTS), load
            # The llama.cpp that llama-cpp-python 0.3.35 vendors has no KV-cache gauge (its metrics
            # are listed in tools/server/server-task.cpp): unexposed is None, never 0.
            assert load.kv_cache_usage is None, load
        # llama-server adds a request's tokens to its counter when the request ends: none ended, so
        # the rate is 0 and said so, and its decode calls are what shows it works (never stalled)
        rates = [load.tokens_per_second for _, load, _ in readings[1:]]
        assert rates == [0.0] * len(rates), rates
        for _, load, _ in readings:
            assert "when it ends" in load.reason, load
            assert (load.progress_at, load.stalled) == (load.monotonic, False), load
        print(f"llama-server: {SLOTS} of {REQUESTS} running, {rates} tok/s between readings")
        for worker in workers:
            worker.join(timeout=600)
        assert not errors, errors
        done = check_load(process, timeout=10)
        assert (done.requests_running, done.requests_waiting) == (0, 0), done
        # the counter is the tokens the answers say were predicted, exactly
        predicted = sum(int(str(answer["tokens_predicted"])) for answer in answers)
        assert (len(answers), predicted) == (REQUESTS, REQUESTS * PREDICT), answers
        assert idle.generated_tokens_total is not None
        assert done.generated_tokens_total is not None
        assert done.generated_tokens_total - idle.generated_tokens_total == predicted, (idle, done)
