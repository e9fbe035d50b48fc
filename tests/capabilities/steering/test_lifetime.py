"""The inbox's background work lives no longer than the runtime that built it: once
``open_runtime``'s block is left, no task of the steering inbox is left running (and none
touches the closed database)."""

from __future__ import annotations

from pathlib import Path

import trio

from capabilities import sqlite_storage
from effectagent import Agent, open_runtime
from effectagent.testing import ScriptedModel, Turn


def _system_tasks() -> list[str]:
    root = trio.lowlevel.current_root_task()
    assert root is not None
    return sorted(task.name for nursery in root.child_nurseries for task in nursery.child_tasks)


async def test_no_steering_task_outlives_the_runtime(tmp_path: Path) -> None:
    agent = Agent("a", "Answer.")
    before = _system_tasks()
    layer = ScriptedModel.layer([Turn.text("hi")]) + sqlite_storage(tmp_path / "s.db")
    async with open_runtime(layer, agents=[agent]) as runtime:
        await runtime.run(agent, "hello")
    assert _system_tasks() == before
