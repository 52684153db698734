"""launch / wait_ready / stop with real engines (marker real_engine): the failures they really
print are classified, and a served engine stops leaving nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from lifecycle import HOST, free_port
from models import broken_gguf, gguf_model, hf_model

from enginespec import Config, InstallOptions, LaunchFailed, Recipe, get_engine_spec, launch


def _failure(recipe: Recipe, config: Config, log_dir: Path) -> LaunchFailed:
    engine = launch(recipe, config, log_dir=log_dir)
    try:
        with pytest.raises(LaunchFailed) as raised:
            engine.wait_ready(timeout=300)
    finally:
        engine.close()
    print(raised.value)
    return raised.value


def test_llama_server_failures_are_classified(
    config: Config, sdist: Path, models_dir: Path, tmp_path: Path
) -> None:
    spec = get_engine_spec("llamacpp")
    spec.install(InstallOptions(source=str(sdist), timeout=5400), config)
    model = gguf_model(models_dir / "tiny.gguf")
    recipe = Recipe(engine="llamacpp", model_path=str(model), host=HOST, port=free_port(), max_model_len=256)
    logs = tmp_path / "logs"
    bad_flag = _failure(recipe.model_copy(update={"extra_args": {"--no-such-flag": True}}), config, logs)
    assert bad_flag.failure.kind == "bad_flag"
    assert any("--no-such-flag" in line for line in bad_flag.failure.cause_lines)
    missing = _failure(recipe.model_copy(update={"model_path": str(tmp_path / "nope.gguf")}), config, logs)
    assert missing.failure.kind == "model_not_found"
    assert missing.failure.exit_code == 1
    broken = _failure(
        recipe.model_copy(update={"model_path": str(broken_gguf(models_dir / "broken.gguf"))}), config, logs
    )
    assert broken.failure.kind in ("corrupt_model", "model_not_found")
    # a served engine: a second one on its port is refused naming it; stop leaves nothing
    engine = launch(recipe, config, log_dir=logs)
    try:
        assert engine.wait_ready(timeout=300).state == "ready"
        with pytest.raises(LaunchFailed) as taken:
            launch(recipe, config, log_dir=logs)
        assert taken.value.failure.kind == "port_in_use"
        assert taken.value.failure.cause_lines == (
            f"port {recipe.port} is held by pid {engine.pid}: llamacpp {model}",
        )
        result = engine.stop(grace=10)
        assert (result.leftover, result.port_holders) == ((), ())
    finally:
        engine.close()


def test_mlx_model_that_cannot_load_is_classified(config: Config, models_dir: Path, tmp_path: Path) -> None:
    spec = get_engine_spec("mlx")
    spec.install(InstallOptions(installer="pip", timeout=3600), config)
    hf_home = tmp_path / "hf-home"
    (hf_home / "hub").mkdir(parents=True)
    env = {"HF_HOME": str(hf_home)}
    # a model folder without weights
    weightless = models_dir / "mlx-weightless"
    shutil.copytree(hf_model(models_dir / "mlx-source"), weightless)
    (weightless / "model.safetensors").unlink()
    recipe = Recipe(engine="mlx", model_path=str(weightless), host=HOST, port=free_port(), env_vars=env)
    failed = _failure(recipe, config, tmp_path / "logs")
    assert failed.failure.kind == "model_not_found", failed
    # an architecture mlx-lm does not have
    alien = models_dir / "mlx-alien"
    shutil.copytree(models_dir / "mlx-source", alien)
    config_json = json.loads((alien / "config.json").read_text())
    (alien / "config.json").write_text(json.dumps({**config_json, "model_type": "no_such_arch"}))
    failed = _failure(recipe.model_copy(update={"model_path": str(alien)}), config, tmp_path / "logs")
    assert failed.failure.kind == "unsupported_architecture", failed
