"""The storage tests that are about the port, not about SQLite's file, run on both backends:
each test that takes ``store`` runs once on SQLite and once on PostgreSQL (a fresh schema of the
throwaway cluster, dropped after the test) — the stores of the durable suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.capabilities.durable.helpers import BACKENDS, Backend, Stores, stores


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    """The stores of the test on each backend in turn."""
    backend: Backend = request.param
    with stores(backend, tmp_path) as made:
        yield made
