"""Shared test configuration: hypothesis profiles and the mock clock.

Profiles (select with ``HYPOTHESIS_PROFILE``; default ``dev``):

* ``dev`` — 50 examples, quick feedback while editing;
* ``ci`` — 200 examples, what ``make test`` and CI run: *derandomized* (the examples are a function
  of the test alone) and with no example database, so a run is reproducible — the same examples on
  every machine, every time, whatever ran before. (Hypothesis also draws on literals found in the
  project's modules imported so far; every module of the product packages is imported below, before
  any test, so that pool is the same whether one test runs or all of them — a failure CI finds
  reproduces when its test runs alone.)
* ``thorough`` — 2000 random examples, for hunting rare interleavings (``make test-thorough``);
  a failure it finds is saved in the example database and replayed first next time.

No test sleeps for real: a test that needs time requests ``autojump_clock`` and pytest-trio runs it
on a :class:`trio.testing.MockClock` that jumps ahead whenever every task is blocked.
"""

from __future__ import annotations

import importlib
import os
import pkgutil

import pytest
import trio.testing
from hypothesis import HealthCheck, settings

# PostgreSQL: a fresh schema of the throwaway cluster per test (see ``tests.postgres``).
from tests.postgres import postgres_db as postgres_db
from tests.postgres import postgres_schema as postgres_schema

settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=50, deadline=None)
settings.register_profile(
    "thorough",
    max_examples=2000,
    deadline=None,
    derandomize=False,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def _import_the_product() -> None:
    for name in ("effectagent", "capabilities", "sandbox", "examples"):
        package = importlib.import_module(name)
        for module in pkgutil.walk_packages(package.__path__, f"{name}."):
            importlib.import_module(module.name)


_import_the_product()


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    """A mock clock that jumps to the next deadline as soon as every task is blocked."""
    return trio.testing.MockClock(autojump_threshold=0)
