"""in_context: a coroutine run in the awaiting task, in a context of its own, noticing each wait.

What a child task would give a tool call, kept without the task: its own copy of the context
(nothing it sets leaks out), Trio's waits, cancellation and nurseries working inside it, its result
or exception handed back as they are — and a hook each time it is about to wait.
"""

from __future__ import annotations

import contextvars
from collections.abc import Coroutine
from typing import Any

import pytest
import trio
import trio.testing

from effectagent.engine._eager import in_context

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="outer")


async def _in_own_context(coro: Coroutine[Any, Any, Any], on_wait: Any = None) -> Any:
    return await in_context(coro, contextvars.copy_context(), on_wait)


async def test_returns_the_coroutines_value_and_sees_a_copy_of_the_context() -> None:
    VAR.set("caller")

    async def body() -> str:
        seen = VAR.get()
        VAR.set("inner")
        return f"{seen}->{VAR.get()}"

    assert await _in_own_context(body()) == "caller->inner"
    assert VAR.get() == "caller"  # what the coroutine set stayed in its copy


async def test_a_context_change_survives_its_own_waits_and_never_leaks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def body() -> str:
        VAR.set("inner")
        await trio.sleep(1)
        await trio.lowlevel.checkpoint()
        return VAR.get()

    assert await _in_own_context(body()) == "inner"
    assert VAR.get() == "outer"


async def test_on_wait_is_called_each_time_it_yields_to_the_scheduler(
    autojump_clock: trio.testing.MockClock,
) -> None:
    waits: list[float] = []

    async def body() -> None:
        await trio.sleep(1)
        await trio.lowlevel.checkpoint()
        await trio.sleep(2)

    await _in_own_context(body(), lambda: waits.append(trio.current_time()))
    assert waits == [0.0, 1.0, 1.0]


async def test_a_coroutine_that_never_waits_never_calls_on_wait() -> None:
    calls = []

    async def body() -> int:
        await trio.lowlevel.checkpoint_if_cancelled()  # a cancellation point, not a wait
        return 7

    assert await _in_own_context(body(), lambda: calls.append(1)) == 7
    assert calls == []


async def test_an_exception_propagates_unchanged() -> None:
    class Boom(Exception):
        pass

    async def body() -> None:
        await trio.lowlevel.checkpoint()
        raise Boom("bang")

    with pytest.raises(Boom, match="bang"):
        await _in_own_context(body())


async def test_cancellation_reaches_the_coroutine_which_may_clean_up(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cleaned: list[str] = []

    async def body() -> None:
        try:
            await trio.sleep_forever()
        finally:
            cleaned.append(VAR.get())

    with trio.move_on_after(5) as scope:
        VAR.set("caller")
        await _in_own_context(body())
    assert scope.cancelled_caught
    assert cleaned == ["caller"]


async def test_a_coroutine_may_catch_a_cancellation_and_return(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def body() -> str:
        try:
            await trio.sleep(10)
        except trio.Cancelled:
            return "absorbed"
        return "not reached"

    with trio.move_on_after(1):
        assert await _in_own_context(body()) == "absorbed"
        await trio.lowlevel.checkpoint()  # the scope is still cancelled: this raises
        raise AssertionError("not reached")


async def test_a_nursery_inside_works_and_its_children_inherit_the_inner_context(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[str] = []

    async def child() -> None:
        await trio.sleep(1)
        seen.append(VAR.get())

    async def body() -> None:
        VAR.set("inner")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(child)
            nursery.start_soon(child)

    await _in_own_context(body())
    assert seen == ["inner", "inner"]
    assert VAR.get() == "outer"


async def test_it_runs_in_the_awaiting_task() -> None:
    async def body() -> trio.lowlevel.Task:
        await trio.lowlevel.checkpoint()
        return trio.lowlevel.current_task()

    assert await _in_own_context(body()) is trio.lowlevel.current_task()


def test_closing_the_awaiting_coroutine_closes_the_inner_one() -> None:
    closed: list[bool] = []

    async def inner() -> None:
        try:
            await trio.lowlevel.checkpoint()
        finally:
            closed.append(True)

    async def outer() -> None:
        await in_context(inner(), contextvars.copy_context())

    coro = outer()
    coro.send(None)  # runs to the inner checkpoint's yield (no Trio run needed to get there)
    coro.close()
    assert closed == [True]
