"""The key of one running engine is ``instance_id`` in Python (``engine`` is the engine's id); its
documents keep the key ``engine_id``, which other systems and agents of the previous release read
and write, and the old attribute still reads, with a DeprecationWarning, for one release."""

from __future__ import annotations

import json

import pytest

import enginespec
from enginespec import EngineIdentity, EngineLoad, EngineProcess, RunningEngine, Stopped
from enginespec.process.record import make_instance_id
from enginespec.scanning.watch import event_json, event_schema, parse_event
from enginespec.untrusted.documents import dumps

# What the previous release wrote, byte for byte: a record as `ps --json` and the agent give it,
# a `watch --json` line, and a load reading.
OLD_PROCESS = (
    '{"engine":"vllm","model":"/models/m","served_model_names":["m"],"host":null,"port":8000,'
    '"effective_host":"127.0.0.1","effective_port":8000,"role":"server","problems":[],"pid":4242,'
    '"start_time":1700000000.25,"ppid":1,"base_url":"http://127.0.0.1:8000","sources":{},'
    '"argv":["vllm","serve","/models/m"],"exe":null,"worker_pids":[4243],"supervisor":null,'
    '"listen_ports":[8000],"server_pid":null,"port_conflicts":[],"container":null,'
    '"private_network":false,"published":[],"gpus":[],"gpus_unknown":null,"served_model_name":"m",'
    '"engine_id":"vllm-8000-5c5200cf"}'
)
OLD_STOPPED = (
    '{"type":"stopped","monotonic":5.5,"identity":{"engine_id":"vllm-8000-5c5200cf","pid":4242,'
    '"start_time":1700000000.25,"engine":"vllm"}}'
)
OLD_LOAD = (
    '{"engine":"vllm","engine_id":"vllm-8000-5c5200cf","pid":4242,"base_url":null,"source":"none",'
    '"available":false,"reason":"","read_at":1.0,"requests_running":null,"requests_waiting":null,'
    '"kv_cache_usage":null,"prompt_tokens_total":null,"generated_tokens_total":null,'
    '"tokens_per_second":null,"models_loaded":null,"cpu_seconds":null,"progress_at":null,'
    '"stall_after":null,"stalled":false,"monotonic":2.0}'
)
KEY = "vllm-8000-5c5200cf"


def _compact(document: object) -> str:
    return dumps(document, separators=(",", ":"))


def test_a_record_reads_and_writes_the_documents_of_the_previous_release() -> None:
    process = EngineProcess.model_validate(json.loads(OLD_PROCESS))
    assert process.instance_id == KEY == make_instance_id("vllm", "/models/m", 8000)
    # what ps --json prints: the same, and the model's name as people say it (`model_name`), and
    # the release it runs (`engine_version`: none, for a record no scan made), and the engine's
    # fork its argv shows (`fork`: none for vLLM's own)
    assert json.loads(_compact(process.model_dump(mode="json"))) == {
        **json.loads(OLD_PROCESS),
        "model_name": "/models/m",
        "engine_version": None,
        "fork": None,
    }
    assert json.loads(process.model_dump_json())["engine_id"] == KEY
    assert "instance_id" not in process.model_dump()  # a caller's own dump keeps the key too
    assert process.model_dump()["engine_id"] == KEY


def test_a_watch_event_and_a_load_reading_keep_their_key() -> None:
    event = parse_event(OLD_STOPPED)
    assert isinstance(event, Stopped)
    assert event.identity.instance_id == KEY
    # the old form still parses; written again, it gains how the process ended (not known here)
    assert json.loads(event_json(event)) == {
        **json.loads(OLD_STOPPED),
        "exited": False,
        "status": None,
        "signal": None,
    }
    identity = event_schema()["$defs"]["EngineIdentity"]
    assert "engine_id" in identity["properties"]
    assert "engine_id" in identity["required"]
    # built by either name, as JSON of either release is
    assert EngineIdentity(engine_id=KEY, pid=1, start_time=1.0, engine="vllm") == EngineIdentity(
        instance_id=KEY, pid=1, start_time=1.0, engine="vllm"
    )
    load = EngineLoad.model_validate_json(OLD_LOAD)
    assert load.instance_id == KEY
    # written again, it gains the latency and the joules per token over a window (none: one reading)
    assert json.loads(load.model_dump_json()) == {
        **json.loads(OLD_LOAD),
        "latency": None,
        "joules_per_token": None,
    }
    assert EngineLoad.model_validate({**json.loads(OLD_LOAD), "engine_id": None}).instance_id is None


def test_the_old_attribute_reads_the_key_with_a_warning() -> None:
    process = EngineProcess.model_validate(json.loads(OLD_PROCESS))
    running = RunningEngine(
        enginespec.get_engine_spec("vllm"), None, log_dir=None, port=8000, host="127.0.0.1", model="/models/m"
    )
    event = parse_event(OLD_STOPPED)
    assert isinstance(event, Stopped)
    records: list[tuple[str, object]] = [
        ("EngineProcess", process),
        ("EngineIdentity", event.identity),
        ("EngineLoad", EngineLoad.model_validate_json(OLD_LOAD)),
        ("RunningEngine", running),
    ]
    for name, record in records:
        assert getattr(record, "instance_id") == KEY  # noqa: B009
        with pytest.warns(DeprecationWarning, match=rf"renamed {name}\.engine_id to {name}\.instance_id"):
            assert getattr(record, "engine_id") == KEY  # noqa: B009
        # the suite itself may not use the old name (pyproject's filterwarnings)
        with pytest.raises(DeprecationWarning, match="enginespec renamed"):
            getattr(record, "engine_id")  # noqa: B009
