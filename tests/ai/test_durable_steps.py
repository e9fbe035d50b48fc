"""What a tool says about running again: durable steps seen from a handler's
``ToolCallContext`` (only a success is recorded), and what a reconcile function may answer."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from effectagent.ai import Reconciled, StepKey, ToolCallContext
from effectagent.engine import InMemoryStepStore


async def test_a_step_result_that_does_not_fit_its_type_is_refused_and_not_recorded() -> None:
    store = InMemoryStepStore()
    context = ToolCallContext("call_1", "order", run_id="r", conversation_id="c", steps=store)
    runs: list[str] = []

    async def broken() -> object:
        await trio.lowlevel.checkpoint()
        runs.append("broken")
        return "not a number"

    async def fixed() -> int:
        await trio.lowlevel.checkpoint()
        runs.append("fixed")
        return 7

    with pytest.raises(TypeError, match=r"step 'total' returned a str that does not fit type="):
        await context.step("total", 1, broken, type=int)
    assert await store.get(StepKey("c", "r", "call_1", "total", 1)) is None
    # The call runs again (a resumed run, a fixed handler): the step runs, and now records.
    assert await context.step("total", 1, fixed, type=int) == 7
    assert runs == ["broken", "fixed"]


async def test_a_recorded_result_that_no_longer_fits_the_steps_type_names_the_step() -> None:
    store = InMemoryStepStore()
    context = ToolCallContext("call_1", "order", run_id="r", conversation_id="c", steps=store)

    async def old() -> str:
        return "twelve"

    async def new() -> int:
        return 12

    assert await context.step("total", 1, old) == "twelve"  # an earlier version of the handler
    with pytest.raises(
        TypeError,
        match=r"step 'total' version 1: its recorded result does not fit type= \(bump the "
        r"version when what a step returns changes\): \$: expected an integer",
    ):
        await context.step("total", 1, new, type=int)
    assert await context.step("total", 2, new, type=int) == 12


@pytest.mark.parametrize("kind", ["maybe", "Done", "not_done", None])
def test_a_reconciled_answer_of_no_known_kind_is_refused(kind: Any) -> None:
    # Taken for "not-done", it would run again a call that may have taken effect.
    with pytest.raises(ValueError, match=r"Reconciled: kind must be 'done', 'not-done' or"):
        Reconciled(kind)
    with pytest.raises(TypeError, match=r"Reconciled: reason must be a str, got int"):
        Reconciled("unknown", None, 3)  # type: ignore[arg-type]
    assert Reconciled.done(1).kind == "done"
    assert Reconciled.not_done().kind == "not-done"
    assert Reconciled.unknown("no receipt").reason == "no receipt"
