"""pytest plugin: fails the run unless the suite tests the installed enginespec (see installed_package.py).

    ENGINESPEC_CI_VENV=VENV ENGINESPEC_CI_BACKEND=native|python \\
        PYTHONPATH=ci PYTEST_ADDOPTS="-p pytest_installed_package" python -m pytest

Checked once the tests are collected (conftest and every test module imported) and again at the end.
"""

from __future__ import annotations

import os
import sys

import pytest
from installed_package import problems


def _from_env() -> list[str]:
    return problems(os.environ["ENGINESPEC_CI_BACKEND"], os.environ["ENGINESPEC_CI_VENV"])


def pytest_collection_finish(session: pytest.Session) -> None:
    found = _from_env()
    if found:
        pytest.exit("not testing the installed package: " + "; ".join(found), returncode=3)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Modules imported while the tests ran must come from the installed copy too.
    found = _from_env()
    if found:
        print("\nnot testing the installed package: " + "; ".join(found), file=sys.stderr)
        session.exitstatus = 3
    else:
        build = os.environ["ENGINESPEC_CI_BACKEND"]
        print(f"\ninstalled_package: enginespec from {sys.prefix} ({build} build)")
