"""The deployment files (deploy/) run commands enginespec accepts: every container's arguments in
the DaemonSet, and the Dockerfile's default command, parse with the CLI's own parser (their
schemas and lint are checked by .ci/run: kubernetes-validate, hadolint)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from enginespec.cli.app import _parser

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _daemonset() -> dict[str, object]:
    documents = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "daemonset.yaml").read_text()))
    (daemonset,) = [d for d in documents if d["kind"] == "DaemonSet"]
    return daemonset  # type: ignore[no-any-return]


def _containers() -> list[dict[str, object]]:
    return _daemonset()["spec"]["template"]["spec"]["containers"]  # type: ignore[index,no-any-return]


@pytest.mark.parametrize("container", _containers(), ids=lambda c: str(c["name"]))
def test_each_containers_arguments_are_a_command_enginespec_accepts(container: dict[str, object]) -> None:
    parser, _subs = _parser()
    args = parser.parse_args(container["args"])  # type: ignore[arg-type]
    ports = {p["containerPort"] for p in container["ports"]}  # type: ignore[attr-defined]
    listen = getattr(args, "listen", None) or f"{args.host}:{args.port}"
    assert int(listen.rsplit(":", 1)[1]) in ports  # it listens where the pod says


def test_the_scrape_annotations_point_at_the_exporter() -> None:
    template = _daemonset()["spec"]["template"]  # type: ignore[index]
    annotations = template["metadata"]["annotations"]
    (exporter,) = [c for c in _containers() if c["args"][0] == "exporter"]  # type: ignore[index]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) in {p["containerPort"] for p in exporter["ports"]}  # type: ignore[attr-defined]
    assert template["spec"]["hostPID"] is True


def test_the_images_default_command_is_one_enginespec_accepts() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    (command,) = re.findall(r"^CMD (\[.*\])$", text, re.MULTILINE)
    parser, _subs = _parser()
    assert parser.parse_args(json.loads(command)).command == "agent"
