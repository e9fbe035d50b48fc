"""The durable suite runs on both storage backends: each test that takes ``store`` (or
``backend``) runs once on SQLite and once on PostgreSQL (a fresh schema of the throwaway
cluster ``tests.postgres`` starts, dropped after the test)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .helpers import BACKENDS, Backend, Stores, stores


@pytest.fixture(params=BACKENDS, scope="session")
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each backend in turn (session-scoped: hypothesis tests may take it)."""
    found: Backend = request.param
    return found


@pytest.fixture
def store(backend: Backend, tmp_path: Path) -> Iterator[Stores]:
    """The stores of the test on ``backend``."""
    with stores(backend, tmp_path) as made:
        yield made
