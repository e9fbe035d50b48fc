"""Fixtures of the Code Mode suites: a tracked, bare Deno executor per test (see ``scenario``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox import DenoCodeExecutor
from tests.sandbox.test_code_fixtures import WorkloadTracker


@pytest.fixture
def tracker() -> Iterator[WorkloadTracker]:
    """Every workload of the test's executors, checked to be gone afterwards."""
    tracker = WorkloadTracker()
    yield tracker
    tracker.assert_clean()


@pytest.fixture
def executor(tracker: WorkloadTracker) -> DenoCodeExecutor:
    """A bare, bubblewrap-isolated Deno executor (each pass spawns cold), tracked."""
    return DenoCodeExecutor(on_acquire=tracker.record)
