"""Every behavioural test runs on the backend chosen by ENGINESPEC_BACKEND; `.ci/run` runs the
suite once with `native` and once with `python`."""

from __future__ import annotations

import os

import pytest

import enginespec


def pytest_report_header() -> str:
    return f"enginespec backend: {enginespec.BACKEND}"


@pytest.fixture(scope="session", autouse=True)
def _backend_is_the_one_asked_for() -> None:
    wanted = os.environ.get("ENGINESPEC_BACKEND")
    if wanted:
        assert wanted == enginespec.BACKEND
