"""Agent state through the real engine: handlers reach the store through the Layer, and each
write class does what it says across runs that complete, fail and come after — in memory (on
the mock clock) and on SQLite (on the real clock: see ``storage/test_continue.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from capabilities import in_memory_storage, sqlite_storage
from capabilities.approval import SuspendingApproval
from capabilities.state import (
    AgentState,
    AgentStateService,
    Compensatable,
    RunLocal,
    StateSlot,
    Uncertain,
    WithRecord,
)
from effectagent import Agent, AgentPolicy, Tool, ToolCallContext, Toolkit, open_runtime
from effectagent.ai import AuthenticationFailed
from effectagent.core import AgentStateWritten, LogEntry, ToolDefect, approval_decided
from effectagent.effect import Context, Layer
from effectagent.engine import observe_runs, pending_approvals
from effectagent.testing import ScriptedModel, Turn


@attrs.frozen
class Note:
    text: str


@attrs.frozen
class Nothing:
    pass


NOTES = StateSlot("notes", Note)
BOOKINGS = StateSlot("bookings", Note)
SCRATCH = StateSlot("scratch", Note)

book = Tool("book", "Book an event.", parameters=Note, success=Note)
remember = Tool("remember", "Remember a note.", parameters=Note, success=Note)
jot = Tool("jot", "Jot something down for this run.", parameters=Note, success=Note)
reread = Tool("reread", "Read the jotted note back.", parameters=Nothing, success=Note)
send = Tool("send", "Send, with no reply in time.", parameters=Note, success=Note)
check = Tool("check", "What is uncertain?", parameters=Nothing, success=Note)
TOOLKIT = Toolkit(book, remember, jot, reread, send, check)
AGENT = Agent(
    "keeper",
    "Keep state.",
    AgentPolicy(max_turns=6, max_tool_calls=16, max_duration=600, tool_concurrency=1),
    TOOLKIT,
)


class World:
    """The outside world the tools act on: bookings made and cancelled."""

    def __init__(self) -> None:
        self.bookings: list[str] = []
        self.cancelled: list[str] = []
        self.seen: list[Any] = []


def handlers(world: World) -> Layer:
    async def factory(context: Context) -> Mapping[Tool[Any, Any] | str, Any]:
        store: AgentState = context[AgentStateService]

        async def do_book(note: Note, call: ToolCallContext) -> Note:
            world.bookings.append(note.text)

            async def cancel() -> None:
                world.cancelled.append(note.text)

            current = await store.read(BOOKINGS, "ann")
            await store.write(
                BOOKINGS,
                "ann",
                note,
                expected_revision=current.revision,
                write=Compensatable.of(call, cancel),
            )
            return note

        async def do_remember(note: Note, call: ToolCallContext) -> Note:
            current = await store.read(NOTES, "ann")
            await store.write(
                NOTES, "ann", note, expected_revision=current.revision, write=WithRecord.of(call)
            )
            return note

        async def do_jot(note: Note, call: ToolCallContext) -> Note:
            current = await store.read(SCRATCH, "ann", run_id=call.run_id)
            await store.write(
                SCRATCH, "ann", note, expected_revision=current.revision, write=RunLocal.of(call)
            )
            return note

        async def do_reread(_: Nothing, call: ToolCallContext) -> Note:
            view = await store.read(SCRATCH, "ann", run_id=call.run_id)
            world.seen.append(view)
            return view.value or Note("")

        async def do_send(note: Note, call: ToolCallContext) -> Note:
            current = await store.read(NOTES, "outbox")
            await store.write(
                NOTES,
                "outbox",
                note,
                expected_revision=current.revision,
                write=Uncertain.of(call, "the mail server did not answer"),
            )
            return note

        async def do_check(_: Nothing, call: ToolCallContext) -> Note:
            world.seen.append(await store.unsettled())
            return Note("checked")

        return {
            book: do_book,
            remember: do_remember,
            jot: do_jot,
            reread: do_reread,
            send: do_send,
            check: do_check,
        }

    return TOOLKIT.handlers_from(factory, requires=[AgentStateService])


SCRIPT = [
    # Run 1: books, remembers, jots and rereads — then the model fails: the run fails.
    Turn.tool_calls(("book", {"text": "dentist"}), ("remember", {"text": "likes tea"})),
    Turn.tool_calls(("jot", {"text": "draft"}), ("reread", {})),
    Turn.fail(AuthenticationFailed("key revoked")),  # not retried: the run fails
    # Run 2: sends (uncertain), rereads (its own scratch is empty), answers.
    Turn.tool_calls(("send", {"text": "invoice"}), ("reread", {})),
    Turn.text("sent, maybe"),
    # Run 3: looks at what is uncertain, answers.
    Turn.tool_calls(("check", {})),
    Turn.text("one thing is uncertain"),
]


async def scenario(storage: Layer) -> tuple[World, list[Any], list[LogEntry], Any]:
    world = World()
    # The handlers need the store: it is provided to them (provide_merge keeps it for the runtime).
    services = observe_runs(AgentStateService).provide_merge(storage)
    layer = (handlers(world) + ScriptedModel.layer(SCRIPT)).provide_merge(services)
    async with open_runtime(layer, agents=[AGENT]) as runtime:
        first = await runtime.run(AGENT, "Book the dentist.")
        second = await runtime.run(AGENT, "Send the invoice.")
        third = await runtime.run(AGENT, "Anything pending?")
        log = list(await runtime.log.entries(first.conversation_id))
        store = runtime.context[AgentStateService]
        booking = await store.read(BOOKINGS, "ann")
        notes = await store.read(NOTES, "ann")
        outbox = await store.read(NOTES, "outbox")
    statuses = [first.status, second.status, third.status]
    return world, statuses, log, (booking, notes, outbox)


def check_scenario(world: World, statuses: list[Any], log: list[LogEntry], views: Any) -> None:
    booking, notes, outbox = views
    assert statuses == ["failed", "completed", "completed"]
    # Compensatable: the failed run's booking was cancelled and the cell restored.
    assert world.bookings == ["dentist"]
    assert world.cancelled == ["dentist"]
    assert (booking.value, booking.status, booking.revision) == (None, "absent", 2)
    # With a record: committed with its AgentStateWritten in the run's conversation, and kept.
    assert (notes.value, notes.status) == (Note("likes tea"), "committed")
    written = [e.record for e in log if isinstance(e.record, AgentStateWritten)]
    assert [(r.slot, r.key, r.revision) for r in written] == [("notes", "ann", 1)]
    # Run-local: seen by its run, gone for the next.
    first_view, second_view = world.seen[0], world.seen[1]
    assert (first_view.value, first_view.status) == (Note("draft"), "run-local")
    assert (second_view.value, second_view.status) == (None, "absent")
    # Uncertain: stored as such, and the next run saw it.
    assert (outbox.value, outbox.status) == (Note("invoice"), "uncertain")
    (unsettled,) = world.seen[2]
    assert (unsettled.key, unsettled.status, unsettled.reason) == (
        "outbox",
        "uncertain",
        "the mail server did not answer",
    )


async def test_each_write_class_in_memory(autojump_clock: trio.testing.MockClock) -> None:
    check_scenario(*await scenario(in_memory_storage()))


async def test_each_write_class_on_sqlite(tmp_path: Path) -> None:
    check_scenario(*await scenario(sqlite_storage(tmp_path / "state.db")))


async def test_without_observing_runs_run_scoped_writes_are_refused_not_kept(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Forgetting ``observe_runs(AgentStateService)`` cannot silently keep run-local state or
    compensations nobody would settle: the handler's write fails, naming the fix."""
    world = World()
    model = ScriptedModel.layer([Turn.tool_calls(("jot", {"text": "draft"})), Turn.text("done")])
    layer = (handlers(world) + model).provide_merge(in_memory_storage())
    async with open_runtime(layer, agents=[AGENT]) as runtime:
        result = await runtime.run(AGENT, "Jot.")
    (outcome,) = result.outcomes
    assert outcome.kind == "defect"
    assert isinstance(outcome, ToolDefect)
    assert "RunNotObserved" in outcome.message


@pytest.mark.parametrize("storage", ["memory", "sqlite"])
async def test_the_store_is_a_run_observer(storage: str, tmp_path: Path) -> None:
    layer = in_memory_storage() if storage == "memory" else sqlite_storage(tmp_path / "o.db")
    layer = handlers(World()).provide_merge(observe_runs(AgentStateService).provide_merge(layer))
    async with open_runtime(
        ScriptedModel.layer([Turn.text("hi")]) + layer, agents=[AGENT]
    ) as runtime:
        store = runtime.context[AgentStateService]
        await runtime.run(AGENT, "Hi.")
        assert store.active_runs == 0  # type: ignore[attr-defined]


async def test_a_suspended_run_keeps_its_pending_write_until_it_continues_and_completes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Suspension is not a settlement: the booking a run made before it suspended on an approval
    is neither compensated nor committed then; once the decision is in the log and the run
    continues (same run ID, same store) and completes, it is committed."""
    world = World()
    approval_needed = Tool(
        "confirm", "Confirm with a person.", parameters=Note, success=Note, needs_approval=True
    )
    agent = Agent(
        "keeper",
        "Keep state.",
        AGENT.policy,
        Toolkit(book, remember, jot, reread, send, check, approval_needed),
    )

    async def confirm(note: Note, call: ToolCallContext) -> Note:
        return note

    model = ScriptedModel(
        [
            Turn.tool_calls(("book", {"text": "dentist"})),
            Turn.tool_calls(("confirm", {"text": "dentist"})),
            Turn.text("booked"),
        ]
    )
    services = observe_runs(AgentStateService).provide_merge(in_memory_storage())
    tools = handlers(world) + Toolkit(approval_needed).handlers({approval_needed: confirm})
    layer = (tools + model.as_layer() + SuspendingApproval().layer()).provide_merge(services)
    async with open_runtime(layer, agents=[agent]) as runtime:
        store = runtime.context[AgentStateService]
        first = await runtime.run(agent, "Book the dentist.")
        assert first.status == "suspended"
        waiting = await store.read(BOOKINGS, "ann")
        assert (waiting.value, waiting.status) == (Note("dentist"), "pending")
        assert world.cancelled == []
        entries = await runtime.log.entries(first.conversation_id)
        (pending,) = pending_approvals(entries, first.run_id)
        await runtime.log.append(
            first.conversation_id,
            [approval_decided(pending, approved=True, decided_by="ann", at=1.0)],
        )
        resumed = await runtime.resume(
            agent, conversation_id=first.conversation_id, run_id=first.run_id
        )
        assert resumed.status == "completed"
        booked = await store.read(BOOKINGS, "ann")
    assert (booked.value, booked.status) == (Note("dentist"), "committed")
    assert world.cancelled == []
