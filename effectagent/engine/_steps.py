"""The runtime's default store of durable steps' results: in process memory, for a run's life.

A step's result (``ToolCallContext.step``) is kept from the moment it is recorded until its run
ends — completed, failed or interrupted; a run that suspended keeps its results, for
``Runtime.resume`` in the same runtime. So a call run again within its run (a resumed batch, an
idempotent tool run a second time) finds its steps' results, and a finished run leaves nothing
behind. Results that must outlive the process belong in a durable store (``StepStoreService``).
"""

from __future__ import annotations

from typing import final

import trio

from effectagent.ai import StepKey, StepResult
from effectagent.effect import JSONValue

__all__ = ["InMemoryStepStore"]


@final
class InMemoryStepStore:
    """Durable steps' results in memory, by run (see the module notes)."""

    __slots__ = ("_runs",)

    def __init__(self) -> None:
        self._runs: dict[str, dict[StepKey, StepResult]] = {}

    async def get(self, key: StepKey) -> StepResult | None:
        """The recorded result of ``key``, or None.

        Cancellation: a cancellation point before anything is read."""
        await trio.lowlevel.checkpoint_if_cancelled()
        results = self._runs.get(key.run_id)
        return None if results is None else results.get(key)

    async def put(self, key: StepKey, value: JSONValue) -> StepResult:
        """Record ``value`` for ``key`` unless a result is recorded already; return the recorded
        one.

        Cancellation: a cancellation point before anything is recorded (all or nothing)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        return self._runs.setdefault(key.run_id, {}).setdefault(key, StepResult(value))

    def forget(self, run_id: str) -> None:
        """Drop the results of ``run_id`` (its run ended)."""
        self._runs.pop(run_id, None)

    @property
    def runs(self) -> int:
        """How many runs have results kept."""
        return len(self._runs)
