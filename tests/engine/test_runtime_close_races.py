"""Closing the runtime while a run has been claimed but has not started executing yet — its
conversation's history is being read — must not wait for ever for a run that never executes:
the stream entered then is refused ("the runtime is closed"), a run refused meanwhile
(``UnknownConversation``) or cancelled meanwhile is let go, and the close ends."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
import trio
import trio.testing

from effectagent.core import LogEntry
from effectagent.effect import Layer
from effectagent.engine import (
    ConversationLogService,
    InMemoryConversationLog,
    Runtime,
    UnknownConversation,
    open_runtime,
)
from effectagent.engine._driver import RunDriver
from effectagent.testing import Turn

from .helpers import TrackingModel, make_agent


class _GatedLog:
    """An in-memory log whose ``entries`` waits for ``gate`` once ``armed``."""

    def __init__(self) -> None:
        self.inner = InMemoryConversationLog()
        self.armed = False
        self.gate = trio.Event()
        self.reading = trio.Event()

    async def entries(self, conversation_id: str, *, after: int = 0) -> Sequence[LogEntry]:
        if self.armed:
            self.reading.set()
            await self.gate.wait()
        return await self.inner.entries(conversation_id, after=after)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def layer(self) -> Layer:
        return Layer.succeed(ConversationLogService, self, name="GatedLog")


Use = Callable[[Runtime, str, trio.CancelScope], Awaitable[object]]


async def _close_while_history_is_read(
    use: Use, monkeypatch: pytest.MonkeyPatch, *, cancel: bool = False
) -> object:
    """Start ``use`` on a runtime, close the runtime while ``use``'s run reads its history, then
    let the read end (or cancel ``use``). Returns what ``use`` returned or raised; fails — rather
    than hanging — if the close did not end."""
    claimed: list[RunDriver] = []
    claim = Runtime._claim

    def claim_and_note(self: Runtime, driver: RunDriver) -> None:
        claimed.append(driver)
        claim(self, driver)

    monkeypatch.setattr(Runtime, "_claim", claim_and_note)
    log = _GatedLog()
    agent = make_agent()
    model = TrackingModel([Turn.text("Hello."), Turn.text("Again.")])
    closed = trio.Event()
    outcome: list[object] = []
    user_scope = trio.CancelScope()

    async with trio.open_nursery() as nursery:

        async def user(runtime: Runtime, conversation_id: str) -> None:
            try:
                outcome.append(await use(runtime, conversation_id, user_scope))
            except Exception as exc:
                outcome.append(exc)

        async def host() -> None:
            async with open_runtime(model.layer() + log.layer(), agents=[agent]) as runtime:
                first = await runtime.run(agent, "Hi.")
                log.armed = True
                nursery.start_soon(user, runtime, first.conversation_id)
                await log.reading.wait()
                # Leaving the block closes the runtime while the user's run reads its history.
            closed.set()

        nursery.start_soon(host)
        await trio.sleep(1)
        if cancel:
            user_scope.cancel()
        else:
            log.gate.set()
        await trio.sleep(1)
        hung = not closed.is_set()
        if hung:  # unstick the close's shielded wait, so the test fails instead of hanging
            for driver in claimed:
                driver.finished = True
                if driver._done is not None:
                    driver._done.set()
    assert not hung, "closing the runtime waited for ever for a run that never executed"
    (result,) = outcome
    return result


async def test_a_stream_entered_as_the_runtime_closes_is_refused_and_the_close_ends(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def use(runtime: Runtime, conversation_id: str, scope: trio.CancelScope) -> object:
        async with runtime.stream(make_agent(), "More.", conversation_id=conversation_id):
            return "entered"

    result = await _close_while_history_is_read(use, monkeypatch)
    assert isinstance(result, RuntimeError)
    assert "closed" in str(result)


async def test_a_run_refused_as_the_runtime_closes_lets_the_close_end(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def use(runtime: Runtime, conversation_id: str, scope: trio.CancelScope) -> object:
        return await runtime.run(make_agent(), "More.", conversation_id="unknown")

    result = await _close_while_history_is_read(use, monkeypatch)
    assert isinstance(result, UnknownConversation)


async def test_a_run_cancelled_before_it_started_as_the_runtime_closes_lets_the_close_end(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def use(runtime: Runtime, conversation_id: str, scope: trio.CancelScope) -> object:
        with scope:
            await runtime.run(make_agent(), "More.", conversation_id=conversation_id)
        return "cancelled" if scope.cancelled_caught else "ran"

    result = await _close_while_history_is_read(use, monkeypatch, cancel=True)
    assert result == "cancelled"


async def test_a_run_coroutine_awaited_after_the_runtime_closed_is_refused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent()
    model = TrackingModel([Turn.text("Hello.")])
    async with open_runtime(model.layer(), agents=[agent]) as runtime:
        late = runtime.run(agent, "Hi.")  # made while open: it claims the run when awaited
    with pytest.raises(RuntimeError, match="closed"):
        await late
    assert runtime.active_runs == 0
    assert model.requests == []  # nothing ran on the torn-down services


async def test_a_run_coroutine_awaited_while_the_runtime_closes_is_refused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent()
    model = TrackingModel([Turn.hanging()])
    outcome: list[object] = []
    async with trio.open_nursery() as nursery:
        async with open_runtime(model.layer(), agents=[agent]) as runtime:
            going = runtime.run(agent, "First.")  # a run the close interrupts and waits for
            late = runtime.run(agent, "Second.")

            async def run_going() -> None:
                await going

            async def run_late() -> None:
                await trio.lowlevel.checkpoint()  # awaited while the close waits for ``going``
                try:
                    outcome.append(await late)
                except RuntimeError as exc:
                    outcome.append(exc)

            nursery.start_soon(run_going)
            await trio.sleep(1)
            nursery.start_soon(run_late)
        assert runtime.active_runs == 0  # no run outlives the runtime's block
    (result,) = outcome
    assert isinstance(result, RuntimeError)
