"""A test-only engine whose package is a small wheel built by the tests (tests/helpers/wheelkit.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from enginespec import EngineSpec, Launch, LaunchForm, Package, Signature
from helpers.wheelkit import build_wheel

PACKAGE = "enginespec-demo-engine"

MODULE = textwrap.dedent(
    """
    import argparse, sys
    VERSION = "{version}"

    def main():
        parser = argparse.ArgumentParser(prog="demo-engine")
        parser.add_argument("--model")
        parser.add_argument("--port", type=int)
        parser.add_argument("--trust-remote-code", action="store_true")
        parser.add_argument("--version", action="version", version=VERSION)
        parser.parse_args()
    """
)


SPEC = EngineSpec(
    id="demo",
    signature=Signature(
        engine="demo",
        launch_forms=(LaunchForm(executables=("demo-engine",), modules=("demo_engine",)),),
        model_flags=("--model",),
        port_flags=("--port",),
        default_host="127.0.0.1",
        default_port=9999,
    ),
    launch=Launch(kind="console_script", executable="demo-engine", module_args=("-m", "demo_engine")),
    package=Package(distributions=(PACKAGE,)),
)


def build_demo_wheels(wheelhouse: Path, versions: tuple[str, ...] = ("1.0", "2.0")) -> Path:
    for version in versions:
        build_wheel(
            wheelhouse,
            PACKAGE,
            version,
            {"demo_engine.py": MODULE.format(version=version)},
            entry_points={"console_scripts": {"demo-engine": "demo_engine:main"}},
        )
    return wheelhouse
