"""The interactive approver: requests reach UIs over channels or a callback, several wait at once
and are answered in any order; a cancelled request (the engine's timeout, the run's interruption)
is withdrawn from every UI; a late or repeated answer is refused; an explicit policy may approve
on timeout. All on the mock clock."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from capabilities.approval import (
    ApprovalClosed,
    ApprovalNotPending,
    ApprovalOpened,
    ApprovalRule,
    ApprovalUpdate,
    InteractiveApproval,
    PendingApproval,
    PolicyApproval,
)
from effectagent import open_runtime
from effectagent.core import (
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequested,
    ToolApprovalDecided,
    ToolRejected,
    ToolSuccess,
)
from effectagent.engine import ApprovalError
from effectagent.testing import ScriptedModel, Turn

from ..conftest import EXAMPLES
from .support import AGENT, TOOLS, calls_turn, run_turns

THREE = calls_turn(
    ("delete_file", "/tmp/a", 0, "call_a"),
    ("write_file", "/tmp/b", 3, "call_b"),
    ("wipe_disk", "/dev/c", 0, "call_c"),
)


async def _opened(
    updates: trio.MemoryReceiveChannel[ApprovalUpdate], n: int
) -> list[PendingApproval]:
    found: list[PendingApproval] = []
    async for update in updates:
        if isinstance(update, ApprovalOpened):
            found.append(update.approval)
            if len(found) == n:
                break
    return found


async def test_several_pending_answered_out_of_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    told: list[ApprovalUpdate] = []
    approver = InteractiveApproval(on_update=told.append)

    async def person() -> None:
        with approver.subscribe() as updates:
            opened = await _opened(updates, 3)
        assert [p.approval_id for p in approver.pending()] == [p.approval_id for p in opened]
        by_call = {p.request.tool_call_id: p for p in opened}
        wipe = by_call["call_c"].request
        assert (wipe.tool_name, wipe.targets, wipe.risk) == ("wipe_disk", ("file:/dev/c",), "high")
        assert wipe.denial_is_terminal
        assert not by_call["call_a"].request.denial_is_terminal
        assert by_call["call_b"].request.summary == "write 3 bytes to /tmp/b"
        assert by_call["call_b"].request.input_preview == {"path": "/tmp/b", "size": 3}
        approver.approve(by_call["call_c"].approval_id, "go ahead", by="ann")
        await trio.sleep(5)
        approver.deny(by_call["call_b"].approval_id, "not now", by="ann")
        await trio.sleep(5)
        approver.approve(by_call["call_a"].approval_id, by="ann")
        with pytest.raises(ApprovalNotPending) as again:
            approver.deny(by_call["call_a"].approval_id)
        assert again.value.state == "approved"

    async with trio.open_nursery() as nursery:
        nursery.start_soon(person)
        ran = await run_turns([THREE], approver.layer())

    assert isinstance(ran.outcome("call_a"), ToolSuccess)
    assert isinstance(ran.outcome("call_c"), ToolSuccess)
    denied = ran.outcome("call_b")
    assert isinstance(denied, ToolRejected)
    assert denied.reason == "approval denied: not now"
    decided = {r.tool_call_id: r.decision for r in ran.records(ToolApprovalDecided)}
    assert {c: (d.approved, d.decided_by) for c, d in decided.items()} == {
        "call_a": (True, "ann"),
        "call_b": (False, "ann"),
        "call_c": (True, "ann"),
    }
    closed = [(u.state, u.reason) for u in told if isinstance(u, ApprovalClosed)]
    assert closed == [("approved", "go ahead"), ("denied", "not now"), ("approved", "")]
    assert approver.pending() == ()


async def test_a_request_the_engine_stops_waiting_for_is_withdrawn_from_every_ui(
    autojump_clock: trio.testing.MockClock,
) -> None:
    told: list[tuple[float, ApprovalUpdate]] = []
    approver = InteractiveApproval(on_update=lambda u: told.append((trio.current_time(), u)))
    seen: list[ApprovalUpdate] = []

    async def screen() -> None:  # a UI that never answers, reading until the runtime closes
        with approver.subscribe() as updates:
            async for update in updates:
                seen.append(update)

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(screen)
        ran = await run_turns(
            [calls_turn(("delete_file", "/tmp/a", 0, "call_a"))], approver.layer()
        )

    (decided,) = ran.records(ToolApprovalDecided)
    assert (decided.decision.approved, decided.decision.decided_by) == (False, "timeout")
    assert [type(u).__name__ for _, u in told] == ["ApprovalOpened", "ApprovalClosed"]
    (when_closed, closed) = told[1]
    assert isinstance(closed, ApprovalClosed)
    assert closed.state == "withdrawn"
    assert when_closed - start == pytest.approx(30)  # AGENT's approval_timeout
    assert seen == [u for _, u in told]  # the subscriber saw the same, and its channel ended
    assert approver.pending() == ()
    with pytest.raises(ApprovalNotPending) as late:
        approver.approve(closed.approval_id)
    assert late.value.state == "withdrawn"


async def test_an_interrupted_run_withdraws_its_pending_approvals(
    autojump_clock: trio.testing.MockClock,
) -> None:
    approver = InteractiveApproval()
    model = ScriptedModel([THREE, Turn.text("never")])
    layer = AGENT.toolkit.handlers(dict.fromkeys(TOOLS, _never_runs)) + model.as_layer()
    with approver.subscribe() as updates:
        async with open_runtime(layer + approver.layer(), agents=[AGENT]) as runtime:
            async with runtime.stream(AGENT, "Go.") as events:
                async for event in events:
                    if isinstance(event, ApprovalRequested) and len(approver.pending()) == 3:
                        break  # leaving the block interrupts the run
            assert approver.pending() == ()
        received = [update async for update in updates]
    opened = {u.approval.approval_id for u in received if isinstance(u, ApprovalOpened)}
    withdrawn = {
        u.approval_id for u in received if isinstance(u, ApprovalClosed) and u.state == "withdrawn"
    }
    assert len(opened) == 3
    assert withdrawn == opened


async def _never_runs(params: Any, call: Any) -> str:
    raise AssertionError("a call whose approval was withdrawn ran")


async def test_an_answer_after_the_request_expired_is_refused_and_denies(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Lateness is judged on the Trio clock, against the request's deadline — not the wall
    clock, which the mock clock leaves where it was."""
    approver = InteractiveApproval()
    request = _request("call_a").in_runtime(None, trio.current_time() + 10)
    decisions: list[ApprovalDecision] = []

    async def ask() -> None:
        decisions.append(await approver.request(request))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await trio.sleep(9.5)
        (on_time,) = approver.pending()
        assert on_time.request.deadline == pytest.approx(on_time.opened_at + 10)
        await trio.sleep(1)  # the deadline passes while the approval is still pending
        with pytest.raises(ApprovalNotPending) as late:
            approver.approve(on_time.approval_id, "sorry, I was away")
        assert late.value.state == "expired"
    (decision,) = decisions
    assert (decision.approved, decision.decided_by) == (False, "expired")
    assert decision.mismatch(request) is None
    assert approver.pending() == ()


async def test_an_answer_before_the_deadline_is_taken(
    autojump_clock: trio.testing.MockClock,
) -> None:
    approver = InteractiveApproval()
    request = _request("call_a").in_runtime(None, trio.current_time() + 10)
    decisions: list[ApprovalDecision] = []

    async def ask() -> None:
        decisions.append(await approver.request(request))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await trio.sleep(10)  # exactly at the deadline is still in time
        (pending,) = approver.pending()
        approver.approve(pending.approval_id, "fine", by="ann")
    assert decisions == [ApprovalDecision.for_request(request, True, "fine", "ann")]


@pytest.mark.parametrize(("on_timeout", "approved"), [("approve", True), ("deny", False)])
async def test_a_timeout_denies_unless_the_policy_explicitly_approves(
    autojump_clock: trio.testing.MockClock, on_timeout: Any, approved: bool
) -> None:
    told: list[ApprovalUpdate] = []
    person = InteractiveApproval(on_update=told.append)
    approval = PolicyApproval(
        [ApprovalRule.ask()], ask=person, ask_timeout=10, on_ask_timeout=on_timeout
    )
    start = trio.current_time()
    ran = await run_turns([calls_turn(("delete_file", "/tmp/a", 0, "call_a"))], approval.layer())
    assert trio.current_time() - start == pytest.approx(10)  # before the engine's 30 s
    (decided,) = ran.records(ToolApprovalDecided)
    assert (decided.decision.approved, decided.decision.decided_by) == (approved, "policy-timeout")
    assert isinstance(ran.outcome("call_a"), ToolSuccess if approved else ToolRejected)
    assert [u.state for u in told if isinstance(u, ApprovalClosed)] == ["withdrawn"]


def _request(call_id: str) -> ApprovalRequest:
    return ApprovalRequest(
        "run", "conv", "ops", "delete_file", call_id, "delete", (), "high", {}, 1e12
    )


async def test_beyond_max_pending_a_request_is_refused_at_once() -> None:
    approver = InteractiveApproval(max_pending=1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(approver.request, _request("call_a"))
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(ApprovalError, match="1 approvals are already waiting"):
            await approver.request(_request("call_b"))
        (pending,) = approver.pending()
        approver.approve(pending.approval_id)


async def test_a_failing_callback_fails_the_request_and_leaves_nothing_pending() -> None:
    def broken(update: ApprovalUpdate) -> None:
        if isinstance(update, ApprovalOpened):
            raise RuntimeError("the screen is gone")

    approver = InteractiveApproval(on_update=broken)
    with approver.subscribe() as updates:
        with pytest.raises(ApprovalError, match="the approval UI failed: RuntimeError"):
            await approver.request(_request("call_a"))
        assert approver.pending() == ()
        opened, closed = updates.receive_nowait(), updates.receive_nowait()
    assert isinstance(opened, ApprovalOpened)
    assert isinstance(closed, ApprovalClosed)
    assert closed.state == "withdrawn"


async def test_a_subscriber_that_falls_behind_is_disconnected_and_others_keep_up() -> None:
    approver = InteractiveApproval(buffer=2)
    lagging = approver.subscribe()
    keeping_up: list[ApprovalUpdate] = []

    async def reader(updates: trio.MemoryReceiveChannel[ApprovalUpdate]) -> None:
        async for update in updates:
            keeping_up.append(update)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader, approver.subscribe())
        await trio.testing.wait_all_tasks_blocked()  # the reader waits before anything is sent
        for n in range(3):
            nursery.start_soon(approver.request, _request(f"call_{n}"))
            await trio.testing.wait_all_tasks_blocked()  # and takes each update as it comes
        assert len(approver.pending()) == 3
        late = approver.subscribe()  # a UI connecting now sees what is pending
        for approval in approver.pending():
            approver.approve(approval.approval_id)
        await trio.testing.wait_all_tasks_blocked()
        approver.close()
    assert len(keeping_up) == 6
    assert [u async for u in lagging] == keeping_up[:2]  # its channel ended where it fell behind
    snapshot = [late.receive_nowait() for _ in range(3)]
    assert [u.approval for u in snapshot if isinstance(u, ApprovalOpened)] == [
        u.approval for u in keeping_up[:3] if isinstance(u, ApprovalOpened)
    ]


def test_bad_answers_and_options_are_refused() -> None:
    approver = InteractiveApproval()
    with pytest.raises(ApprovalNotPending, match="is not pending \\(unknown\\)"):
        approver.approve("approval_nope")
    with pytest.raises(TypeError, match="approved must be a bool"):
        approver.answer("approval_nope", "yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="buffer must be a positive int"):
        InteractiveApproval(buffer=0)
    with pytest.raises(ValueError, match="max_pending must be a positive int"):
        InteractiveApproval(max_pending=0)
    with pytest.raises(TypeError, match="buffer must be an int, got str"):
        InteractiveApproval(buffer="8")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="max_pending must be an int, got float"):
        InteractiveApproval(max_pending=2.0)  # type: ignore[arg-type]


async def test_an_answer_at_the_moment_the_wait_is_cancelled_is_refused() -> None:
    """The run is interrupted and, before the waiting task runs again, a person answers: the
    answer is refused (withdrawn), never reported as taken for a request nobody waits for."""
    told: list[ApprovalUpdate] = []
    approver = InteractiveApproval(on_update=told.append)
    decisions: list[ApprovalDecision] = []
    scope = trio.CancelScope()

    async def ask() -> None:
        with scope:
            decisions.append(await approver.request(_request("call_a")))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        (pending,) = approver.pending()
        scope.cancel()  # the run is interrupted...
        with pytest.raises(ApprovalNotPending) as refused:  # ...as the person answers
            approver.approve(pending.approval_id, by="ann")
        assert refused.value.state == "withdrawn"
        assert approver.pending() == ()
    assert decisions == []
    assert [u.state for u in told if isinstance(u, ApprovalClosed)] == ["withdrawn"]


async def test_an_answer_at_the_engines_deadline_agrees_with_the_recorded_decision(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The engine stops waiting at the deadline: a person answering at that very moment is
    told the answer was refused, as the engine records a timeout."""
    told: list[ApprovalUpdate] = []
    approver = InteractiveApproval(on_update=told.append)
    answers: list[object] = []

    async def person() -> None:
        with approver.subscribe() as updates:
            (opened,) = await _opened(updates, 1)
        assert opened.request.deadline is not None
        await trio.sleep_until(opened.request.deadline)
        try:
            answers.append(approver.answer(opened.approval_id, True, by="ann"))
        except ApprovalNotPending as exc:
            answers.append(exc.state)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(person)
        ran = await run_turns(
            [calls_turn(("delete_file", "/tmp/a", 0, "call_a"))], approver.layer()
        )
    (decided,) = ran.records(ToolApprovalDecided)
    assert (decided.decision.approved, decided.decision.decided_by) == (False, "timeout")
    assert answers == ["withdrawn"]
    assert [u.state for u in told if isinstance(u, ApprovalClosed)] == ["withdrawn"]


async def test_a_callback_may_answer_as_it_is_told_of_the_opening() -> None:
    approver: InteractiveApproval

    def auto(update: ApprovalUpdate) -> None:
        if isinstance(update, ApprovalOpened):
            approver.approve(update.approval.approval_id, "auto", by="bot")

    approver = InteractiveApproval(on_update=auto)
    request = _request("call_a")
    decision = await approver.request(request)
    assert decision == ApprovalDecision.for_request(request, True, "auto", "bot")
    assert approver.pending() == ()


def test_an_answer_names_its_approval_by_a_str() -> None:
    approver = InteractiveApproval()
    with pytest.raises(TypeError, match="approval_id must be a str, got NoneType"):
        approver.approve(None)  # type: ignore[arg-type]


@settings(max_examples=EXAMPLES, deadline=None)
@given(data=st.data())
def test_each_call_of_a_batch_gets_exactly_the_answer_given_for_it_in_any_order(
    data: st.DataObject,
) -> None:
    """A person answers a parallel batch's approvals in any order, after any delays — some at or
    past the engine's deadline (30 s): each call is decided once, by the answer given for it
    when that answer was taken, and denied (timed out) when it was refused."""
    n = data.draw(st.integers(1, 4), label="calls")
    order = data.draw(st.permutations(range(n)), label="order")
    approve = data.draw(st.lists(st.booleans(), min_size=n, max_size=n), label="approve")
    delays = data.draw(
        st.lists(st.sampled_from([0.0, 1.0, 29.5, 30.0, 31.0]), min_size=n, max_size=n),
        label="delays",
    )
    taken: dict[str, bool | str] = {}
    outcome: list[Any] = []

    async def main() -> None:
        person = InteractiveApproval()

        async def ui() -> None:
            with person.subscribe() as updates:
                opened = {p.request.tool_call_id: p for p in await _opened(updates, n)}
            for i in order:
                await trio.sleep(delays[i])
                call_id = f"call_{i}"
                try:
                    person.answer(opened[call_id].approval_id, approve[i], by="ann")
                    taken[call_id] = approve[i]
                except ApprovalNotPending as exc:
                    taken[call_id] = exc.state

        calls = [("delete_file", f"/tmp/{i}", 0, f"call_{i}") for i in range(n)]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ui)
            outcome.append(await run_turns([calls_turn(*calls)], person.layer()))

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    (ran,) = outcome
    decided = {r.tool_call_id: r.decision for r in ran.records(ToolApprovalDecided)}
    assert sorted(decided) == sorted(taken) == [f"call_{i}" for i in range(n)]
    handled = [call_id for call_id, _ in ran.handled]
    assert len(handled) == len(set(handled))  # no call ran twice
    for call_id, answer in taken.items():
        decision = decided[call_id]
        if isinstance(answer, bool):
            assert (decision.approved, decision.decided_by) == (answer, "ann")
        else:  # refused: the engine had stopped waiting
            assert answer == "withdrawn"
            assert (decision.approved, decision.decided_by) == (False, "timeout")
        assert (call_id in handled) == decision.approved


async def test_a_request_cancelled_before_it_starts_is_never_shown() -> None:
    """Cancelled before it starts, a request raises at once: no UI is told of it (before, every
    subscriber and the callback were shown it opened, then withdrawn)."""
    told: list[ApprovalUpdate] = []
    approver = InteractiveApproval(on_update=told.append)
    updates = approver.subscribe()
    with trio.CancelScope() as scope:
        scope.cancel()
        await approver.request(_request("call_a"))
    assert scope.cancelled_caught
    assert told == []
    assert approver.pending() == ()
    with pytest.raises(trio.WouldBlock):
        updates.receive_nowait()
