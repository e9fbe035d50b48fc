"""Submissions racing the end of a run, through the real engine.

A durable journal (SQLite, PostgreSQL) persists an admission before its receipt is returned, and
the run goes on meanwhile: it may decide to stop — or begin its grace turn — while the write is
in flight. The journal here is the in-memory one behind a gate that holds each write until the
test lets it go, so that moment is reached every time, on the mock clock.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from typing import Literal

import pytest
import trio
import trio.testing

from capabilities.steering import InputReceipt, SteeringService
from capabilities.steering._admission import Entry
from capabilities.steering._inbox import ConversationInbox
from capabilities.steering._journal import InMemoryJournal
from capabilities.steering._model import InputStatus
from effectagent import Agent, AgentPolicy, open_runtime
from effectagent.ai import ModelRequest
from effectagent.core import UserInputRecorded
from effectagent.effect import Context, Layer, Scope
from effectagent.engine import (
    ConversationLogService,
    InMemoryConversationLog,
    SteeringInboxService,
)
from effectagent.testing import FunctionModel, Turn


class GatedJournal:
    """The in-memory journal, each admission's write held until ``release`` is set (the
    writes of a database that is busy)."""

    durable = True

    def __init__(self, journal: InMemoryJournal) -> None:
        self.journal = journal
        self.writing = trio.Event()
        self.release = trio.Event()

    async def admitted(
        self, entry: Entry, *, room: int | None = None, known: Container[str] = ()
    ) -> int | Literal["queue-full"] | None:
        self.writing.set()
        await self.release.wait()
        return await self.journal.admitted(entry, room=room, known=known)

    async def settle(
        self, conversation_id: str, taken: Sequence[Entry], queued: Sequence[Entry], reason: str
    ) -> None:
        await self.journal.settle(conversation_id, taken, queued, reason)

    async def status(self, input_id: str) -> InputStatus | None:
        return await self.journal.status(input_id)

    async def withdraw(self, entry: Entry) -> None:
        await self.journal.withdraw(entry)


def gated_steering(journals: list[GatedJournal]) -> Layer:
    async def build(context: Context, _: Scope) -> Context:
        journal = GatedJournal(InMemoryJournal(context[ConversationLogService]))
        journals.append(journal)
        inbox = ConversationInbox(journal)
        return Context({SteeringService: inbox, SteeringInboxService: inbox})

    async def build_log(_: Context, __: Scope) -> Context:
        return Context.of(ConversationLogService, InMemoryConversationLog())

    inbox = Layer.from_build(
        "gated_steering",
        provides=[SteeringService, SteeringInboxService],
        requires=[ConversationLogService],
        build=build,
    )
    log = Layer.from_build("log", provides=[ConversationLogService], build=build_log)
    return inbox.provide_merge(log)


@pytest.mark.parametrize("grace", [False, True], ids=["stop", "grace"])
@pytest.mark.parametrize("kind", ["steering", "follow-up"])
async def test_input_still_being_persisted_when_the_run_ends_is_refused_not_expired(
    kind: str, grace: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """The run answers (or begins its grace turn) while an admission is being written: it
    cannot take it, so the receipt says ``"run-ending"`` — not ``accepted`` for an input that then
    expires although its run completed — and ``status`` knows no such input."""
    journals: list[GatedJournal] = []
    receipts: list[InputReceipt] = []
    sent = trio.Event()
    agent = Agent("a", "Answer.", AgentPolicy(max_turns=1))

    async with trio.open_nursery() as nursery:

        async def respond(request: ModelRequest) -> Turn:
            if not journals[0].writing.is_set():  # the first request: submit while it streams
                steering = runtime.context[SteeringService]
                submit = steering.steer if kind == "steering" else steering.follow_up

                async def send() -> None:
                    receipts.append(await submit(conversation, "one more thing", author="ann"))
                    sent.set()

                async def release() -> None:
                    await trio.sleep(1)  # once everything else waits: the run has ended
                    journals[0].release.set()

                nursery.start_soon(send)
                await journals[0].writing.wait()  # reserved, its write in flight
                nursery.start_soon(release)
                if grace:  # the only turn calls a tool: the grace turn follows
                    return Turn.tool_calls(("nothing", {}))
            return Turn.text("done")

        model = FunctionModel(respond)
        layer = model.as_layer() + gated_steering(journals)
        async with open_runtime(layer, agents=[agent]) as runtime:
            conversation = "conv-race"
            result = await runtime.run(agent, "Hi.", conversation_id=conversation, create=True)
            await sent.wait()  # the write goes on once the run is over
            (receipt,) = receipts
            status = await runtime.context[SteeringService].status(receipt.input_id)
            log = list(await runtime.log.entries(conversation))
    assert result.status == "completed"
    taken = [e for e in log if isinstance(e.record, UserInputRecorded) and e.record.kind == kind]
    assert taken == []
    assert (receipt.admission, receipt.rejection) == ("rejected", "run-ending")
    assert status is None
